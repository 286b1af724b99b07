"""What the op-rule tests share: an op's rule read from MLIR text, and
`expect`, which checks a rule against a factor structure written by hand.

`expect` names factors with single letters: ``"hk"`` is a dimension made of
factor h (major) then k, ``""`` one with no factor.  The letters are matched
to the rule's factor ids by position, so the tests pin the structure (which
dims share a factor, in which order, with what size and kind) but not the
arbitrary numbering of factors.
"""

from __future__ import annotations

import jax
from jaxlib.mlir import ir

from stablehlo_spmd import op_rules
from stablehlo_spmd.ir import make_context, parse_module
from stablehlo_spmd.op_rules import FactorKind, UnreducedFlow

P = FactorKind.PASS_THROUGH
R = FactorKind.REDUCTION
N = FactorKind.NEED_REPLICATION
M = FactorKind.PERMUTATION  # "moves": permutation

NONE, JOINT, SEPARATE = UnreducedFlow.NONE, UnreducedFlow.JOINT, UnreducedFlow.SEPARATE


def walk(module) -> list[ir.Operation]:
    ops = []

    def visit(op):
        ops.append(op.operation)
        return ir.WalkResult.ADVANCE

    module.walk(visit)
    return ops


def rules_of(text: str, name: str) -> list:
    """The rules of every `name` op in `text`, in program order."""
    with make_context() as ctx:
        module = parse_module(text, "t.mlir", ctx)
        return [op_rules.rule_for(op) for op in walk(module) if op.name == name]


def rule_of(text: str, name: str):
    (rule,) = rules_of(text, name)
    return rule


def lowered(fn, *args) -> str:
    return jax.jit(fn).lower(*args).as_text()


def expect(rule, factors: dict[str, tuple[int, FactorKind]], operands, results,
           unreduced=NONE, linear=(), reduction=None):
    """Assert `rule` has exactly the named factors, mapped as written.

    A tensor is a string, one factor letter per dim, or a tuple with a
    string of letters (major to minor) per dim.
    """
    assert rule is not None
    operands = [tuple(t) for t in operands]
    results = [tuple(t) for t in results]
    assert len(rule.operands) == len(operands), "operand count"
    assert len(rule.results) == len(results), "result count"
    name_of: dict[int, str] = {}
    tensors = list(zip(rule.operands, operands)) + list(zip(rule.results, results))
    for index, (actual, wanted) in enumerate(tensors):
        assert len(actual) == len(wanted), f"rank of tensor {index}: {actual} vs {wanted}"
        for dim, (actual_dim, wanted_dim) in enumerate(zip(actual, wanted)):
            assert len(actual_dim) == len(wanted_dim), \
                f"tensor {index} dim {dim}: factors {actual_dim} vs {wanted_dim!r}"
            for factor, letter in zip(actual_dim, wanted_dim):
                assert name_of.setdefault(factor, letter) == letter, \
                    f"factor {factor} is both {name_of[factor]} and {letter}"
    assert len(set(name_of.values())) == len(name_of), f"two factors share a letter: {name_of}"
    assert sorted(name_of.values()) == sorted(factors), f"factors {name_of} vs {sorted(factors)}"
    assert rule.num_factors == len(factors)
    for factor, letter in name_of.items():
        got = (rule.factor_sizes[factor], rule.factor_kinds[factor])
        assert got == factors[letter], f"factor {letter}: {got} vs {factors[letter]}"
    assert rule.unreduced is unreduced
    assert tuple(rule.linear_operands) == tuple(linear)
    assert rule.reduction == reduction
