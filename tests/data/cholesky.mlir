// stablehlo.cholesky has no StableHLO -> TTIR conversion in tt-mlir: it stops before TTIR.
module {
  func.func @main(%a: tensor<4x4xf32>) -> tensor<4x4xf32> {
    %0 = "stablehlo.cholesky"(%a) {lower = true} : (tensor<4x4xf32>) -> tensor<4x4xf32>
    return %0 : tensor<4x4xf32>
  }
}
