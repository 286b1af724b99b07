"""Rules and ties of stablehlo_spmd.op_rules.control: which values while, if,
case and call tie together, and the identity rules of barriers and
sharding constraints."""

from jaxlib.mlir import ir

from stablehlo_spmd import op_rules
from stablehlo_spmd.ir import make_context, parse_module

from .factor_rules import JOINT, M, N, P, R, expect, rule_of, rules_of, walk


def located(value: ir.Value) -> str:
    """A value as ``loc-name#result`` or ``loc-name.region.arg``."""
    def loc_name(op):
        text = str(op.location)
        return text[text.index('"') + 1:text.rindex('"')]
    if isinstance(value.owner, ir.Block):
        block = value.owner
        parent = block.owner.operation
        region = next(i for i, r in enumerate(parent.regions) if r.blocks[0] == block)
        return f"{loc_name(parent)}.{region}.{ir.BlockArgument(value).arg_number}"
    return f"{loc_name(value.owner.operation)}#{ir.OpResult(value).result_number}"


def ties_of(text: str, name: str) -> set[frozenset[str]]:
    with make_context() as ctx:
        module = parse_module(text, "t.mlir", ctx)
        (op,) = [op for op in walk(module) if op.name == name]
        return {frozenset((located(a), located(b))) for a, b in op_rules.tied_values(op)}


def pairs(*items):
    return {frozenset(p) for p in items}


def test_while_ties_carry_operand_result_block_args_and_yield():
    text = """
      func.func @main(%arg0: tensor<4xf32>) -> tensor<4xf32> {
        %c = stablehlo.constant dense<0> : tensor<i32> loc("zero")
        %0:2 = stablehlo.while(%i = %c, %x = %arg0) : tensor<i32>, tensor<4xf32>
        cond {
          %lim = stablehlo.constant dense<3> : tensor<i32> loc("limit")
          %p = stablehlo.compare LT, %i, %lim, SIGNED : (tensor<i32>, tensor<i32>) -> tensor<i1> loc("lt")
          stablehlo.return %p : tensor<i1> loc("cond_ret")
        } do {
          %one = stablehlo.constant dense<1> : tensor<i32> loc("one")
          %n = stablehlo.add %i, %one : tensor<i32> loc("next")
          %y = stablehlo.multiply %x, %x : tensor<4xf32> loc("square")
          stablehlo.return %n, %y : tensor<i32>, tensor<4xf32> loc("body_ret")
        } loc("loop")
        return %0#1 : tensor<4xf32> loc("ret")
      } loc("main")"""
    assert ties_of(text, "stablehlo.while") == pairs(
        ("zero#0", "loop#0"), ("loop#0", "loop.0.0"), ("loop#0", "loop.1.0"), ("loop#0", "next#0"),
        ("main.0.0", "loop#1"), ("loop#1", "loop.0.1"), ("loop#1", "loop.1.1"),
        ("loop#1", "square#0"))


def test_if_ties_results_to_both_branches():
    text = """
      func.func @main(%p: tensor<i1>, %x: tensor<4xf32>) -> tensor<4xf32> {
        %0 = "stablehlo.if"(%p) ({
          %a = stablehlo.add %x, %x : tensor<4xf32> loc("then_add")
          stablehlo.return %a : tensor<4xf32> loc("then_ret")
        }, {
          %b = stablehlo.multiply %x, %x : tensor<4xf32> loc("else_mul")
          stablehlo.return %b : tensor<4xf32> loc("else_ret")
        }) : (tensor<i1>) -> tensor<4xf32> loc("branch")
        return %0 : tensor<4xf32> loc("ret")
      } loc("main")"""
    assert ties_of(text, "stablehlo.if") == pairs(("branch#0", "then_add#0"),
                                                   ("branch#0", "else_mul#0"))


def test_case_ties_every_branch():
    text = """
      func.func @main(%k: tensor<i32>, %x: tensor<4xf32>) -> tensor<4xf32> {
        %0 = "stablehlo.case"(%k) ({
          stablehlo.return %x : tensor<4xf32> loc("r0")
        }, {
          %b = stablehlo.negate %x : tensor<4xf32> loc("neg")
          stablehlo.return %b : tensor<4xf32> loc("r1")
        }) : (tensor<i32>) -> tensor<4xf32> loc("switch")
        return %0 : tensor<4xf32> loc("ret")
      } loc("main")"""
    assert ties_of(text, "stablehlo.case") == pairs(("switch#0", "main.0.1"),
                                                     ("switch#0", "neg#0"))


def test_call_ties_arguments_and_results_to_the_callee():
    text = """
      func.func @main(%x: tensor<4xf32>, %y: tensor<2xf32>) -> tensor<4xf32> {
        %0 = func.call @f(%x, %y) : (tensor<4xf32>, tensor<2xf32>) -> tensor<4xf32> loc("call")
        return %0 : tensor<4xf32> loc("ret")
      } loc("main")
      func.func private @f(%a: tensor<4xf32>, %b: tensor<2xf32>) -> tensor<4xf32> {
        %s = stablehlo.sine %a : tensor<4xf32> loc("sin")
        return %s : tensor<4xf32> loc("f_ret")
      } loc("f")"""
    assert ties_of(text, "func.call") == pairs(("main.0.0", "f.0.0"), ("main.0.1", "f.0.1"),
                                               ("call#0", "sin#0"))


