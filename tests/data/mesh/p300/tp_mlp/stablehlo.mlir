module @jit_mlp attributes {mhlo.num_partitions = 2 : i32, mhlo.num_replicas = 1 : i32} {
  sdy.mesh @mesh = <["x"=2]> {stablehlo.mesh = {axes = [{name = "x", size = 2 : i64}]}}
  func.func public @main(%arg0: tensor<64x128xf32> {sdy.sharding = #sdy.sharding<@mesh, [{}, {}]>}, %arg1: tensor<128x512xf32> {sdy.sharding = #sdy.sharding<@mesh, [{}, {"x"}]>}, %arg2: tensor<512xf32> {sdy.sharding = #sdy.sharding<@mesh, [{"x"}]>}, %arg3: tensor<512x128xf32> {sdy.sharding = #sdy.sharding<@mesh, [{"x"}, {}]>}, %arg4: tensor<128xf32> {sdy.sharding = #sdy.sharding<@mesh, [{}]>}) -> (tensor<64x128xf32> {jax.result_info = "result", sdy.sharding = #sdy.sharding<@mesh, [{}, {}]>}) {
    %0 = stablehlo.dot_general %arg0, %arg1, contracting_dims = [1] x [0], precision = [DEFAULT, DEFAULT] : (tensor<64x128xf32>, tensor<128x512xf32>) -> tensor<64x512xf32>
    %1 = stablehlo.broadcast_in_dim %arg2, dims = [1] : (tensor<512xf32>) -> tensor<1x512xf32>
    %2 = stablehlo.broadcast_in_dim %1, dims = [0, 1] : (tensor<1x512xf32>) -> tensor<64x512xf32>
    %3 = stablehlo.add %0, %2 : tensor<64x512xf32>
    %4 = stablehlo.multiply %3, %3 : tensor<64x512xf32>
    %5 = stablehlo.multiply %4, %3 : tensor<64x512xf32>
    %cst = stablehlo.constant dense<4.471500e-02> : tensor<f32>
    %6 = stablehlo.broadcast_in_dim %cst, dims = [] : (tensor<f32>) -> tensor<64x512xf32>
    %7 = stablehlo.multiply %6, %5 : tensor<64x512xf32>
    %8 = stablehlo.add %3, %7 : tensor<64x512xf32>
    %cst_0 = stablehlo.constant dense<0.797884583> : tensor<f32>
    %9 = stablehlo.broadcast_in_dim %cst_0, dims = [] : (tensor<f32>) -> tensor<64x512xf32>
    %10 = stablehlo.multiply %9, %8 : tensor<64x512xf32>
    %11 = stablehlo.tanh %10 : tensor<64x512xf32>
    %cst_1 = stablehlo.constant dense<1.000000e+00> : tensor<f32>
    %12 = stablehlo.broadcast_in_dim %cst_1, dims = [] : (tensor<f32>) -> tensor<64x512xf32>
    %13 = stablehlo.add %12, %11 : tensor<64x512xf32>
    %cst_2 = stablehlo.constant dense<5.000000e-01> : tensor<f32>
    %14 = stablehlo.broadcast_in_dim %cst_2, dims = [] : (tensor<f32>) -> tensor<64x512xf32>
    %15 = stablehlo.multiply %14, %13 : tensor<64x512xf32>
    %16 = stablehlo.multiply %3, %15 : tensor<64x512xf32>
    %17 = stablehlo.dot_general %16, %arg3, contracting_dims = [1] x [0], precision = [DEFAULT, DEFAULT] : (tensor<64x512xf32>, tensor<512x128xf32>) -> tensor<64x128xf32>
    %18 = stablehlo.add %arg0, %17 : tensor<64x128xf32>
    %19 = stablehlo.multiply %18, %18 : tensor<64x128xf32>
    %cst_3 = stablehlo.constant dense<0.000000e+00> : tensor<f32>
    %20 = stablehlo.reduce(%19 init: %cst_3) applies stablehlo.add across dimensions = [1] : (tensor<64x128xf32>, tensor<f32>) -> tensor<64xf32>
    %21 = stablehlo.broadcast_in_dim %20, dims = [0] : (tensor<64xf32>) -> tensor<64x1xf32>
    %cst_4 = stablehlo.constant dense<1.280000e+02> : tensor<f32>
    %22 = stablehlo.broadcast_in_dim %cst_4, dims = [] : (tensor<f32>) -> tensor<64x1xf32>
    %23 = stablehlo.divide %21, %22 : tensor<64x1xf32>
    %cst_5 = stablehlo.constant dense<9.99999997E-7> : tensor<f32>
    %24 = stablehlo.broadcast_in_dim %cst_5, dims = [] : (tensor<f32>) -> tensor<64x1xf32>
    %25 = stablehlo.add %23, %24 : tensor<64x1xf32>
    %26 = stablehlo.rsqrt %25 : tensor<64x1xf32>
    %27 = stablehlo.broadcast_in_dim %26, dims = [0, 1] : (tensor<64x1xf32>) -> tensor<64x128xf32>
    %28 = stablehlo.multiply %18, %27 : tensor<64x128xf32>
    %29 = stablehlo.broadcast_in_dim %arg4, dims = [1] : (tensor<128xf32>) -> tensor<1x128xf32>
    %30 = stablehlo.broadcast_in_dim %29, dims = [0, 1] : (tensor<1x128xf32>) -> tensor<64x128xf32>
    %31 = stablehlo.multiply %28, %30 : tensor<64x128xf32>
    return %31 : tensor<64x128xf32>
  }
}
