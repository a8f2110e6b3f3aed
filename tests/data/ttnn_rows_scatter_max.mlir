#dram = #ttnn.buffer_type<dram>
#loc2 = loc("-":2:19)
#loc3 = loc("-":2:48)
#loc4 = loc("-":2:75)
#system_desc = #ttcore.system_desc<[{role = host, target_triple = "x86_64-pc-linux"}], [{arch = <blackhole>, grid = 10x11, coord_translation_offsets = 2x1, l1_size = 1572864, num_dram_channels = 8, dram_channel_size = 4278190080, noc_l1_address_align_bytes = 16, pcie_address_align_bytes = 64, noc_dram_address_align_bytes = 64, l1_unreserved_base = 177280, erisc_l1_unreserved_base = 88896, dram_unreserved_base = 1048704, dram_unreserved_end = 4275530880, supported_data_types = [<f32>, <f16>, <bf16>, <bfp_f8>, <bfp_bf8>, <bfp_f4>, <bfp_bf4>, <bfp_f2>, <bfp_bf2>, <u32>, <u16>, <u8>, <si32>], supported_tile_sizes = [ 4x16,  16x16,  32x16,  4x32,  16x32,  32x32], dst_physical_size_tiles = 16, num_cbs = 64, num_compute_threads = 1, num_datamovement_threads = 2, dram_grid = 1x8, dram_bank_to_logical_worker_noc0 = [(9, 0), (0, 0), (7, 0), (3, 0), (9, 6), (1, 6), (6, 6), (4, 6)], dram_bank_to_logical_worker_noc1 = [(0, 0), (8, 0), (2, 0), (5, 0), (0, 6), (8, 6), (2, 6), (5, 6)]}], [0], [1 : i32], [ 0x0x0x0]>
#ttnn_layout = #ttnn.ttnn_layout<(d0, d1, d2) -> (d0 * 5 + d1, d2), <1x1>, memref<15x4xsi32, #dram>, <interleaved>>
#ttnn_layout1 = #ttnn.ttnn_layout<(d0, d1) -> (d0, d1), <1x1>, memref<2x1xsi32, #dram>, <interleaved>>
#ttnn_layout2 = #ttnn.ttnn_layout<(d0, d1, d2) -> (d0 * 2 + d1, d2), <1x1>, memref<6x4xsi32, #dram>, <interleaved>>
#ttnn_layout3 = #ttnn.ttnn_layout<(d0, d1, d2) -> (d0 * 32 + d1, d2), <1x1>, memref<3x1x!ttcore.tile<32x32, si32>, #dram>, <interleaved>>
#ttnn_layout4 = #ttnn.ttnn_layout<(d0, d1, d2) -> (d0 + d1, d2), <1x1>, memref<1x2xsi32, #dram>, <interleaved>>
module attributes {ttcore.meshes = #ttcore.meshes<[<"mesh" = 1x1>]>} {
  ttcore.device_module {
    builtin.module attributes {ttcore.meshes = #ttcore.meshes<[<"mesh" = 1x1>]>, ttcore.system_desc = #system_desc, ttnn.l1_const_eval_usage = 1024 : ui64} {
      ttcore.device @default_device = <workerGrid = #ttcore.grid<10x11, virt_to_physical_map = (d0, d1) -> (0, d0, d1), physical_to_virt_map = (d0, d1, d2) -> (d1, d2)>, dramGrid = #ttcore.grid<1x8>, l1Map = (d0, d1, d2)[s0] -> (0, d0, d1, d2 + s0), dramMap = (d0, d1, d2)[s0, s1, s2, s3, s4, s5, s6] -> (0, 0, (((d0 * s1) * (s2 * (s3 * s6)) + d1 * (s2 * (s3 * s6)) + d2) floordiv s4) mod 8, ((((d0 * s1) * (s2 * (s3 * s6)) + d1 * (s2 * (s3 * s6)) + d2) floordiv s4) floordiv 8) * s4 + ((d0 * s1) * (s2 * (s3 * s6)) + d1 * (s2 * (s3 * s6)) + d2) mod s4 + s5), meshShape = 1x1, chipIds = [0]> loc(#loc)
      func.func @main(%arg0: tensor<3x5x4xsi32, #ttnn_layout> {ttcore.argument_type = #ttcore.argument_type<input>, ttcore.local_shape = #ttcore<local_shape local_shape = tensor<3x5x4xi32>>, ttcore.shard_status = #ttcore.shard_status<unsharded>} loc("-":2:19), %arg1: tensor<2x1xsi32, #ttnn_layout1> {ttcore.argument_type = #ttcore.argument_type<input>, ttcore.local_shape = #ttcore<local_shape local_shape = tensor<2x1xi32>>, ttcore.shard_status = #ttcore.shard_status<unsharded>} loc("-":2:48), %arg2: tensor<3x2x4xsi32, #ttnn_layout2> {ttcore.argument_type = #ttcore.argument_type<input>, ttcore.local_shape = #ttcore<local_shape local_shape = tensor<3x2x4xi32>>, ttcore.shard_status = #ttcore.shard_status<unsharded>} loc("-":2:75)) -> (tensor<3x5x4xsi32, #ttnn_layout3> {ttcore.local_shape = #ttcore<local_shape local_shape = tensor<3x5x4xi32>>, ttcore.shard_status = #ttcore.shard_status<presharded>}) attributes {tt.function_type = "forward_device"} {
        %0 = "ttnn.reshape"(%arg1) <{shape = [1 : i32, 1 : i32, 2 : i32]}> : (tensor<2x1xsi32, #ttnn_layout1>) -> tensor<1x1x2xsi32, #ttnn_layout4> loc(#loc5)
        "ttnn.deallocate"(%arg1) <{force = false}> : (tensor<2x1xsi32, #ttnn_layout1>) -> () loc(#loc5)
        %1 = "ttnn.rows_scatter"(%arg0, %0, %arg2) <{column = false, reduce = #ttcore.reduce_type<max>, sizes = array<i64: 5>, windows = array<i64: 1>}> : (tensor<3x5x4xsi32, #ttnn_layout>, tensor<1x1x2xsi32, #ttnn_layout4>, tensor<3x2x4xsi32, #ttnn_layout2>) -> tensor<3x5x4xsi32, #ttnn_layout> loc(#loc5)
        "ttnn.deallocate"(%0) <{force = false}> : (tensor<1x1x2xsi32, #ttnn_layout4>) -> () loc(#loc5)
        "ttnn.deallocate"(%arg2) <{force = false}> : (tensor<3x2x4xsi32, #ttnn_layout2>) -> () loc(#loc5)
        "ttnn.deallocate"(%arg0) <{force = false}> : (tensor<3x5x4xsi32, #ttnn_layout>) -> () loc(#loc5)
        %2 = "ttnn.to_layout"(%1) : (tensor<3x5x4xsi32, #ttnn_layout>) -> tensor<3x5x4xsi32, #ttnn_layout3> loc(#loc5)
        "ttnn.deallocate"(%1) <{force = false}> : (tensor<3x5x4xsi32, #ttnn_layout>) -> () loc(#loc5)
        return %2 : tensor<3x5x4xsi32, #ttnn_layout3> loc(#loc6)
      } loc(#loc1)
    } loc(#loc)
  } loc(#loc)
} loc(#loc)
#loc = loc("-":1:1)
#loc1 = loc("-":2:3)
#loc5 = loc("-":3:10)
#loc6 = loc(unknown)
