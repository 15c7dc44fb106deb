// A linear layer: the matmul runs through tl.dot, its bias and relu are applied to the
// accumulator before the one store.
// RUN: lezero-opt %s --target=cuda --emit=triton | filecheck %s

// CHECK-LABEL: # ---- kernel lz_fused_matmul_add_relu_0: matmul, grid [4], BLOCK_M=64, BLOCK_N=64, BLOCK_K=32, GROUP_M=8
// CHECK:       def lz_fused_matmul_add_relu_0(b0, b1, b2, b3, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr):
// CHECK-NEXT:      """lz.matmul -> lz.add -> lz.relu: (tensor<64x784xf32>, tensor<784x256xf32>, tensor<256xf32>) -> (tensor<64x256xf32>)"""
// Tiles in grouped order, then the K loop: tl.dot accumulates in f32, exactly (ieee: no TF32).
// CHECK:           tile_m = first_m + pid % group_tiles % group_m
// CHECK-NEXT:      tile_n = pid % group_tiles // group_m
// CHECK:           acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
// CHECK-NEXT:      for k in range(0, 784, BLOCK_K):
// CHECK-NEXT:          a = tl.load(a_tile, mask=ks[None, :] < 784 - k, other=0.0)
// CHECK-NEXT:          b = tl.load(b_tile, mask=ks[:, None] < 784 - k, other=0.0)
// CHECK-NEXT:          acc = tl.dot(a, b, acc, input_precision="ieee")
// The epilogue on the accumulator, then the one store: the bias by column, relu.
// CHECK:           [[BIAS:x[0-9]+]] = tl.load(b2 + {{idx[0-9]+}}){{$}}
// CHECK-NEXT:      [[SUM:t[0-9]+]] = acc + [[BIAS]]
// CHECK-NEXT:      [[RELU:t[0-9]+]] = tl.maximum([[SUM]], tl.full([], 0.0, tl.float32), propagate_nan=tl.PropagateNan.ALL)
// The tiles divide 64x256 evenly: no mask on the store.
// CHECK-NEXT:      tl.store(b3 + {{rows[_a-z]*}}[:, None] * 256 + {{cols[_a-z]*}}[None, :], [[RELU]])
// CHECK-NOT:   tl.store
// CHECK-NOT:   # ---- kernel
func.func @linear_relu(%x: tensor<64x784xf32>, %w: tensor<784x256xf32>, %b: tensor<256xf32>) -> tensor<64x256xf32> {
  %0 = "lz.matmul"(%x, %w) : (tensor<64x784xf32>, tensor<784x256xf32>) -> tensor<64x256xf32>
  %1 = "lz.add"(%0, %b) : (tensor<64x256xf32>, tensor<256xf32>) -> tensor<64x256xf32>
  %2 = "lz.relu"(%1) : (tensor<64x256xf32>) -> tensor<64x256xf32>
  func.return %2 : tensor<64x256xf32>
}

// A batched x @ w.T: the transpose is read through strides (w is never transposed in memory), the
// batch is the outer program index, and the ragged last column tile (48 columns in a 64-wide tile)
// reads in-bounds columns (cols % 48) and masks the store.
// CHECK-LABEL: # ---- kernel lz_fused_transpose_matmul_1: matmul, grid [8]
// CHECK:           """lz.transpose -> lz.matmul: (tensor<48x32xf32>, tensor<8x64x32xf32>) -> (tensor<8x64x48xf32>)"""
// CHECK:           batch = pid // (tiles_m * tiles_n)
// CHECK:           cols_in = cols % 48
// CHECK:           a_tile = b1 + batch * 2048 + rows[:, None] * 32 + ks[None, :]
// CHECK-NEXT:      b_tile = b0 + ks[:, None] + cols_in[None, :] * 32
// CHECK:               acc = tl.dot(a, b, acc, input_precision="ieee")
// CHECK:           tl.store(b2 + batch * 3072 + rows[:, None] * 48 + cols_in[None, :], acc, mask=(cols < 48)[None, :])
func.func @linear_transposed(%x: tensor<8x64x32xf32>, %w: tensor<48x32xf32>) -> tensor<8x64x48xf32> {
  %wt = "lz.transpose"(%w) {perm = array<i64: 1, 0>} : (tensor<48x32xf32>) -> tensor<32x48xf32>
  %0 = "lz.matmul"(%x, %wt) : (tensor<8x64x32xf32>, tensor<32x48xf32>) -> tensor<8x64x48xf32>
  func.return %0 : tensor<8x64x48xf32>
}
