module @gspmd attributes {mhlo.num_partitions = 2 : i32, mhlo.num_replicas = 1 : i32} {
  func.func public @main(%arg0: tensor<32x128xf32> {mhlo.sharding = "{devices=[1,2]<=[2]}"}, %arg1: tensor<128x64xf32> {mhlo.sharding = "{devices=[2,1]<=[2]}"}) -> (tensor<32x64xf32> {mhlo.sharding = "{replicated}"}) {
    %0 = stablehlo.custom_call @Sharding(%arg0) {mhlo.sharding = "{devices=[1,2]<=[2]}"} : (tensor<32x128xf32>) -> tensor<32x128xf32>
    %1 = stablehlo.custom_call @SPMDFullToShardShape(%0) {mhlo.sharding = "{manual}"} : (tensor<32x128xf32>) -> tensor<32x64xf32>
    %2 = stablehlo.custom_call @Sharding(%arg1) {mhlo.sharding = "{devices=[2,1]<=[2]}"} : (tensor<128x64xf32>) -> tensor<128x64xf32>
    %3 = stablehlo.custom_call @SPMDFullToShardShape(%2) {mhlo.sharding = "{manual}"} : (tensor<128x64xf32>) -> tensor<64x64xf32>
    %4 = stablehlo.dot_general %1, %3, contracting_dims = [1] x [0] : (tensor<32x64xf32>, tensor<64x64xf32>) -> tensor<32x64xf32>
    %5 = "stablehlo.all_reduce"(%4) <{channel_handle = #stablehlo.channel_handle<handle = 1, type = 1>, replica_groups = dense<[[0, 1]]> : tensor<1x2xi64>, use_global_device_ids}> ({
    ^bb0(%a: tensor<f32>, %b: tensor<f32>):
      %s = stablehlo.add %a, %b : tensor<f32>
      stablehlo.return %s : tensor<f32>
    }) : (tensor<32x64xf32>) -> tensor<32x64xf32>
    %6 = stablehlo.custom_call @Sharding(%5) {mhlo.sharding = "{manual}"} : (tensor<32x64xf32>) -> tensor<32x64xf32>
    %7 = stablehlo.custom_call @SPMDShardToFullShape(%6) {mhlo.sharding = "{replicated}"} : (tensor<32x64xf32>) -> tensor<32x64xf32>
    return %7 : tensor<32x64xf32>
  }
}
