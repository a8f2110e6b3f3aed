// Constants of element types the bindings cannot hand to Python (complex) or the chip lacks (ui64,
// i64 narrowed to si32 with a value si32 cannot hold), f16 and i1, each feeding a small op.
module {
  func.func @main() -> (tensor<2xcomplex<f32>>, tensor<2xui64>, tensor<2xi64>, tensor<3xf16>, tensor<3xi1>) {
    %c = stablehlo.constant dense<[(1.0,2.0), (3.0,-4.0)]> : tensor<2xcomplex<f32>>
    %0 = stablehlo.negate %c : tensor<2xcomplex<f32>>
    %u = stablehlo.constant dense<[1, 18446744073709551615]> : tensor<2xui64>
    %1 = stablehlo.add %u, %u : tensor<2xui64>
    %i = stablehlo.constant dense<[-9223372036854775808, 5]> : tensor<2xi64>
    %2 = stablehlo.negate %i : tensor<2xi64>
    %h = stablehlo.constant dense<[1.5, -2.25, 1.0e+03]> : tensor<3xf16>
    %3 = stablehlo.abs %h : tensor<3xf16>
    %b = stablehlo.constant dense<[true, false, true]> : tensor<3xi1>
    %4 = stablehlo.not %b : tensor<3xi1>
    return %0, %1, %2, %3, %4 : tensor<2xcomplex<f32>>, tensor<2xui64>, tensor<2xi64>, tensor<3xf16>, tensor<3xi1>
  }
}
