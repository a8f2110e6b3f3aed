// custom_calls that refer to functions: @helper is copied into the op's own module; @missing is
// not defined anywhere, so that op cannot be extracted (the ops around it still are).
module {
  func.func private @helper(%x: tensor<4xf32>) -> tensor<4xf32> {
    return %x : tensor<4xf32>
  }
  func.func @main(%a: tensor<4xf32>) -> tensor<4xf32> {
    %0 = stablehlo.abs %a : tensor<4xf32>
    %1 = stablehlo.custom_call @some_target(%0) {called_computations = [@helper]} : (tensor<4xf32>) -> tensor<4xf32>
    %2 = stablehlo.custom_call @other_target(%1) {called_computations = [@missing]} : (tensor<4xf32>) -> tensor<4xf32>
    %3 = stablehlo.negate %2 : tensor<4xf32>
    return %3 : tensor<4xf32>
  }
}
