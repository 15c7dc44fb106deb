// The cost model behind each fusion (lezero/passes/fusion_cost.py): --debug=fusion prints the
// estimate of the fused kernel against its two parts, for every merge and every refusal.
// RUN: lezero-opt %s -p partition --debug=fusion 2>&1 >/dev/null | filecheck %s
// RUN: lezero-opt %s -p "partition{cost-model=false}" --debug=fusion 2>&1 >/dev/null | filecheck %s --check-prefix=OFF
// RUN: lezero-opt %s -p partition | filecheck %s --check-prefix=GROUPS

// A transpose moving the contiguous dim strides along the add's vectorized loop: a kernel of its own.
// CHECK: fusion: @strided: refused lz_fused_transpose (line 14) + lz_fused_add (line 15): the fused kernel would be slower than its parts: estimated {{[0-9.]+}} us ({{[0-9.]+}} MB, {{[0-9.]+}} Mflop; strided read of an argument x8) > parts {{[0-9.]+}} us ({{.*}}) + {{[0-9.]+}} us ({{.*}})
// OFF: fusion: @strided: merged lz_fused_transpose (line 14) + lz_fused_add (line 15) -> lz_fused_transpose_add (line 14) (elementwise), saves 8388608 bytes{{$}}
// GROUPS-LABEL: func.func @strided
// GROUPS: "lz.transpose"{{.*}}lz.group = 0 : i64
// GROUPS: "lz.add"{{.*}}lz.group = 1 : i64
func.func @strided(%x: tensor<1024x1024xf32>, %y: tensor<1024x1024xf32>) -> tensor<1024x1024xf32> {
  %0 = "lz.transpose"(%x) {perm = array<i64: 1, 0>} : (tensor<1024x1024xf32>) -> tensor<1024x1024xf32>
  %1 = "lz.add"(%0, %y) : (tensor<1024x1024xf32>, tensor<1024x1024xf32>) -> tensor<1024x1024xf32>
  func.return %1 : tensor<1024x1024xf32>
}

// An epilogue: the fused kernel saves the matmul result's store and load, and a launch.
// CHECK: fusion: @epilogue: merged lz_fused_matmul (line 25) + lz_fused_add (line 26) -> lz_fused_matmul_add (line 25) (matmul), saves 1048576 bytes; estimated {{[0-9.]+}} us ({{.*}}) <= parts {{[0-9.]+}} us ({{.*}}) + {{[0-9.]+}} us ({{.*}})
// GROUPS-LABEL: func.func @epilogue
// GROUPS: "lz.matmul"{{.*}}lz.group = 0 : i64
// GROUPS: "lz.add"{{.*}}lz.group = 0 : i64
func.func @epilogue(%x: tensor<256x64xf32>, %w: tensor<64x512xf32>, %b: tensor<512xf32>) -> tensor<256x512xf32> {
  %0 = "lz.matmul"(%x, %w) : (tensor<256x64xf32>, tensor<64x512xf32>) -> tensor<256x512xf32>
  %1 = "lz.add"(%0, %b) : (tensor<256x512xf32>, tensor<512xf32>) -> tensor<256x512xf32>
  func.return %1 : tensor<256x512xf32>
}
