module {
  func.func @main(%a: tensor<4xi64>, %x: tensor<4xf32>) -> (tensor<4xi64>, tensor<4xf32>) {
    %big = stablehlo.constant dense<1099511627776> : tensor<4xi64>
    %0 = stablehlo.add %a, %big : tensor<4xi64>
    %nan = stablehlo.constant dense<0x7FC00000> : tensor<4xf32>
    %1 = stablehlo.maximum %x, %nan : tensor<4xf32>
    return %0, %1 : tensor<4xi64>, tensor<4xf32>
  }
}
