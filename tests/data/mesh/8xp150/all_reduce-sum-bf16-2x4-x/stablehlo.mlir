module @all_reduce_sum_bf16_2x4_x attributes {mhlo.num_partitions = 8 : i32, mhlo.num_replicas = 1 : i32} {
  sdy.mesh @mesh = <["x"=2, "y"=4]> {stablehlo.mesh = {axes = [{name = "x", size = 2 : i64}, {name = "y", size = 4 : i64}]}}
  func.func public @main(%arg0: tensor<128x128xbf16> {sdy.sharding = #sdy.sharding<@mesh, [{"y"}, {"x"}]>}) -> (tensor<128x64xbf16> {jax.result_info = "result", sdy.sharding = #sdy.sharding<@mesh, [{"y"}, {}]>}) {
    %0 = sdy.manual_computation(%arg0) in_shardings=[<@mesh, [{"y"}, {"x"}]>] out_shardings=[<@mesh, [{"y"}, {}]>] manual_axes={"x", "y"} (%arg1: tensor<32x64xbf16>) {
      %1 = "stablehlo.all_reduce"(%arg1) <{channel_handle = #stablehlo.channel_handle<handle = 1, type = 1>, replica_groups = dense<[[0, 4], [1, 5], [2, 6], [3, 7]]> : tensor<4x2xi64>, use_global_device_ids}> ({
      ^bb0(%a: tensor<bf16>, %b: tensor<bf16>):
        %r = stablehlo.add %a, %b : tensor<bf16>
        stablehlo.return %r : tensor<bf16>
      }) : (tensor<32x64xbf16>) -> tensor<32x64xbf16>
      sdy.return %1 : tensor<32x64xbf16>
    } : (tensor<128x128xbf16>) -> tensor<128x64xbf16>
    return %0 : tensor<128x64xbf16>
  }
}
