// A 3x3 window, strides 2, padding (0, 1) on both axes, over a 112x112 f32 image: the reduce_window
// StableHLO's testdata exercises (reduce_window_add_..._float32_112_112_...), with its input an argument.
module @jit_fun {
  func.func public @main(%arg0: tensor<112x112xf32>) -> tensor<56x56xf32> {
    %0 = stablehlo.constant dense<0.000000e+00> : tensor<f32>
    %1 = "stablehlo.reduce_window"(%arg0, %0) ({
    ^bb0(%arg1: tensor<f32>, %arg2: tensor<f32>):
      %2 = stablehlo.add %arg1, %arg2 : tensor<f32>
      stablehlo.return %2 : tensor<f32>
    }) {padding = dense<[[0, 1], [0, 1]]> : tensor<2x2xi64>, window_dimensions = array<i64: 3, 3>, window_strides = array<i64: 2, 2>} : (tensor<112x112xf32>, tensor<f32>) -> tensor<56x56xf32>
    return %1 : tensor<56x56xf32>
  }
}
