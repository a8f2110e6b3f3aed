module {
  func.func @main(%arg0: tensor<1x512x8xf32>, %arg1: tensor<16x256x512xf32>) -> tensor<1x256x64xf32> {
    %0 = stablehlo.convolution(%arg0, %arg1) dim_numbers = [b, f, 0]x[0, o, i]->[b, f, 0], window = {stride = [1], pad = [[11, 11]], lhs_dilate = [8], rhs_dilate = [1]} {batch_group_count = 1 : i64, feature_group_count = 1 : i64} : (tensor<1x512x8xf32>, tensor<16x256x512xf32>) -> tensor<1x256x64xf32>
    return %0 : tensor<1x256x64xf32>
  }
}

