func.func @f(%arg0: tensor<4xf32>) -> tensor<4xf32> {
  %0 = "stablehlo.frobnicate"(%arg0) : (tensor<4xf32>) -> tensor<4xf32>
  return %0 : tensor<4xf32>
}
