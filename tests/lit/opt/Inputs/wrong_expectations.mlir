func.func @f(%arg0: tensor<4xf32>) -> tensor<3xf32> {
  // expected-error@+1 {{no such message}}
  return %arg0 : tensor<4xf32>
}
