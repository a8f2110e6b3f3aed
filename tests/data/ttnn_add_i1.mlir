#dram = #ttnn.buffer_type<dram>
#loc = loc("-":3:10)
#system_desc = #ttcore.system_desc<[{role = host, target_triple = "x86_64-pc-linux"}], [{arch = <wormhole_b0>, grid = 8x8, coord_translation_offsets = 18x18, l1_size = 1499136, num_dram_channels = 12, dram_channel_size = 1073741824, noc_l1_address_align_bytes = 16, pcie_address_align_bytes = 32, noc_dram_address_align_bytes = 32, l1_unreserved_base = 103712, erisc_l1_unreserved_base = 98304, dram_unreserved_base = 1920032, dram_unreserved_end = 1073119552, supported_data_types = [<f32>, <f16>, <bf16>, <bfp_f8>, <bfp_bf8>, <bfp_f4>, <bfp_bf4>, <bfp_f2>, <bfp_bf2>, <u32>, <u16>, <u8>, <si32>], supported_tile_sizes = [ 4x16,  16x16,  32x16,  4x32,  16x32,  32x32], dst_physical_size_tiles = 16, num_cbs = 64, num_compute_threads = 1, num_datamovement_threads = 2, dram_grid = 1x12, dram_bank_to_logical_worker_noc0 = [(7, 3), (0, 0), (3, 0), (4, 0), (0, 4), (7, 7), (1, 4), (6, 4), (5, 4), (2, 6), (3, 4), (4, 4)], dram_bank_to_logical_worker_noc1 = [(7, 3), (0, 0), (3, 0), (4, 0), (0, 4), (7, 7), (1, 4), (6, 4), (5, 4), (2, 6), (3, 4), (4, 4)]}], [0], [1 : i32], [ 0x0x0x0]>
#ttnn_layout = #ttnn.ttnn_layout<(d0) -> (0, d0), <1x1>, memref<1x13xbf16, #dram>, <interleaved>>
#ttnn_layout1 = #ttnn.ttnn_layout<(d0) -> (0, d0), <1x1>, memref<1x1x!ttcore.tile<32x32, bf16>, #dram>, <interleaved>>
module attributes {ttcore.meshes = #ttcore.meshes<[<"mesh" = 1x1>]>} {
  ttcore.device_module {
    builtin.module attributes {ttcore.meshes = #ttcore.meshes<[<"mesh" = 1x1>]>, ttcore.system_desc = #system_desc, ttnn.l1_const_eval_usage = 1024 : ui64} {
      ttcore.device @default_device = <workerGrid = #ttcore.grid<8x8, virt_to_physical_map = (d0, d1) -> (0, d0, d1), physical_to_virt_map = (d0, d1, d2) -> (d1, d2)>, dramGrid = #ttcore.grid<1x12>, l1Map = (d0, d1, d2)[s0] -> (0, d0, d1, d2 + s0), dramMap = (d0, d1, d2)[s0, s1, s2, s3, s4, s5, s6] -> (0, 0, (((d0 * s1) * (s2 * (s3 * s6)) + d1 * (s2 * (s3 * s6)) + d2) floordiv s4) mod 12, ((((d0 * s1) * (s2 * (s3 * s6)) + d1 * (s2 * (s3 * s6)) + d2) floordiv s4) floordiv 12) * s4 + ((d0 * s1) * (s2 * (s3 * s6)) + d1 * (s2 * (s3 * s6)) + d2) mod s4 + s5), meshShape = 1x1, chipIds = [0]> loc(#loc)
      func.func @main(%arg0: tensor<13xbf16, #ttnn_layout> {ttcore.argument_type = #ttcore.argument_type<input>, ttcore.local_shape = #ttcore<local_shape local_shape = tensor<13xi1>>, ttcore.shard_status = #ttcore.shard_status<unsharded>} loc("-":3:10), %arg1: tensor<13xbf16, #ttnn_layout> {ttcore.argument_type = #ttcore.argument_type<input>, ttcore.local_shape = #ttcore<local_shape local_shape = tensor<13xi1>>, ttcore.shard_status = #ttcore.shard_status<unsharded>} loc("-":3:10)) -> (tensor<13xbf16, #ttnn_layout1> {ttcore.local_shape = #ttcore<local_shape local_shape = tensor<13xi1>>, ttcore.shard_status = #ttcore.shard_status<presharded>}) attributes {tt.function_type = "forward_device"} {
        %0 = "ttnn.to_layout"(%arg0) : (tensor<13xbf16, #ttnn_layout>) -> tensor<13xbf16, #ttnn_layout1> loc(#loc)
        "ttnn.deallocate"(%arg0) <{force = false}> : (tensor<13xbf16, #ttnn_layout>) -> () loc(#loc)
        %1 = "ttnn.to_layout"(%arg1) : (tensor<13xbf16, #ttnn_layout>) -> tensor<13xbf16, #ttnn_layout1> loc(#loc)
        "ttnn.deallocate"(%arg1) <{force = false}> : (tensor<13xbf16, #ttnn_layout>) -> () loc(#loc)
        %2 = "ttnn.add"(%0, %1) <{activations = [], input_tensor_a_activations = [], input_tensor_b_activations = []}> : (tensor<13xbf16, #ttnn_layout1>, tensor<13xbf16, #ttnn_layout1>) -> tensor<13xbf16, #ttnn_layout1> loc(#loc)
        "ttnn.deallocate"(%1) <{force = false}> : (tensor<13xbf16, #ttnn_layout1>) -> () loc(#loc)
        "ttnn.deallocate"(%0) <{force = false}> : (tensor<13xbf16, #ttnn_layout1>) -> () loc(#loc)
        return %2 : tensor<13xbf16, #ttnn_layout1> loc(#loc1)
      } loc(#loc)
    } loc(#loc)
  } loc(#loc)
} loc(#loc)
#loc1 = loc(unknown)
