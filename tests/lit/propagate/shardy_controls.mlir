// RUN: stablehlo-spmd-opt %s --split-input-file --spmd-propagate | FileCheck %s
// RUN: stablehlo-spmd-opt %s --split-input-file --pass-pipeline='builtin.module(spmd-propagate{completion=local})' | FileCheck %s --check-prefix=LOCAL

// Shardy's open dims ({?}, what jax's PartitionSpec.UNCONSTRAINED lowers
// to) are the user's leave to split a dim further: the open argument takes
// the split its sum partner brings, as Shardy's propagation gives it
// ([{"a"}, {"b"}]), where a closed {} would stay whole.  The import keeps the
// open dims beside XLA's text, which cannot say them, and drops the note
// once propagation has written the sharding.

// CHECK-LABEL: func.func @main
// CHECK-SAME: %arg0: tensor<8x8xf32> {mhlo.sharding = "{devices=[2,2]<=[4]}"}
// CHECK-SAME: %arg1: tensor<8x8xf32> {mhlo.sharding = "{devices=[2,2]<=[4]}"}
// CHECK-SAME: %arg2: tensor<8x8xf32> {mhlo.sharding = "{replicated}"}
// CHECK-NOT: spmd.open_dims
sdy.mesh @mesh = <["a"=2, "b"=2]>
func.func @main(%arg0: tensor<8x8xf32> {sdy.sharding = #sdy.sharding<@mesh, [{?}, {?}]>},
                %arg1: tensor<8x8xf32> {sdy.sharding = #sdy.sharding<@mesh, [{"a"}, {"b"}]>},
                %arg2: tensor<8x8xf32> {sdy.sharding = #sdy.sharding<@mesh, [{}, {}]>})
    -> (tensor<8x8xf32>, tensor<8x8xf32>) {
  %0 = stablehlo.add %arg0, %arg1 : tensor<8x8xf32>
  %1 = stablehlo.add %arg2, %arg1 : tensor<8x8xf32>
  return %0, %1 : tensor<8x8xf32>, tensor<8x8xf32>
}

// -----

// Shardy's data-only ops: sdy.constant is a constant (Shardy keeps it from
// folding), and a data-flow edge without a sharding is its operand.  Both
// take the split of the values around them instead of staying replicated.

// CHECK-LABEL: func.func @main
// CHECK: %[[C:.*]] = stablehlo.constant {mhlo.sharding = "{devices=[2,2]<=[4]}"} dense<1.000000e+00>
// CHECK-NEXT: %[[S:.*]] = stablehlo.add %arg0, %[[C]] {mhlo.sharding = "{devices=[2,2]<=[4]}"}
// CHECK-NEXT: %[[P:.*]] = stablehlo.multiply %[[S]], %[[S]] {mhlo.sharding = "{devices=[2,2]<=[4]}"}
// CHECK-NOT: sdy.constant
// CHECK-NOT: sdy.data_flow_edge
sdy.mesh @mesh = <["a"=2, "b"=2]>
func.func @main(%arg0: tensor<8x8xf32> {sdy.sharding = #sdy.sharding<@mesh, [{"a"}, {"b"}]>}) -> tensor<8x8xf32> {
  %c = sdy.constant dense<1.0> : tensor<8x8xf32>
  %0 = stablehlo.add %arg0, %c : tensor<8x8xf32>
  %1 = sdy.data_flow_edge %0 : tensor<8x8xf32>
  %2 = stablehlo.multiply %1, %1 : tensor<8x8xf32>
  return %2 : tensor<8x8xf32>
}

// -----

// A constraint with an open dim (jax's with_sharding_constraint with
// UNCONSTRAINED) pins its closed dims only: dim 0 takes "a" from the sum's
// partner, dim 1 stays whole as the constraint says.

// CHECK-LABEL: func.func @main
// CHECK: %[[C:.*]] = stablehlo.custom_call @Sharding(%arg1) {mhlo.sharding = "{devices=[2,1,2]<=[4] last_tile_dim_replicate}"}
// CHECK-NOT: spmd.open_dims
sdy.mesh @mesh = <["a"=2, "b"=2]>
func.func @main(%arg0: tensor<8x8xf32> {sdy.sharding = #sdy.sharding<@mesh, [{"a"}, {"b"}]>},
                %arg1: tensor<8x8xf32>) -> tensor<8x8xf32> {
  %0 = sdy.sharding_constraint %arg1 <@mesh, [{?}, {}]> : tensor<8x8xf32>
  %1 = stablehlo.add %0, %arg0 : tensor<8x8xf32>
  return %1 : tensor<8x8xf32>
}

// -----

// Priorities order propagation: the p0 split of %arg1's columns reaches the
// sum first and takes "a"; %arg0's p1 row split is held back until then and
// finds "a" taken.  Without the priorities the rows would win (the next
// case), so the note that carries them past XLA's text is what decides.

// CHECK-LABEL: func.func @main
// CHECK-SAME: -> (tensor<8x8xf32> {mhlo.sharding = "{devices=[1,2,2]<=[4] last_tile_dim_replicate}"})
// CHECK: %[[SUM:.*]] = stablehlo.add %arg0, %arg1 {mhlo.sharding = "{devices=[1,2,2]<=[4] last_tile_dim_replicate}"}
// CHECK-NOT: spmd.priorities
sdy.mesh @mesh = <["a"=2, "b"=2]>
func.func @main(%arg0: tensor<8x8xf32> {sdy.sharding = #sdy.sharding<@mesh, [{"a", ?}p1, {?}]>},
                %arg1: tensor<8x8xf32> {sdy.sharding = #sdy.sharding<@mesh, [{?}, {"a", ?}p0]>}) -> tensor<8x8xf32> {
  %0 = stablehlo.add %arg0, %arg1 : tensor<8x8xf32>
  return %0 : tensor<8x8xf32>
}

// -----

// The contrast: without priorities the rows win "a" (the LOCAL run, the greedy
// pass, Shardy's answer).  The contest settled by the whole program's cost
// keeps the rows and, the rows of %arg0 being open, splits them over "b"
// too: the same bytes moved (one all-to-all of %arg1), half the bytes held.

// CHECK-LABEL: func.func @main
// CHECK-SAME: %arg0: tensor<8x8xf32> {mhlo.sharding = "{devices=[4,1]<=[4]}"}
// CHECK: %[[SUM:.*]] = stablehlo.add %arg0, %arg1 {mhlo.sharding = "{devices=[4,1]<=[4]}"}
// LOCAL: %[[SUM:.*]] = stablehlo.add %arg0, %arg1 {mhlo.sharding = "{devices=[2,1,2]<=[4] last_tile_dim_replicate}"}
sdy.mesh @mesh = <["a"=2, "b"=2]>
func.func @main(%arg0: tensor<8x8xf32> {sdy.sharding = #sdy.sharding<@mesh, [{"a", ?}, {?}]>},
                %arg1: tensor<8x8xf32> {sdy.sharding = #sdy.sharding<@mesh, [{?}, {"a", ?}]>}) -> tensor<8x8xf32> {
  %0 = stablehlo.add %arg0, %arg1 : tensor<8x8xf32>
  return %0 : tensor<8x8xf32>
}

// -----

// A propagation barrier lets a sharding through in the directions it allows
// only.  FORWARD: %arg0's split reaches the barrier's result, the result's
// pinned column split never reaches %arg0's open dims.  The barrier has done
// its work once propagation is over: it leaves as the constraint its result's
// sharding is, where the partitioner will reshard.

// CHECK-LABEL: func.func @main
// CHECK-SAME: %arg0: tensor<8x8xf32> {mhlo.sharding = "{devices=[2,1,2]<=[4] last_tile_dim_replicate}"}
// CHECK: %[[NEG:.*]] = stablehlo.negate %arg0 {mhlo.sharding = "{devices=[2,1,2]<=[4] last_tile_dim_replicate}"}
// CHECK-NEXT: %[[B:.*]] = stablehlo.custom_call @Sharding(%[[NEG]]) {mhlo.sharding = "{devices=[2,2]<=[4]}"}
// CHECK-NEXT: %[[ABS:.*]] = stablehlo.abs %[[B]] {mhlo.sharding = "{devices=[2,2]<=[4]}"}
// CHECK-NOT: sdy.propagation_barrier
sdy.mesh @mesh = <["a"=2, "b"=2]>
func.func @main(%arg0: tensor<8x8xf32> {sdy.sharding = #sdy.sharding<@mesh, [{"a", ?}, {?}]>})
    -> (tensor<8x8xf32> {sdy.sharding = #sdy.sharding<@mesh, [{"a", ?}, {"b", ?}]>}) {
  %0 = stablehlo.negate %arg0 : tensor<8x8xf32>
  %1 = sdy.propagation_barrier %0 allowed_direction=FORWARD : tensor<8x8xf32>
  %2 = stablehlo.abs %1 : tensor<8x8xf32>
  return %2 : tensor<8x8xf32>
}

// -----

// BACKWARD: the result's split reaches the operand, and NONE stops both ways
// (%arg1 stays replicated although its barrier's result is split).

// CHECK-LABEL: func.func @main
// CHECK-SAME: %arg0: tensor<8x8xf32> {mhlo.sharding = "{devices=[2,2]<=[4]}"}
// CHECK-SAME: %arg1: tensor<8x8xf32> {mhlo.sharding = "{replicated}"}
sdy.mesh @mesh = <["a"=2, "b"=2]>
func.func @main(%arg0: tensor<8x8xf32>, %arg1: tensor<8x8xf32>)
    -> (tensor<8x8xf32> {sdy.sharding = #sdy.sharding<@mesh, [{"a"}, {"b"}]>},
        tensor<8x8xf32> {sdy.sharding = #sdy.sharding<@mesh, [{"a"}, {"b"}]>}) {
  %0 = sdy.propagation_barrier %arg0 allowed_direction=BACKWARD : tensor<8x8xf32>
  %1 = sdy.propagation_barrier %arg1 allowed_direction=NONE : tensor<8x8xf32>
  return %0, %1 : tensor<8x8xf32>, tensor<8x8xf32>
}

// -----

// A sharding group (what jax's shard_alike lowers to) gives its members one
// sharding, though no op connects them: %arg1's negation takes the split of
// %arg0's.  The group op itself is gone once propagation is over.

// CHECK-LABEL: func.func @main
// CHECK-SAME: %arg1: tensor<8x8xf32> {mhlo.sharding = "{devices=[1,2,2]<=[2,2]T(1,0) last_tile_dim_replicate}"}
// CHECK: %[[A:.*]] = stablehlo.negate %arg0 {mhlo.sharding = "{devices=[1,2,2]<=[2,2]T(1,0) last_tile_dim_replicate}"}
// CHECK-NEXT: %[[B:.*]] = stablehlo.negate %arg1 {mhlo.sharding = "{devices=[1,2,2]<=[2,2]T(1,0) last_tile_dim_replicate}"}
// CHECK-NOT: sdy.sharding_group
sdy.mesh @mesh = <["a"=2, "b"=2]>
func.func @main(%arg0: tensor<8x8xf32> {sdy.sharding = #sdy.sharding<@mesh, [{}, {"b"}]>},
                %arg1: tensor<8x8xf32>) -> (tensor<8x8xf32>, tensor<8x8xf32>) {
  %0 = stablehlo.negate %arg0 : tensor<8x8xf32>
  sdy.sharding_group %0 group_id=3 : tensor<8x8xf32>
  %1 = stablehlo.negate %arg1 : tensor<8x8xf32>
  sdy.sharding_group %1 group_id=3 : tensor<8x8xf32>
  return %0, %1 : tensor<8x8xf32>, tensor<8x8xf32>
}

// -----

// An sdy.reshard in the input says where a value must be laid out: it is a
// sharding constraint.  A mesh nothing refers to (here one of another size)
// is dropped, and a sharding on the empty mesh <[]> is replicated.

// CHECK-LABEL: func.func @main
// CHECK-SAME: %arg1: tensor<8x8xf32> {mhlo.sharding = "{replicated}"}
// CHECK: %[[R:.*]] = stablehlo.custom_call @Sharding(%arg0) {mhlo.sharding = "{devices=[1,2,2]<=[2,2]T(1,0) last_tile_dim_replicate}"}
// CHECK-NEXT: %[[S:.*]] = stablehlo.add %[[R]], %arg1 {mhlo.sharding = "{devices=[1,2,2]<=[2,2]T(1,0) last_tile_dim_replicate}"}
sdy.mesh @mesh = <["a"=2, "b"=2]>
sdy.mesh @unused = <["c"=8]>
sdy.mesh @empty = <[]>
func.func @main(%arg0: tensor<8x8xf32> {sdy.sharding = #sdy.sharding<@mesh, [{"a"}, {}]>},
                %arg1: tensor<8x8xf32> {sdy.sharding = #sdy.sharding<@empty, [{}, {}]>}) -> tensor<8x8xf32> {
  %0 = sdy.reshard %arg0 <@mesh, [{}, {"b"}]> : tensor<8x8xf32>
  %1 = stablehlo.add %0, %arg1 : tensor<8x8xf32>
  return %1 : tensor<8x8xf32>
}

// -----

// An op's own sdy sharding with an open dim is a start, not a pin: the open
// dim takes the column split its operand brings.

// CHECK-LABEL: func.func @main
// CHECK: %[[N:.*]] = stablehlo.negate %arg0 {mhlo.sharding = "{devices=[2,2]<=[4]}"}
// CHECK-NOT: spmd.open_dims
sdy.mesh @mesh = <["a"=2, "b"=2]>
func.func @main(%arg0: tensor<8x8xf32> {sdy.sharding = #sdy.sharding<@mesh, [{}, {"b"}]>}) -> tensor<8x8xf32> {
  %0 = stablehlo.negate %arg0 {sdy.sharding = #sdy.sharding_per_value<[<@mesh, [{"a"}, {?}]>]>} : tensor<8x8xf32>
  return %0 : tensor<8x8xf32>
}

// -----

// A module whose only mesh is a maximal one runs over the devices that mesh
// names: a one-axis mesh of two devices here, device 1 owning the argument.

// CHECK: module attributes {mhlo.num_partitions = 2 : i32, spmd.mesh = #sdy.mesh<["devices"=2]>}
// CHECK: %arg0: tensor<8x8xf32> {mhlo.sharding = "{maximal device=1}"}
sdy.mesh @maximal_mesh = <[], device_ids=[1]>
func.func @main(%arg0: tensor<8x8xf32> {sdy.sharding = #sdy.sharding<@maximal_mesh, []>}) -> tensor<8x8xf32> {
  %0 = stablehlo.negate %arg0 : tensor<8x8xf32>
  return %0 : tensor<8x8xf32>
}

// -----

// A module that declares one mesh and shards nothing with it still runs on
// that mesh: every value replicated.

// CHECK: module attributes {mhlo.num_partitions = 4 : i32, spmd.mesh = #sdy.mesh<["a"=2, "b"=2]>}
// CHECK: %[[N:.*]] = stablehlo.negate %arg0 {mhlo.sharding = "{replicated}"}
sdy.mesh @mesh = <["a"=2, "b"=2]>
func.func @main(%arg0: tensor<8x8xf32>) -> tensor<8x8xf32> {
  %0 = stablehlo.negate %arg0 : tensor<8x8xf32>
  return %0 : tensor<8x8xf32>
}

// -----

// A sharding that names no axis is replicated whatever mesh it refers to,
// so one on a mesh of another size beside the mesh in use does not make the
// module two meshes: %arg1 is replicated, and open, so it takes "a" from
// %arg0 through the add.

// CHECK-LABEL: func.func @replicated_on_another_mesh
// CHECK-SAME: %arg1: tensor<6x8xf32> {mhlo.sharding = "{devices=[3,1]<=[3]}"}
// CHECK: %[[SUM:.*]] = stablehlo.add %arg0, %arg1 {mhlo.sharding = "{devices=[3,1]<=[3]}"}
sdy.mesh @mesh_a_3 = <["a"=3]>
sdy.mesh @mesh_a_6 = <["a"=6]>
func.func @replicated_on_another_mesh(%arg0: tensor<6x8xf32> {sdy.sharding = #sdy.sharding<@mesh_a_3, [{"a"}, {}]>},
                                      %arg1: tensor<6x8xf32> {sdy.sharding = #sdy.sharding<@mesh_a_6, [{?}, {?}]>}) -> tensor<6x8xf32> {
  %0 = stablehlo.add %arg0, %arg1 : tensor<6x8xf32>
  return %0 : tensor<6x8xf32>
}

// -----

// Two meshes over the same four devices, both used: each sharding is read
// as the devices its own mesh lists, and the module's mesh is the one
// XLA's shardings would give (2x2, axes named by position): %arg0 splits
// rows four ways, %arg1 rows over "y" and columns over "x".

// CHECK: spmd.mesh = #sdy.mesh<["axis_0"=2, "axis_1"=2]>
// CHECK-LABEL: func.func @two_meshes_one_device_set
// CHECK-SAME: %arg0: tensor<8x4xf32> {mhlo.sharding = "{devices=[4,1]<=[4]}"}
// CHECK-SAME: %arg1: tensor<8x4xf32> {mhlo.sharding = "{devices=[2,2]<=[2,2]T(1,0)}"}
sdy.mesh @flat = <["a"=4]>
sdy.mesh @grid = <["x"=2, "y"=2]>
func.func @two_meshes_one_device_set(%arg0: tensor<8x4xf32> {sdy.sharding = #sdy.sharding<@flat, [{"a"}, {}]>},
                                     %arg1: tensor<8x4xf32> {sdy.sharding = #sdy.sharding<@grid, [{"y"}, {"x"}]>}) -> tensor<8x4xf32> {
  %0 = stablehlo.add %arg0, %arg1 : tensor<8x4xf32>
  return %0 : tensor<8x4xf32>
}

// -----

// Axes a sharding lists as replicated (replicated={"b"}) are ones its open
// dims may not take: the open dim 1 of %arg0 and of the first result stays
// off the "b" that the sum partner brings, while the same open dim of %arg1,
// with no such list, takes it.  The sums themselves name no list.

// CHECK-LABEL: func.func @main
// CHECK-SAME: %arg0: tensor<8x8xf32> {mhlo.sharding = "{devices=[2,1,2]<=[4] last_tile_dim_replicate}"}
// CHECK-SAME: %arg1: tensor<8x8xf32> {mhlo.sharding = "{devices=[2,2]<=[4]}"}
// CHECK-SAME: -> (tensor<8x8xf32> {mhlo.sharding = "{devices=[2,1,2]<=[4] last_tile_dim_replicate}"}
// CHECK: %[[KEPT:.*]] = stablehlo.add %arg0, %arg2 {mhlo.sharding = "{devices=[2,2]<=[4]}"}
// CHECK: %[[TAKEN:.*]] = stablehlo.add %arg1, %arg2 {mhlo.sharding = "{devices=[2,2]<=[4]}"}
// CHECK: return %[[KEPT]], %[[TAKEN]]
sdy.mesh @mesh = <["a"=2, "b"=2]>
func.func @main(%arg0: tensor<8x8xf32> {sdy.sharding = #sdy.sharding<@mesh, [{"a"}, {?}], replicated={"b"}>},
                %arg1: tensor<8x8xf32> {sdy.sharding = #sdy.sharding<@mesh, [{"a"}, {?}]>},
                %arg2: tensor<8x8xf32> {sdy.sharding = #sdy.sharding<@mesh, [{"a"}, {"b"}]>})
    -> (tensor<8x8xf32> {sdy.sharding = #sdy.sharding<@mesh, [{"a"}, {?}], replicated={"b"}>},
        tensor<8x8xf32>) {
  %0 = stablehlo.add %arg0, %arg2 : tensor<8x8xf32>
  %1 = stablehlo.add %arg1, %arg2 : tensor<8x8xf32>
  return %0, %1 : tensor<8x8xf32>, tensor<8x8xf32>
}

// -----

// An elementwise op's operands take from each other only what its result
// holds.  %0's result is pinned whole, so %arg1 stays whole too (splitting
// it would only be gathered again before the add).  %1's result is open, so
// %arg2 takes "a" from %arg0 through it.

// CHECK-LABEL: func.func @main
// CHECK-SAME: %arg1: tensor<8xf32> {mhlo.sharding = "{replicated}"}
// CHECK-SAME: %arg2: tensor<8xf32> {mhlo.sharding = "{devices=[2,2]<=[4] last_tile_dim_replicate}"}
// CHECK: %[[WHOLE:.*]] = stablehlo.add %arg0, %arg1 {mhlo.sharding = "{replicated}"}
// CHECK: %[[SPLIT:.*]] = stablehlo.add %arg0, %arg2 {mhlo.sharding = "{devices=[2,2]<=[4] last_tile_dim_replicate}"}
sdy.mesh @mesh = <["a"=2, "b"=2]>
func.func @main(%arg0: tensor<8xf32> {sdy.sharding = #sdy.sharding<@mesh, [{"a"}]>},
                %arg1: tensor<8xf32>, %arg2: tensor<8xf32>) -> (tensor<8xf32>, tensor<8xf32>) {
  %0 = stablehlo.add %arg0, %arg1 {sdy.sharding = #sdy.sharding_per_value<[<@mesh, [{}]>]>} : tensor<8xf32>
  %1 = stablehlo.add %arg0, %arg2 : tensor<8xf32>
  return %0, %1 : tensor<8xf32>, tensor<8xf32>
}

// -----

// A dim with a priority holds back what would flow through it until its
// round even when it names no axis ({?}p1).  In round 0, "c" from %arg3
// reaches %1 before "b" from %arg0 can cross %0's held dim 1, so %1 and the
// result are [{"a"}, {"c"}], as Shardy's propagation gives them.

// CHECK-LABEL: func.func @main
// CHECK: %[[FIRST:.*]] = stablehlo.add %arg0, %arg1 {mhlo.sharding = "{devices=[2,2,2]<=[8] last_tile_dim_replicate}"}
// CHECK: %[[SECOND:.*]] = stablehlo.add %[[FIRST]], %arg2 {mhlo.sharding = "{devices=[2,2,2]<=[2,2,2]T(0,2,1) last_tile_dim_replicate}"}
// CHECK: stablehlo.divide %[[SECOND]], %arg3 {mhlo.sharding = "{devices=[2,2,2]<=[2,2,2]T(0,2,1) last_tile_dim_replicate}"}
sdy.mesh @mesh = <["a"=2, "b"=2, "c"=2]>
func.func @main(%arg0: tensor<8x8xf32> {sdy.sharding = #sdy.sharding<@mesh, [{"a"}p0, {"b"}p0]>},
                %arg1: tensor<8x8xf32>, %arg2: tensor<8x8xf32>,
                %arg3: tensor<8x8xf32> {sdy.sharding = #sdy.sharding<@mesh, [{?}, {"c"}p0]>}) -> tensor<8x8xf32> {
  %0 = stablehlo.add %arg0, %arg1 {sdy.sharding = #sdy.sharding_per_value<[<@mesh, [{?}, {?}p1]>]>} : tensor<8x8xf32>
  %1 = stablehlo.add %0, %arg2 : tensor<8x8xf32>
  %2 = stablehlo.divide %1, %arg3 : tensor<8x8xf32>
  return %2 : tensor<8x8xf32>
}
