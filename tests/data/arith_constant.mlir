// What torch-mlir emits for a scalar: an arith.constant. The TT plugin refuses mixed dialects.
module {
  func.func @main(%a: tensor<4xf32>) -> tensor<4xf32> {
    %c = arith.constant dense<1.0> : tensor<4xf32>
    %0 = stablehlo.add %a, %c : tensor<4xf32>
    return %0 : tensor<4xf32>
  }
}
