module {
  func.func @main(%operand: tensor<3x5x4xf32>) -> tensor<3x2x4xf32> {
    %indices = stablehlo.constant dense<[[4], [1]]> : tensor<2x1xi32>
    %0 = "stablehlo.gather"(%operand, %indices) <{dimension_numbers = #stablehlo.gather<offset_dims = [0, 2], collapsed_slice_dims = [1], start_index_map = [1], index_vector_dim = 1>, indices_are_sorted = false, slice_sizes = array<i64: 3, 1, 4>}> : (tensor<3x5x4xf32>, tensor<2x1xi32>) -> tensor<3x2x4xf32>
    return %0 : tensor<3x2x4xf32>
  }
}
