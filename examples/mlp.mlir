// The seed's SimpleMLP forward pass (784 -> 256 -> 10) with softmax, batch size dynamic.
module {
  func.func @mlp(%x: tensor<?x784xf32>, %w1: tensor<784x256xf32>, %b1: tensor<256xf32>,
                 %w2: tensor<256x10xf32>, %b2: tensor<10xf32>) -> tensor<?x10xf32> {
    %0 = "lz.matmul"(%x, %w1) : (tensor<?x784xf32>, tensor<784x256xf32>) -> tensor<?x256xf32>
    %1 = "lz.add"(%0, %b1) : (tensor<?x256xf32>, tensor<256xf32>) -> tensor<?x256xf32>
    %2 = "lz.relu"(%1) : (tensor<?x256xf32>) -> tensor<?x256xf32>
    %3 = "lz.matmul"(%2, %w2) : (tensor<?x256xf32>, tensor<256x10xf32>) -> tensor<?x10xf32>
    %4 = "lz.add"(%3, %b2) : (tensor<?x10xf32>, tensor<10xf32>) -> tensor<?x10xf32>
    %5 = "lz.softmax"(%4) {axis = -1 : i64} : (tensor<?x10xf32>) -> tensor<?x10xf32>
    func.return %5 : tensor<?x10xf32>
  }
}
