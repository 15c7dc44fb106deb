// --debug=fusion explains each decision on stderr: merged with the bytes saved, refused with
// the reason.
// RUN: lezero-opt %s -p partition --debug=fusion 2>&1 >/dev/null | filecheck %s
// RUN: lezero-opt %s -p "partition{max-ops=2}" --debug=fusion 2>&1 >/dev/null | filecheck %s --check-prefix=MAX
// RUN: lezero-opt %s -p partition 2>&1 | filecheck %s --check-prefix=QUIET

// QUIET-NOT: fusion:

// CHECK: fusion: @mlp: merged lz_fused_matmul (line 17) + lz_fused_add (line 18) -> lz_fused_matmul_add (line 17) (matmul), saves 131072 bytes
// CHECK: fusion: @mlp: merged lz_fused_matmul_add (line 17) + lz_fused_relu (line 19) -> lz_fused_matmul_add_relu (line 17) (matmul), saves 131072 bytes
// CHECK: fusion: @mlp: refused lz_fused_matmul_add_relu (line 17) + lz_fused_matmul (line 20): a kernel holds one contraction: 'lz.matmul' and 'lz.matmul' (would save 131072 bytes)
// CHECK: fusion: @mlp: refused lz_fused_matmul_add (line 20) + lz_fused_reduce_max (line 22): a matmul kernel holds no reduction ('lz.reduce_max')
// CHECK: fusion: @mlp: refused lz_fused_matmul_add (line 20) + lz_fused_sub_exp (line 23): would create a cycle through lz_fused_reduce_max (line 22)
// MAX: fusion: @mlp: refused lz_fused_matmul_add (line 17) + lz_fused_relu (line 19): max-ops=2 reached
func.func @mlp(%x: tensor<64x784xf32>, %w1: tensor<784x256xf32>, %b1: tensor<256xf32>,
               %w2: tensor<256x10xf32>, %b2: tensor<10xf32>) -> tensor<64x10xf32> {
  %0 = "lz.matmul"(%x, %w1) : (tensor<64x784xf32>, tensor<784x256xf32>) -> tensor<64x256xf32>
  %1 = "lz.add"(%0, %b1) : (tensor<64x256xf32>, tensor<256xf32>) -> tensor<64x256xf32>
  %2 = "lz.relu"(%1) : (tensor<64x256xf32>) -> tensor<64x256xf32>
  %3 = "lz.matmul"(%2, %w2) : (tensor<64x256xf32>, tensor<256x10xf32>) -> tensor<64x10xf32>
  %4 = "lz.add"(%3, %b2) : (tensor<64x10xf32>, tensor<10xf32>) -> tensor<64x10xf32>
  %5 = "lz.reduce_max"(%4) {axes = array<i64: 1>, keepdims = true} : (tensor<64x10xf32>) -> tensor<64x1xf32>
  %6 = "lz.sub"(%4, %5) : (tensor<64x10xf32>, tensor<64x1xf32>) -> tensor<64x10xf32>
  %7 = "lz.exp"(%6) : (tensor<64x10xf32>) -> tensor<64x10xf32>
  %8 = "lz.reduce_sum"(%7) {axes = array<i64: 1>, keepdims = true} : (tensor<64x10xf32>) -> tensor<64x1xf32>
  %9 = "lz.div"(%7, %8) : (tensor<64x10xf32>, tensor<64x1xf32>) -> tensor<64x10xf32>
  func.return %9 : tensor<64x10xf32>
}

