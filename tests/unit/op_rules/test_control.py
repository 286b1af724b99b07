"""Rules and ties of stablehlo_spmd.op_rules.control: which values while, if,
case and call tie together, and the identity rules of barriers and
sharding constraints."""

from jaxlib.mlir import ir

from stablehlo_spmd import op_rules
from stablehlo_spmd.ir import make_context, parse_module

from .factor_rules import JOINT, P, expect, rule_of, rules_of, walk


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


def test_optimization_barrier_is_identity_per_operand():
    rule = rule_of("""
      func.func @main(%a: tensor<4xf32>, %b: tensor<2x3xf32>) -> tensor<4xf32> {
        %0:2 = stablehlo.optimization_barrier %a, %b : tensor<4xf32>, tensor<2x3xf32>
        return %0#0 : tensor<4xf32>
      }""", "stablehlo.optimization_barrier")
    expect(rule, {"a": (4, P), "b": (2, P), "c": (3, P)}, ["a", "bc"], ["a", "bc"],
           JOINT, (0, 1))


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
