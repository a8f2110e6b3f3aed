#dram = #ttnn.buffer_type<dram>
#loc2 = loc("-":3:26)
#loc3 = loc("-":3:103)
#system_desc = #ttcore.system_desc<[{role = host, target_triple = "x86_64-pc-linux"}], [{arch = <blackhole>, grid = 10x11, coord_translation_offsets = 2x1, l1_size = 1572864, num_dram_channels = 8, dram_channel_size = 4278190080, noc_l1_address_align_bytes = 16, pcie_address_align_bytes = 64, noc_dram_address_align_bytes = 64, l1_unreserved_base = 177280, erisc_l1_unreserved_base = 88896, dram_unreserved_base = 1048704, dram_unreserved_end = 4275486528, supported_data_types = [<f32>, <f16>, <bf16>, <bfp_f8>, <bfp_bf8>, <bfp_f4>, <bfp_bf4>, <bfp_f2>, <bfp_bf2>, <u32>, <u16>, <u8>, <si32>], supported_tile_sizes = [ 4x16,  16x16,  32x16,  4x32,  16x32,  32x32], dst_physical_size_tiles = 16, num_cbs = 64, num_compute_threads = 1, num_datamovement_threads = 2, dram_grid = 1x8, dram_bank_to_logical_worker_noc0 = [(9, 0), (0, 0), (7, 0), (3, 0), (9, 7), (1, 7), (6, 7), (4, 7)], dram_bank_to_logical_worker_noc1 = [(0, 0), (8, 0), (2, 0), (5, 0), (0, 7), (8, 7), (2, 7), (5, 7)]}, {arch = <blackhole>, grid = 10x11, coord_translation_offsets = 2x1, l1_size = 1572864, num_dram_channels = 8, dram_channel_size = 4278190080, noc_l1_address_align_bytes = 16, pcie_address_align_bytes = 64, noc_dram_address_align_bytes = 64, l1_unreserved_base = 177280, erisc_l1_unreserved_base = 88896, dram_unreserved_base = 1048704, dram_unreserved_end = 4275486528, supported_data_types = [<f32>, <f16>, <bf16>, <bfp_f8>, <bfp_bf8>, <bfp_f4>, <bfp_bf4>, <bfp_f2>, <bfp_bf2>, <u32>, <u16>, <u8>, <si32>], supported_tile_sizes = [ 4x16,  16x16,  32x16,  4x32,  16x32,  32x32], dst_physical_size_tiles = 16, num_cbs = 64, num_compute_threads = 1, num_datamovement_threads = 2, dram_grid = 1x8, dram_bank_to_logical_worker_noc0 = [(9, 0), (0, 0), (7, 0), (3, 0), (9, 6), (1, 6), (6, 6), (4, 6)], dram_bank_to_logical_worker_noc1 = [(0, 0), (8, 0), (2, 0), (5, 0), (0, 6), (8, 6), (2, 6), (5, 6)]}], [0, 1], [1 : i32, 1 : i32], [ 0x0x0x0], [<[0, 2, 0], [1, 9, 0]>, <[0, 3, 0], [1, 8, 0]>]>
#ttnn_layout = #ttnn.ttnn_layout<(d0, d1) -> (d0, d1), <1x1>, memref<32x64xf32, #dram>, <interleaved>>
#ttnn_layout1 = #ttnn.ttnn_layout<(d0, d1) -> (d0, d1), <1x1>, memref<2x2x!ttcore.tile<32x32, f32>, #dram>, <interleaved>>
#ttnn_layout2 = #ttnn.ttnn_layout<(d0, d1) -> (d0, d1), <1x1>, memref<1x2x!ttcore.tile<32x32, f32>, #dram>, <interleaved>>
module @jit__lambda attributes {mhlo.num_partitions = 2 : i32, mhlo.num_replicas = 1 : i32, ttcore.meshes = #ttcore.meshes<[<"mesh" = 1x2>]>} {
  ttcore.device_module {
    builtin.module @jit__lambda attributes {mhlo.num_partitions = 2 : i32, mhlo.num_replicas = 1 : i32, ttcore.meshes = #ttcore.meshes<[<"mesh" = 1x2>]>, ttcore.system_desc = #system_desc, ttnn.l1_const_eval_usage = 1024 : ui64} {
      ttcore.device @default_device = <workerGrid = #ttcore.grid<10x11, virt_to_physical_map = (d0, d1) -> (0, d0, d1), physical_to_virt_map = (d0, d1, d2) -> (d1, d2)>, dramGrid = #ttcore.grid<1x8>, l1Map = (d0, d1, d2)[s0] -> (0, d0, d1, d2 + s0), dramMap = (d0, d1, d2)[s0, s1, s2, s3, s4, s5, s6] -> (0, 0, (((d0 * s1) * (s2 * (s3 * s6)) + d1 * (s2 * (s3 * s6)) + d2) floordiv s4) mod 8, ((((d0 * s1) * (s2 * (s3 * s6)) + d1 * (s2 * (s3 * s6)) + d2) floordiv s4) floordiv 8) * s4 + ((d0 * s1) * (s2 * (s3 * s6)) + d1 * (s2 * (s3 * s6)) + d2) mod s4 + s5), meshShape = 1x2, chipIds = [0, 1]> loc(#loc)
      func.func public @main(%arg0: tensor<32x64xf32, #ttnn_layout> {ttcore.argument_type = #ttcore.argument_type<input>, ttcore.local_shape = #ttcore<local_shape local_shape = tensor<32x64xf32>>, ttcore.shard_status = #ttcore.shard_status<presharded>} loc("-":3:26), %arg1: tensor<32x64xf32, #ttnn_layout> {ttcore.argument_type = #ttcore.argument_type<input>, ttcore.local_shape = #ttcore<local_shape local_shape = tensor<32x64xf32>>, ttcore.shard_status = #ttcore.shard_status<presharded>} loc("-":3:103)) -> (tensor<64x64xf32, #ttnn_layout1> {jax.result_info = "result", ttcore.local_shape = #ttcore<local_shape local_shape = tensor<64x64xf32>>, ttcore.shard_status = #ttcore.shard_status<presharded>}) attributes {tt.function_type = "forward_device"} {
        %0 = "ttnn.to_layout"(%arg0) : (tensor<32x64xf32, #ttnn_layout>) -> tensor<32x64xf32, #ttnn_layout2> loc(#loc2)
        "ttnn.deallocate"(%arg0) <{force = false}> : (tensor<32x64xf32, #ttnn_layout>) -> () loc(#loc2)
        %1 = "ttnn.to_layout"(%arg1) : (tensor<32x64xf32, #ttnn_layout>) -> tensor<32x64xf32, #ttnn_layout2> loc(#loc3)
        "ttnn.deallocate"(%arg1) <{force = false}> : (tensor<32x64xf32, #ttnn_layout>) -> () loc(#loc3)
        %2 = "ttnn.add"(%0, %1) <{activations = [], input_tensor_a_activations = [], input_tensor_b_activations = []}> : (tensor<32x64xf32, #ttnn_layout2>, tensor<32x64xf32, #ttnn_layout2>) -> tensor<32x64xf32, #ttnn_layout2> loc(#loc4)
        "ttnn.deallocate"(%1) <{force = false}> : (tensor<32x64xf32, #ttnn_layout2>) -> () loc(#loc4)
        "ttnn.deallocate"(%0) <{force = false}> : (tensor<32x64xf32, #ttnn_layout2>) -> () loc(#loc4)
        %3 = "ttnn.all_gather"(%2) <{all_gather_dim = 0 : si32, cluster_axis = 1 : ui32}> : (tensor<32x64xf32, #ttnn_layout2>) -> tensor<64x64xf32, #ttnn_layout1> loc(#loc4)
        "ttnn.deallocate"(%2) <{force = false}> : (tensor<32x64xf32, #ttnn_layout2>) -> () loc(#loc4)
        return %3 : tensor<64x64xf32, #ttnn_layout1> loc(#loc5)
      } loc(#loc1)
    } loc(#loc)
  } loc(#loc)
} loc(#loc)
#loc = loc("-":1:1)
#loc1 = loc("-":3:3)
#loc4 = loc("-":4:10)
#loc5 = loc(unknown)
