// select_and_scatter whose init value is a function argument instead of a constant: tt-mlir
// aborts the whole process on it ("LLVM ERROR: initValue_ must be a stablehlo.constant").
module {
  func.func @main(%operand: tensor<1x4x4x1xf32>, %source: tensor<1x2x2x1xf32>, %init: tensor<f32>) -> tensor<1x4x4x1xf32> {
    %0 = "stablehlo.select_and_scatter"(%operand, %source, %init) ({
    ^bb0(%a: tensor<f32>, %b: tensor<f32>):
      %c = stablehlo.compare GE, %a, %b : (tensor<f32>, tensor<f32>) -> tensor<i1>
      stablehlo.return %c : tensor<i1>
    }, {
    ^bb0(%a: tensor<f32>, %b: tensor<f32>):
      %s = stablehlo.add %a, %b : tensor<f32>
      stablehlo.return %s : tensor<f32>
    }) {window_dimensions = array<i64: 1, 2, 2, 1>, window_strides = array<i64: 1, 2, 2, 1>} : (tensor<1x4x4x1xf32>, tensor<1x2x2x1xf32>, tensor<f32>) -> tensor<1x4x4x1xf32>
    return %0 : tensor<1x4x4x1xf32>
  }
}
