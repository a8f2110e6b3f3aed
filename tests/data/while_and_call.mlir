// A private function reached through func.call (inlined by the splitter) and a while loop whose
// body uses a value defined outside it (%b: becomes an extra argument of the loop's module).
module {
  func.func private @scale(%x: tensor<4xf32>) -> tensor<4xf32> {
    %c = stablehlo.constant dense<2.0> : tensor<4xf32>
    %0 = stablehlo.multiply %x, %c : tensor<4xf32>
    return %0 : tensor<4xf32>
  }
  func.func @main(%a: tensor<4xf32>, %b: tensor<4xf32>) -> tensor<4xf32> {
    %s = func.call @scale(%a) : (tensor<4xf32>) -> tensor<4xf32>
    %zero = stablehlo.constant dense<0> : tensor<i64>
    %r:2 = stablehlo.while(%i = %zero, %acc = %s) : tensor<i64>, tensor<4xf32>
      cond {
        %ten = stablehlo.constant dense<3> : tensor<i64>
        %lt = stablehlo.compare LT, %i, %ten : (tensor<i64>, tensor<i64>) -> tensor<i1>
        stablehlo.return %lt : tensor<i1>
      } do {
        %one = stablehlo.constant dense<1> : tensor<i64>
        %n = stablehlo.add %i, %one : tensor<i64>
        %m = stablehlo.add %acc, %b : tensor<4xf32>
        stablehlo.return %n, %m : tensor<i64>, tensor<4xf32>
      }
    return %r#1 : tensor<4xf32>
  }
}
