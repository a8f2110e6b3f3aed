module {
  func.func @main(%operand: tensor<3x5x4xi32>, %updates: tensor<3x2x4xi32>) -> tensor<3x5x4xi32> {
    %indices = stablehlo.constant dense<[[1], [3]]> : tensor<2x1xi32>
    %0 = "stablehlo.scatter"(%operand, %indices, %updates) <{scatter_dimension_numbers = #stablehlo.scatter<update_window_dims = [0, 2], inserted_window_dims = [1], scatter_dims_to_operand_dims = [1], index_vector_dim = 1>, indices_are_sorted = false, unique_indices = false}> ({
    ^bb0(%a: tensor<i32>, %b: tensor<i32>):
      %s = stablehlo.add %a, %b : tensor<i32>
      stablehlo.return %s : tensor<i32>
    }) : (tensor<3x5x4xi32>, tensor<2x1xi32>, tensor<3x2x4xi32>) -> tensor<3x5x4xi32>
    return %0 : tensor<3x5x4xi32>
  }
}
