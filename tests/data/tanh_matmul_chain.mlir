// A chain of 6 layers h = tanh(h . w): an error made in one layer grows through the next ones, so
// a lower math fidelity (lofi) shows as the whole model's PCC falling along its depth.
module {
  func.func @main(%x: tensor<32x64xf32>, %w: tensor<64x64xf32>) -> tensor<32x64xf32> {
    %d0 = stablehlo.dot_general %x, %w, contracting_dims = [1] x [0] : (tensor<32x64xf32>, tensor<64x64xf32>) -> tensor<32x64xf32>
    %h0 = stablehlo.tanh %d0 : tensor<32x64xf32>
    %d1 = stablehlo.dot_general %h0, %w, contracting_dims = [1] x [0] : (tensor<32x64xf32>, tensor<64x64xf32>) -> tensor<32x64xf32>
    %h1 = stablehlo.tanh %d1 : tensor<32x64xf32>
    %d2 = stablehlo.dot_general %h1, %w, contracting_dims = [1] x [0] : (tensor<32x64xf32>, tensor<64x64xf32>) -> tensor<32x64xf32>
    %h2 = stablehlo.tanh %d2 : tensor<32x64xf32>
    %d3 = stablehlo.dot_general %h2, %w, contracting_dims = [1] x [0] : (tensor<32x64xf32>, tensor<64x64xf32>) -> tensor<32x64xf32>
    %h3 = stablehlo.tanh %d3 : tensor<32x64xf32>
    %d4 = stablehlo.dot_general %h3, %w, contracting_dims = [1] x [0] : (tensor<32x64xf32>, tensor<64x64xf32>) -> tensor<32x64xf32>
    %h4 = stablehlo.tanh %d4 : tensor<32x64xf32>
    %d5 = stablehlo.dot_general %h4, %w, contracting_dims = [1] x [0] : (tensor<32x64xf32>, tensor<64x64xf32>) -> tensor<32x64xf32>
    %h5 = stablehlo.tanh %d5 : tensor<32x64xf32>
    return %h5 : tensor<32x64xf32>
  }
}
