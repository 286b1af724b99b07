"""Automatic sharding: choose every value's layout from a mesh and a memory budget.

This package is the search, over the same plain graph the propagation solver
uses (`op_graph.Node`s: an `OpRule` and value ids; shapes and element
sizes); the ``spmd-auto-shard`` pass builds the graph from a module and
writes the answer back.  Every layout the search can pick is one the
op-rule table allows, and every move between layouts is priced by the
reshard planner, so the plan it prices is the program the partitioner emits.

Its files, each reading only those above it:

- `graph.py`: what the search reads and answers (`Graph`, `Plan`,
  `CostModel`, the errors) and the price of a move between layouts (`Pricer`);
- `hardware.py`: named hardware profiles (H100, TPU v5p) that turn the price
  into seconds: each mesh axis's link by where its devices sit, and the
  chip's peak for the contractions' arithmetic;
- `strategies.py`: an op's strategies from its rule (`_Strategies`);
- `clustering.py`: value classes (tied values) and variable classes
  (repeated layers);
- `memory.py`: the memory terms, the rows that bound them, a plan's peak;
- `symmetry.py`: which plans are mirror images (two mesh axes of one size
  swapped), so that the solver divides on a plan and its mirror once;
- `program.py`: the 0-1 program and its solver (`_Milp`);
- `search.py`: `Search`, the decision units and their edges, and the
  measured loop that solves them.

The formulation (Alpa's, made smaller)
--------------------------------------
*Strategies* (`strategies.py`).  An op's strategy deals mesh axes out to its
factors (`OpRule`): each axis goes to one PASS_THROUGH or REDUCTION factor
it divides, or to none, and a factor's axes are taken in every order (which
is major decides which devices share a block: expert parallelism splits its
tokens with the expert axis minor).  That fixes the layout the op reads each
operand in and writes each result in.  A sum whose REDUCTION factor is split
writes a Partial result (OneFlow's P), or, as a second strategy, finishes
the sum inside the op; an op linear in its operands (`UnreducedFlow`) may
also carry a Partial through.  A *contraction* (an op with two operands that
share a REDUCTION factor: dot, convolution) never computes the same block
twice (Alpa's rule): only its strategies that split its work the most are
kept.

*Decision units* (`search.py`).  Each strategy set is one decision unit with
one binary variable per strategy.  Most ops add no unit: an op with no
REDUCTION factor that creates no data (element-wise ops, transposes,
reshapes, slices) *follows* its largest operand, its strategy read off that
operand's layout; it only adds the costs of what it needs.  Values tied
together (while carries, call arguments, function results) are one value
class.  A class with no single producer (an argument, a loop carry) is a
unit of its own whose strategies are its layouts.  So is a value read by two
ops or more: the partitioner reshards a value once per layout, and every
reader of that layout shares it, so a sum or a gather that serves several
readers (or a layout several element-wise readers take) is paid once.  Its
layouts are every even one and each Partial one its op writes; where the op
writes it Partial and it is kept summed, the plan says so
(`Plan.sum_targets`) and its readers share the one sum.  An op whose
operands are all scalars (a broadcast constant) takes whatever layout its
one consumer wants, at no cost, and adds nothing; but never a Partial one,
as every device holds the whole constant.

*Costs* (`graph.Pricer`, `Search._edges`).  Where a value's layout differs
from the layout a consumer reads it in, the reshard planner's plan is
priced: bytes per device, or, when bandwidths are given, seconds (alpha +
bytes / bandwidth per collective, the slowest axis of its group; a
hardware profile gives each axis its link, and prices each contraction's
FLOPs over the devices that share them at the chip's peak, with the plan's
bytes kept beside its seconds, `Plan.moved_bytes`).  An op inside a loop
is priced once per iteration (`op_graph.Node.repeats`: a scanned layer's
moves are paid once per layer).  Every
layout priced splits evenly, so a plan is priced once per class of moves
(the dims either layout splits, their axes and which axis groups divide
them; in any order where bytes are the price: `Pricer._move_class`) and
scaled to each tensor.  Between two units the cost is a matrix over their
strategy pairs, linearized with one continuous variable per pair of distinct
strategy groups and the transportation constraints (exact: the marginals are
one-hot).  Within one unit it is a linear term.

The price is the partitioner's: what the search estimates for a plan is
what ``spmd-partition`` emits for it (tests/unit/test_auto_shard_agreement.py;
within 0.3% on Llama-3-8B's full-depth step, benchmarks/auto_scale.py).  So
the search models the partitioner's own choices, each where the partitioner
makes it.  A follower whose value several ops read runs in the layout the
value is kept in, as the partitioner runs an op where its result is wanted
(`Search._add_stored_follower`), or where its leader is with its result
moved, whichever moves less (`Search._follower_read`,
`partitioning.strategy._cheapest_rule_plan`).  A value of an op the
partitioner makes again rather than moves (`op_rules.REMADE_NOT_MOVED`: a
widening convert, a reshape) is priced at the cheaper of the two
(`Search.cost`).  At real widths these decide plans: a bf16 residual
converted to f32 for a norm moves at half the f32 price.  A contraction is
the search's own decision, and the plan writes it down: the mesh axes each
factor runs over (`Plan.factor_axes`, `module_shardings.FACTOR_AXES`), which
the partitioner follows.  Left to itself, it would choose by the bytes
around the op alone, and a way that moves less there may hold what the
search turned down for the memory budget: Mixtral's backward expert
products, at 8 layers on 64 devices under 17 GiB, gathered each layer's
weight at the start and held it to the backward (1.75 GiB the estimate did
not hold).  A contraction whose sum the search makes inside it is written
Partial, with its sum (`Plan.sum_targets`), so that one sum serves every
reader.

*Memory* (`memory.py`, `Search.solve`).  Each value's bytes per device is
linear in its unit's variables; a value lives from its producer to its last
consumer in program order (arguments and results: throughout); a
contraction that cannot read an operand as a matrix holds a transposed copy
of it (`memory._transposed_positions`, after XLA's dot canonicalization: an
attention projection's [d, h, k] weight, summed over h and k in the
backward, is copied to [h, k, d]; two transformer blocks at toy width,
0.91x without that copy, 0.97x with).  Widths are the target's
(`CostModel.float_compute_bytes`): XLA's CPU backend computes bf16 in f32,
so there a bf16 temporary takes f32's bytes and a bf16-result contraction
holds an f32 copy of each bf16 parameter it reads (one, for forward and
backward alike); but a bf16 product is rounded into a bf16 buffer that
element-wise readers read as it is (`_Memory._rounded`), and a reshard's
copy is f32, as the CPU backend's collectives are.  XLA's fusion decides which values are buffers at all: a
value one op reads is computed inside it (`_Memory._fused`), and a
broadcast's or an element-wise op's that several ops read is made again
inside each where what it is made from is held until then anyway, or can
be held longer for no more bytes (`_Memory._remade_in_readers`: a norm's
x * rsqrt(mean), saved by autodiff for the backward, is not a buffer, x
and the statistic are; nor is a Llama layer's attention mask, made again
in the backward from the padding and causal masks, nor a copy of it in
another layout); but a
reduction the CPU backend computes as a tree of windows reads its operand
from memory (`CostModel.windowed_reduction_above`).  A result's allocation
holds temporaries of its size before the result is written
(`_Memory._in_free_results`: an AdamW step's f32 gradients wait in its
moments' allocations).  The figure it is checked against is
`runtime.memory_per_device`: XLA's own fusion, without the CPU backend's
YNNPACK library fusions, which hold a norm's broadcasts as buffers (a fifth
more on a Llama step; see there).  On Llama-3-8B's steps at full depth it
is 0.99x (SGD and AdamW, 64 devices) and 1.03x (256 devices), where each
layer's attention mask held from the forward to the backward had made it
1.05x and 1.09x; at 4 layers 0.96x (SGD) and 0.98x (AdamW): XLA's heap
there is 0.24 GiB more than the buffers live at its own peak.  Mixtral's
step is 1.01x at 2 layers and 1.00x at full depth (64 devices),
its expert-parallel plans too: XLA holds each layer's two expert products bf16,
widening one inside the silu's ops (`_Memory._remade_in_readers`), the
silu's f32 quotient (an expensive op is never made twice,
`_Memory._expensive`) and its bf16 rounding (`_Memory._narrowed`); with the
silu a call held once for all layers, the estimate was 0.91x.  Left out: the fragmentation of
XLA's heap (at toy widths a tenth of its temporaries:
Mixtral's step at 0.88x, where its FSDP plan is at 1.00x; a best-fit
packing of the estimate's own buffers fragments none).  Three effects
measured on small programs are left out together, as counting one without
the others made the estimates worse: XLA's CPU backend copies bf16
arguments to f32 for a product with an f32 result (a 256 x 512 by 512 x 512
product: 2.75 MiB by XLA, 1.75 estimated; counted, Llama-3-8B's step with
its f32 logits goes from 1.00x to 1.05x of XLA's figure); it writes a
product only a transpose reads in the transposed order, one buffer where
the estimate holds two; and its scheduler runs a layer's input gradient
before its weight gradient where that frees memory first, where the
estimate keeps the program's order (the mixed-precision MLP: 0.91x as it
is, 0.83x with the transposed product, 1.15x with the f32 copies too).  A
read in another layout than its value's is a copy, shared by the value's
later reads in that layout; whether one is live depends on two units'
choices, so a row charges the last plan's copies to their first readers and
each read that plan makes in place to its pair variables, which see a
source moving its layout under a reader (`_memory_row`).  The peak over the
program is bounded by the budget at the program points where it is largest:
the search solves, measures every point under the plan, adds the points
that overflow, and solves again (a cutting-plane loop).  Before any of that,
the memory floor (`_Memory._floor`): at each point, each unit's fewest
bytes over its strategies, summed; no plan holds less at its fullest point,
so a budget under the floor is refused at once, with the floor and the
cheapest plan's peak (Llama-3-70B on 256 devices: 107 GiB, where the 0-1
program had searched its whole time limit for a plan under 80).

*Repeated layers* (`clustering.py`).  Units whose ops look the same from
three hops away (Weisfeiler-Lehman hashes over the op graph: op, rule,
shapes and annotations, then their neighbours') share one set of variables,
and the cost matrices of their edges are summed.  The layers of an unrolled
stack fall into one class each, so the problem's size does not grow with
depth; only its building does, linearly, with every cost and strategy
cached.

*Rematerialization* (`remat.py`).  Where no plan fits the budget holding
every activation the backward reads, the search recomputes some in the
backward, as ``jax.checkpoint`` does.  The forward is cut where only the
residual stream crosses (after each attention and MLP block of a
transformer), each stretch is a segment, and segments of the same ops are
copies of one class; recomputing a copy frees its residuals from their last
forward read to the backward op that first reads one, where its ops run
again.  Under ``full`` every residual is made again from the segment's
inputs; under ``minimal`` the projections' results are kept and the rest is
made from them.  A recomputed op runs in its original's layouts, so the
choice adds no variable to the 0-1 program: it changes the memory terms
(`_Memory.recomputed`, `held_until`) and adds what the ops cost again under
the plan: their sums and moves, and, in seconds, their arithmetic (bytes
alone would never choose arithmetic over memory).  The choice is greedy
(`_Rematerializing`): priced under the cheapest plan of any size, the class
and policy that free the most bytes at the fullest point per unit of price
take copies, earliest layer first (held longest), until the cheapest plan
fits; then less recomputation, where the floor fits, gets a gamble on a
plan that moves more to fit.  The plan lists what it recomputes
(`Plan.recomputations`), and ``spmd-auto-shard`` writes it into the
program (`passes/rematerialize.py`: the ops cloned before the first
backward read, behind an optimization barrier with the gradient they wait
for).  XLA's GPU pipeline schedules with the barrier in place and keeps the
recomputation late; its CPU pipeline removes barriers before it schedules
(`OptimizationBarrierExpander` in its pre-layout passes), so a CPU compile
may run the recomputation early and its memory analysis does not show the
saving, for this project's recomputations and ``jax.checkpoint``'s alike.
A joint choice (a recompute count per class inside the 0-1 program, whose
rows subtract the freed residuals per strategy) would weigh every plan
against every recomputation; the greedy one weighs the plans that fit the
least recomputation and the most, which is what a budget asks for first.

*The solver* (`program.py`) is HiGHS: the LP relaxation first (kept warm
across unbounded solves, cold where memory is bounded); where it blends
choices, the 0-1 program on its support
decides them, and a few levels of division prove the plan; where that
proof falls short, the whole 0-1 program.  `program.py` says why each.
"""

from stablehlo_spmd.auto_sharding.graph import (
    CostModel, Graph, InfeasibleBudget, Plan, SearchTimeLimit, format_bytes)
from stablehlo_spmd.auto_sharding.search import Search, search

__all__ = ["CostModel", "Graph", "InfeasibleBudget", "Plan", "Search", "SearchTimeLimit",
           "format_bytes", "search"]
