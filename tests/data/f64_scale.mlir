// An f64 scale: jax-tt-plugin 0.1.2 refuses the f64 constant ("failed to legalize operation
// 'stablehlo.constant'"), 0.1.3 compiles it: the op-level difference between two releases.
func.func @main(%x: tensor<4xf64>) -> tensor<4xf64> {
  %c = stablehlo.constant dense<1.250000e-01> : tensor<4xf64>
  %y = stablehlo.multiply %x, %c : tensor<4xf64>
  return %y : tensor<4xf64>
}