// CHECK: fusion: @shapes: refused lz_fused_exp (line 40) + lz_fused_transpose (line 41): 'lz.transpose' must read its input from memory, not from 'lz.exp' in the same kernel
// CHECK: fusion: @shapes: refused lz_fused_reduce_max (line 36) + lz_fused_sub_add (line 37): 'lz.sub' reads 'lz.reduce_max' (shape 4) broadcast along other axes than the reduced [1] (keep the reduced dims)
// CHECK: fusion: @shapes: refused lz_fused_neg (line 42) + lz_fused_sub_add (line 37): iteration space 4x1 differs from 4x4
// CHECK: fusion: @shapes: refused lz_fused_matmul (line 38) + lz_fused_add (line 39): matmul epilogue must have the matmul's shape: 'lz.add' gives 4x4, the matmul 4x1
func.func @shapes(%x: tensor<4x4xf32>, %w: tensor<4x1xf32>)
    -> (tensor<4x4xf32>, tensor<4x4xf32>, tensor<4x4xf32>, tensor<4x1xf32>) {
  %0 = "lz.reduce_max"(%x) {axes = array<i64: 1>} : (tensor<4x4xf32>) -> tensor<4xf32>
  %1 = "lz.sub"(%x, %0) : (tensor<4x4xf32>, tensor<4xf32>) -> tensor<4x4xf32>
  %2 = "lz.matmul"(%x, %w) : (tensor<4x4xf32>, tensor<4x1xf32>) -> tensor<4x1xf32>
  %3 = "lz.add"(%2, %x) : (tensor<4x1xf32>, tensor<4x4xf32>) -> tensor<4x4xf32>
  %4 = "lz.exp"(%x) : (tensor<4x4xf32>) -> tensor<4x4xf32>
  %5 = "lz.transpose"(%4) {perm = array<i64: 1, 0>} : (tensor<4x4xf32>) -> tensor<4x4xf32>
  %6 = "lz.neg"(%w) : (tensor<4x1xf32>) -> tensor<4x1xf32>
  %7 = "lz.add"(%6, %1) : (tensor<4x1xf32>, tensor<4x4xf32>) -> tensor<4x4xf32>
  func.return %3, %5, %7, %2 : tensor<4x4xf32>, tensor<4x4xf32>, tensor<4x4xf32>, tensor<4x1xf32>
}

// A matmul reads its weight through a transpose (x @ w.T): the transpose joins its kernel, unless
// something else reads the transposed value too.
// CHECK: fusion: @linear: merged lz_fused_transpose (line 53) + lz_fused_matmul (line 54) -> lz_fused_transpose_matmul (line 53) (matmul), saves 32768 bytes
// CHECK: fusion: @linear: refused lz_fused_transpose (line 55) + lz_fused_matmul (line 56): 'lz.transpose' feeding the matmul is also read outside the kernel (would save 4096 bytes)
func.func @linear(%x: tensor<64x32xf32>, %w: tensor<128x32xf32>, %v: tensor<32x32xf32>)
    -> (tensor<64x128xf32>, tensor<64x32xf32>, tensor<32x32xf32>) {
  %wt = "lz.transpose"(%w) {perm = array<i64: 1, 0>} : (tensor<128x32xf32>) -> tensor<32x128xf32>
  %0 = "lz.matmul"(%x, %wt) : (tensor<64x32xf32>, tensor<32x128xf32>) -> tensor<64x128xf32>
  %vt = "lz.transpose"(%v) {perm = array<i64: 1, 0>} : (tensor<32x32xf32>) -> tensor<32x32xf32>
  %1 = "lz.matmul"(%x, %vt) : (tensor<64x32xf32>, tensor<32x32xf32>) -> tensor<64x32xf32>
  func.return %0, %1, %vt : tensor<64x128xf32>, tensor<64x32xf32>, tensor<32x32xf32>
}

// A conv's epilogue reads a per-channel vector through its reshape (index arithmetic on the load),
// unless something else reads the reshaped value too (the kernel would store it, at another
// shape than the conv's).
// CHECK: fusion: @conv_bias: merged lz_fused_reshape (line 68) + lz_fused_conv2d_add_mul (line 67) -> lz_fused_conv2d_reshape_add_mul (line 67) (conv), saves 32 bytes
// CHECK: fusion: @conv_bias: refused lz_fused_reshape (line 70) + lz_fused_conv2d_reshape_add_mul (line 67): 'lz.reshape' read by the conv epilogue is also read outside the kernel (would save 16 bytes)
func.func @conv_bias(%x: tensor<1x3x6x6xf32>, %w: tensor<4x3x3x3xf32>, %b: tensor<4xf32>, %s: tensor<4xf32>)
    -> (tensor<1x4x4x4xf32>, tensor<4x1x1xf32>) {
  %0 = "lz.conv2d"(%x, %w) : (tensor<1x3x6x6xf32>, tensor<4x3x3x3xf32>) -> tensor<1x4x4x4xf32>
  %bc = "lz.reshape"(%b) {shape = array<i64: -1, 1, 1>} : (tensor<4xf32>) -> tensor<4x1x1xf32>
  %1 = "lz.add"(%0, %bc) : (tensor<1x4x4x4xf32>, tensor<4x1x1xf32>) -> tensor<1x4x4x4xf32>
  %sc = "lz.reshape"(%s) {shape = array<i64: -1, 1, 1>} : (tensor<4xf32>) -> tensor<4x1x1xf32>
  %2 = "lz.mul"(%1, %sc) : (tensor<1x4x4x4xf32>, tensor<4x1x1xf32>) -> tensor<1x4x4x4xf32>
  func.return %2, %sc : tensor<1x4x4x4xf32>, tensor<4x1x1xf32>
}
