// RUN: stablehlo-spmd-opt %s --verify-diagnostics --spmd-annotate

// Six devices tiled 2x3 and 3x2 cut the device range at 3 and at 2: no
// single mesh of whole axes has both boundaries.

// expected-error@+1 {{cannot be expressed as axes of one mesh}}
module @incompatible {
  func.func @main(%arg0: tensor<6x6xf32> {mhlo.sharding = "{devices=[2,3]<=[6]}"}) -> (tensor<6x6xf32> {mhlo.sharding = "{devices=[3,2]<=[6]}"}) {
    return %arg0 : tensor<6x6xf32>
  }
}
