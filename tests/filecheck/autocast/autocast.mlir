// autocast: each op runs in the type PyTorch's autocast lists give it for the device; the
// function's signature is kept; casts that cancel are folded.
// RUN: lezero-opt %s -p "autocast{dtype=bf16 device=cuda}" --split-input-file | filecheck %s --check-prefix=CUDA
// RUN: lezero-opt %s -p "autocast{dtype=f16 device=cpu}" --split-input-file | filecheck %s --check-prefix=CPU

// The matmul goes low (f32 accumulation, one rounding), the bias add promotes to f32, softmax is
// f32 on cuda; on the CPU softmax runs in its input's type (here the add's f32).
// CUDA-LABEL: func.func @mlp
// CUDA-SAME: (%[[X:[^:]+]]: tensor<4x8xf32>, %[[W:[^:]+]]: tensor<8x3xf32>, %[[B:[^:]+]]: tensor<3xf32>) -> tensor<4x3xf32>
// CUDA-NEXT: %[[XL:.+]] = "lz.cast"(%[[X]]) {to = bf16}
// CUDA-NEXT: %[[WL:.+]] = "lz.cast"(%[[W]]) {to = bf16}
// CUDA-NEXT: %[[M:.+]] = "lz.matmul"(%[[XL]], %[[WL]]) : (tensor<4x8xbf16>, tensor<8x3xbf16>) -> tensor<4x3xbf16>
// CUDA-NEXT: %[[MW:.+]] = "lz.cast"(%[[M]]) {to = f32}
// CUDA-NEXT: %[[A:.+]] = "lz.add"(%[[MW]], %[[B]]) : (tensor<4x3xf32>, tensor<3xf32>) -> tensor<4x3xf32>
// CUDA-NEXT: %[[S:.+]] = "lz.softmax"(%[[A]]) {{.*}} -> tensor<4x3xf32>
// CUDA-NEXT: func.return %[[S]]
// CPU-LABEL: func.func @mlp
// CPU: "lz.matmul"({{.*}}) : (tensor<4x8xf16>, tensor<8x3xf16>) -> tensor<4x3xf16>
// CPU: "lz.add"({{.*}}) : (tensor<4x3xf32>, tensor<3xf32>) -> tensor<4x3xf32>
// CPU: "lz.softmax"({{.*}}) {{.*}}: (tensor<4x3xf32>) -> tensor<4x3xf32>
func.func @mlp(%x: tensor<4x8xf32>, %w: tensor<8x3xf32>, %b: tensor<3xf32>) -> tensor<4x3xf32> {
  %0 = "lz.matmul"(%x, %w) : (tensor<4x8xf32>, tensor<8x3xf32>) -> tensor<4x3xf32>
  %1 = "lz.add"(%0, %b) : (tensor<4x3xf32>, tensor<3xf32>) -> tensor<4x3xf32>
  %2 = "lz.softmax"(%1) {axis = 1} : (tensor<4x3xf32>) -> tensor<4x3xf32>
  func.return %2 : tensor<4x3xf32>
}

// -----

// Two matmuls in a row: the relu between them runs low, and no cast pair is left between them;
// on cuda the exp (an f32 op) takes the low result widened, exactly.
// CUDA-LABEL: func.func @chain
// CUDA: %[[M1:.+]] = "lz.matmul"({{.*}}) -> tensor<4x4xbf16>
// CUDA-NEXT: %[[R:.+]] = "lz.relu"(%[[M1]]) : (tensor<4x4xbf16>) -> tensor<4x4xbf16>
// CUDA-NEXT: %[[M2:.+]] = "lz.matmul"(%[[R]], %{{.+}}) : (tensor<4x4xbf16>, tensor<4x4xbf16>) -> tensor<4x4xbf16>
// CUDA-NEXT: %[[WIDE:.+]] = "lz.cast"(%[[M2]]) {to = f32}
// CUDA-NEXT: "lz.exp"(%[[WIDE]]) : (tensor<4x4xf32>) -> tensor<4x4xf32>
// CPU-LABEL: func.func @chain
// CPU: "lz.exp"({{.*}}) : (tensor<4x4xf16>) -> tensor<4x4xf16>
// CPU-NEXT: "lz.cast"({{.*}}) {to = f32}
func.func @chain(%x: tensor<4x4xf32>, %w: tensor<4x4xf32>) -> tensor<4x4xf32> {
  %0 = "lz.matmul"(%x, %w) : (tensor<4x4xf32>, tensor<4x4xf32>) -> tensor<4x4xf32>
  %1 = "lz.relu"(%0) : (tensor<4x4xf32>) -> tensor<4x4xf32>
  %2 = "lz.matmul"(%1, %w) : (tensor<4x4xf32>, tensor<4x4xf32>) -> tensor<4x4xf32>
  %3 = "lz.exp"(%2) : (tensor<4x4xf32>) -> tensor<4x4xf32>
  func.return %3 : tensor<4x4xf32>
}

// -----

// Casts that cancel: bf16 -> f32 -> bf16 is the value again and goes; f32 -> bf16 -> f32 rounds
// and stays.
// CUDA-LABEL: func.func @cancel
// CUDA-SAME: (%[[X:[^:]+]]: tensor<4xbf16>, %[[Y:[^:]+]]: tensor<4xf32>)
// CUDA-NEXT: %[[R:.+]] = "lz.cast"(%[[Y]]) {to = bf16}
// CUDA-NEXT: %[[RW:.+]] = "lz.cast"(%[[R]]) {to = f32}
// CUDA-NEXT: func.return %[[X]], %[[RW]]
func.func @cancel(%x: tensor<4xbf16>, %y: tensor<4xf32>) -> (tensor<4xbf16>, tensor<4xf32>) {
  %0 = "lz.cast"(%x) {to = f32} : (tensor<4xbf16>) -> tensor<4xf32>
  %1 = "lz.cast"(%0) {to = bf16} : (tensor<4xf32>) -> tensor<4xbf16>
  %2 = "lz.cast"(%y) {to = bf16} : (tensor<4xf32>) -> tensor<4xbf16>
  %3 = "lz.cast"(%2) {to = f32} : (tensor<4xbf16>) -> tensor<4xf32>
  func.return %1, %3 : tensor<4xbf16>, tensor<4xf32>
}
