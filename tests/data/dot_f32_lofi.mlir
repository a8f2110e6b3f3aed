module {
  func.func @main(%a: tensor<32x256xf32>, %b: tensor<256x32xf32>) -> tensor<32x32xf32> {
    %0 = stablehlo.dot_general %a, %b, contracting_dims = [1] x [0] : (tensor<32x256xf32>, tensor<256x32xf32>) -> tensor<32x32xf32>
    return %0 : tensor<32x32xf32>
  }
}
