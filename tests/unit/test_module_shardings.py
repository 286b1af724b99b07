"""Shardy's spelling of meshes and shardings, checked against what JAX lowers.

JAX (with Shardy on, the default) lowers `jax.jit(..., in_shardings=...)` to
``sdy.mesh`` and ``#sdy.sharding`` text; that text is the expected value for
`mesh_attr_text` / `sdy_sharding_text`, and importing it must give back the
same `mhlo.sharding` that `NamedSharding` gives.
"""

import re

import jax
import jax.numpy as jnp
import pytest
from jax.sharding import NamedSharding, PartitionSpec as P

import stablehlo_spmd as ss
from stablehlo_spmd.ir import make_context, parse_module
from stablehlo_spmd.module_shardings import (
    MHLO_SHARDING, function_values, functions, import_shardy, mesh_attr_text, sdy_sharding_text)

SPECS = [
    P("data", None),
    P(None, "model"),
    P(("data", "model"), None),
    P(("model", "data"), None),
    P("model", "data"),
    P(None, None),
    P(None, "data", unreduced={"model"}),
]


def _lowered_text(spec):
    mesh = jax.make_mesh((4, 2), ("data", "model"), devices=jax.devices()[:8],
                         axis_types=(jax.sharding.AxisType.Explicit,) * 2)
    sharding = NamedSharding(mesh, spec)
    lowered = jax.jit(lambda x: x, in_shardings=sharding, out_shardings=sharding).lower(
        jax.ShapeDtypeStruct((8, 8), jnp.float32, sharding=sharding))
    return lowered.as_text(), sharding


@pytest.mark.parametrize("spec", SPECS, ids=str)
def test_sdy_text_matches_jax_lowering(spec):
    text, named = _lowered_text(spec)
    jax_attr = re.search(r"sdy.sharding = (#sdy.sharding<[^>]*>)", text).group(1)
    mesh = ss.Mesh.from_string("data=4,model=2")
    ours = ss.Sharding.from_spec(mesh, spec, rank=2)
    assert sdy_sharding_text(ours) == jax_attr
    jax_mesh = re.search(r"sdy.mesh @mesh = (<[^>]*>)", text).group(1)
    assert mesh_attr_text(mesh) == "#sdy.mesh" + jax_mesh


@pytest.mark.parametrize("spec", SPECS, ids=str)
def test_import_of_jax_lowering_gives_named_sharding(spec):
    text, named = _lowered_text(spec)
    with make_context() as context:
        module = parse_module(text, "jax.mlir", context)
        imported = import_shardy(module)
        assert imported == ss.Mesh.from_string("data=4,model=2")
        values = [v for f in functions(module) for v in function_values(f)]
        assert values
        for value in values:
            assert str(value.get(MHLO_SHARDING)).strip('"') == repr(named._to_xla_hlo_sharding(2))
        assert "sdy.sharding" not in str(module) and "sdy.mesh @" not in str(module)


def test_open_dimensions_and_maximal():
    mesh = ss.Mesh.from_string("x=2,y=2")
    open_sharding = ss.Sharding(mesh, (("x",), ()), open_dims=frozenset({1}))
    assert sdy_sharding_text(open_sharding) == '#sdy.sharding<@mesh, [{"x"}, {?}]>'
    maximal = ss.Sharding.maximal(mesh, 3, rank=1)
    assert sdy_sharding_text(maximal) == "#sdy.sharding<@maximal_mesh_3, []>"
    with pytest.raises(ss.ShardingError, match="manual axes"):
        sdy_sharding_text(ss.Sharding.fully_manual(mesh, 1))
    with make_context():  # the sdy dialect itself accepts what we print
        from jaxlib.mlir import ir
        ir.Attribute.parse(sdy_sharding_text(open_sharding))
