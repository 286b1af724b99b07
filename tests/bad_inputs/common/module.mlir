// The module the rules-file cases annotate: two arguments named as JAX names them.
func.func @main(%arg0: tensor<8x4xf32> loc("x"), %arg1: tensor<4xf32> loc("b")) -> tensor<8x4xf32> {
  return %arg0 : tensor<8x4xf32>
}
