// A program fed only by constants, as StableHLO's op tests and IR dumps with inlined weights are.
// The select_and_scatter's init value is computed (an add of two constants), so in its own module
// it is an argument: tt-mlir aborts on it ("initValue_ must be a stablehlo.constant"). The slice
// after it, and the multiply after the while loop, must each be judged on their own.
module {
  func.func @main() -> (tensor<1x2x4x1xf32>, tensor<4xf32>) {
    %operand = stablehlo.constant dense<[[[[1.0], [5.0], [2.0], [0.5]], [[3.0], [4.0], [7.0], [1.5]], [[0.0], [2.5], [6.0], [8.0]], [[9.0], [1.0], [0.0], [3.0]]]]> : tensor<1x4x4x1xf32>
    %source = stablehlo.constant dense<[[[[1.0], [2.0]], [[3.0], [4.0]]]]> : tensor<1x2x2x1xf32>
    %zero = stablehlo.constant dense<0.0> : tensor<f32>
    %init = stablehlo.add %zero, %zero : tensor<f32>
    %0 = "stablehlo.select_and_scatter"(%operand, %source, %init) ({
    ^bb0(%a: tensor<f32>, %b: tensor<f32>):
      %c = stablehlo.compare GE, %a, %b : (tensor<f32>, tensor<f32>) -> tensor<i1>
      stablehlo.return %c : tensor<i1>
    }, {
    ^bb0(%a: tensor<f32>, %b: tensor<f32>):
      %s = stablehlo.add %a, %b : tensor<f32>
      stablehlo.return %s : tensor<f32>
    }) {window_dimensions = array<i64: 1, 2, 2, 1>, window_strides = array<i64: 1, 2, 2, 1>} : (tensor<1x4x4x1xf32>, tensor<1x2x2x1xf32>, tensor<f32>) -> tensor<1x4x4x1xf32>
    %1 = stablehlo.slice %0 [0:1, 1:3, 0:4, 0:1] : (tensor<1x4x4x1xf32>) -> tensor<1x2x4x1xf32>
    %start = stablehlo.constant dense<[1.0, 2.0, 3.0, 4.0]> : tensor<4xf32>
    %i0 = stablehlo.constant dense<0> : tensor<i32>
    %r:2 = stablehlo.while(%i = %i0, %acc = %start) : tensor<i32>, tensor<4xf32>
      cond {
        %three = stablehlo.constant dense<3> : tensor<i32>
        %lt = stablehlo.compare LT, %i, %three : (tensor<i32>, tensor<i32>) -> tensor<i1>
        stablehlo.return %lt : tensor<i1>
      } do {
        %one = stablehlo.constant dense<1> : tensor<i32>
        %n = stablehlo.add %i, %one : tensor<i32>
        %m = stablehlo.add %acc, %acc : tensor<4xf32>
        stablehlo.return %n, %m : tensor<i32>, tensor<4xf32>
      }
    %two = stablehlo.constant dense<2.0> : tensor<4xf32>
    %2 = stablehlo.multiply %r#1, %two : tensor<4xf32>
    return %1, %2 : tensor<1x2x4x1xf32>, tensor<4xf32>
  }
}
