// Two small programs for the runtime API tests: an add, then an exponential of its result.
module {
  func.func @main(%a: tensor<32x64xf32>, %b: tensor<32x64xf32>) -> tensor<32x64xf32> {
    %0 = stablehlo.add %a, %b : tensor<32x64xf32>
    %1 = stablehlo.exponential %0 : tensor<32x64xf32>
    return %1 : tensor<32x64xf32>
  }
}
