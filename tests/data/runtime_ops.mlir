// Small programs for the runtime API tests: an add, an exponential of its result, and a constant
// (whose program returns a const-eval result: cached on the device).
module {
  func.func @main(%a: tensor<32x64xf32>, %b: tensor<32x64xf32>) -> tensor<32x64xf32> {
    %0 = stablehlo.add %a, %b : tensor<32x64xf32>
    %1 = stablehlo.exponential %0 : tensor<32x64xf32>
    %c = stablehlo.constant dense<2.0> : tensor<32x64xf32>
    %2 = stablehlo.multiply %1, %c : tensor<32x64xf32>
    return %2 : tensor<32x64xf32>
  }
}
