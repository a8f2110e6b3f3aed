module @jit_f attributes {mhlo.num_partitions = 2 : i32, mhlo.num_replicas = 1 : i32} {
  sdy.mesh @mesh = <["x"=2]>
  func.func public @main(%arg0: tensor<32x128xf32> {sdy.sharding = #sdy.sharding<@mesh, [{}, {"x"}]>}, %arg1: tensor<128x64xf32> {sdy.sharding = #sdy.sharding<@mesh, [{"x"}, {}]>}) -> (tensor<32x64xf32> {jax.result_info = "result"}) {
    %0 = sdy.manual_computation(%arg0, %arg1) in_shardings=[<@mesh, [{}, {"x"}]>, <@mesh, [{"x"}, {}]>] out_shardings=[<@mesh, [{}, {}]>] manual_axes={"x"} (%a: tensor<32x64xf32>, %b: tensor<64x64xf32>) {
      %1 = stablehlo.dot_general %a, %b, contracting_dims = [1] x [0] : (tensor<32x64xf32>, tensor<64x64xf32>) -> tensor<32x64xf32>
      %2 = "stablehlo.all_reduce"(%1) <{channel_handle = #stablehlo.channel_handle<handle = 1, type = 1>, replica_groups = dense<[[0, 1]]> : tensor<1x2xi64>, use_global_device_ids}> ({
      ^bb0(%x: tensor<f32>, %y: tensor<f32>):
        %s = stablehlo.add %x, %y : tensor<f32>
        stablehlo.return %s : tensor<f32>
      }) : (tensor<32x64xf32>) -> tensor<32x64xf32>
      %cst = stablehlo.constant dense<5.000000e-01> : tensor<f32>
      %c = stablehlo.broadcast_in_dim %cst, dims = [] : (tensor<f32>) -> tensor<32x64xf32>
      %3 = stablehlo.multiply %2, %c : tensor<32x64xf32>
      %4 = stablehlo.tanh %3 : tensor<32x64xf32>
      sdy.return %4 : tensor<32x64xf32>
    } : (tensor<32x128xf32>, tensor<128x64xf32>) -> tensor<32x64xf32>
    return %0 : tensor<32x64xf32>
  }
}