def test_while_and_call_have_no_factor_rule_but_count_as_handled():
    assert op_rules.has_rule("stablehlo.while") and op_rules.has_rule("func.call")
    assert not op_rules.has_rule("stablehlo.no_such_op")


def test_optimization_barrier_ties_each_operand_to_its_result_alone():
    # Not one rule over all operands: a rule lets a mesh axis split one of
    # its factors, and jax.checkpoint's barrier carries several weights that
    # one axis splits at once.
    text = """
      func.func @main(%a: tensor<4xf32>, %b: tensor<2x3xf32>) -> tensor<4xf32> {
        %0:2 = stablehlo.optimization_barrier %a, %b : tensor<4xf32>, tensor<2x3xf32> loc("barrier")
        return %0#0 : tensor<4xf32> loc("ret")
      } loc("main")"""
    assert ties_of(text, "stablehlo.optimization_barrier") == pairs(
        ("main.0.0", "barrier#0"), ("main.0.1", "barrier#1"))
    assert rule_of(text, "stablehlo.optimization_barrier") is None
    assert op_rules.has_rule("stablehlo.optimization_barrier")


def test_custom_call_sharding_is_identity_and_others_have_no_rule():
    text = """
      func.func @main(%a: tensor<4x8xf32>) -> tensor<4x8xf32> {
        %0 = stablehlo.custom_call @Sharding(%a) {mhlo.sharding = "{replicated}"}
          : (tensor<4x8xf32>) -> tensor<4x8xf32>
        %1 = stablehlo.custom_call @my_kernel(%0) : (tensor<4x8xf32>) -> tensor<4x8xf32>
        return %1 : tensor<4x8xf32>
      }"""
    sharding, opaque = rules_of(text, "stablehlo.custom_call")
    expect(sharding, {"i": (4, P), "j": (8, P)}, ["ij"], ["ij"], JOINT, (0,))
    assert opaque is None


def _rule_from(sharding_rule: str, operands: str, results: str):
    """The rule of a custom call carrying `sharding_rule`, typed as given."""
    operand_types = [t.strip() for t in operands.split(";")]
    arguments = ", ".join(f"%a{i}: {t}" for i, t in enumerate(operand_types))
    names = ", ".join(f"%a{i}" for i in range(len(operand_types)))
    result_types = [t.strip() for t in results.split(";")]
    return rule_of(f"""
      func.func @main({arguments}) {{
        %0:{len(result_types)} = stablehlo.custom_call @kernel({names})
          {{sdy.sharding_rule = #sdy.op_sharding_rule<{sharding_rule}>}}
          : ({", ".join(operand_types)}) -> ({", ".join(result_types)})
        return
      }}""", "stablehlo.custom_call")


def test_custom_call_sharding_rule_batch_factor_is_pass_through():
    # JAX's rule for a batched Cholesky: i is the batch; j, k (the input
    # matrix) and l, m (the factor) are unlinked, so the call needs them whole.
    rule = _rule_from("([i, j, k])->([i, l, m], [i]) {i=8, j=4, k=4, l=4, m=4}, custom",
                      "tensor<8x4x4xf32>", "tensor<8x4x4xf32>; tensor<8xi32>")
    expect(rule, {"i": (8, P), "j": (4, N), "k": (4, N), "l": (4, N), "m": (4, N)},
           ["ijk"], ["ilm", "i"])
    assert rule.keeps_attributes


def test_custom_call_sharding_rule_kinds_and_compound_dims():
    # Shardy names factors i, j, k, ... by number.  Dim [ji] is one dim made
    # of j (major, u below) then i (minor, v): the dim keeps that order
    # though i is numbered first.  k is a reduction (a partial sum), l needs
    # replication, m is a permutation, n is blocked from propagation (kept
    # whole here).
    rule = _rule_from(
        "([ji, k, l, m, n], [k])->([ji, l, m, n]) {i=2, j=3, k=5, l=4, m=6, n=7} "
        "reduction={k} need_replication={l} permutation={m} blocked_propagation={n}",
        "tensor<6x5x4x6x7xf32>; tensor<5xf32>", "tensor<6x4x6x7xf32>")
    expect(rule, {"u": (3, P), "v": (2, P), "r": (5, R), "n": (4, N), "p": (6, M),
                  "b": (7, N)},
           [("uv", "r", "n", "p", "b"), "r"], [("uv", "n", "p", "b")], reduction="sum")


def test_custom_call_sharding_rule_that_does_not_fit_has_no_rule():
    # Factor sizes that do not multiply to the dims: the rule is not this op's.
    assert _rule_from("([i, j])->([i, j]) {i=8, j=4}", "tensor<8x5xf32>",
                      "tensor<8x5xf32>") is None
