"""spmd-annotate end to end: a JAX-lowered transformer annotated from a rules file.

The expected sharding of every argument and result is what
`jax.sharding.NamedSharding` gives for the rule's spec; the rules are matched
here with a few lines of independent code (tomllib + re.search), so neither
the expected strings nor the matching come from the code under test.
"""

import ast
import math
import pathlib
import re
import tomllib
import warnings

import jax
import numpy as np
import pytest
from jax.sharding import NamedSharding, PartitionSpec as P

import stablehlo_spmd as ss
from stablehlo_spmd.ir import make_context, parse_module
from stablehlo_spmd.module_shardings import MHLO_SHARDING, function_values, functions
from example_files import rules_file

ROOT = pathlib.Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"


def _load_example(name):
    namespace = {}
    source = (EXAMPLES / f"{name}.py").read_text()
    exec(compile(source, str(EXAMPLES / f"{name}.py"), "exec"), namespace)
    return namespace


def _independent_rules(path):
    document = tomllib.loads(path.read_text())
    rules = [(r["pattern"], ast.literal_eval(r["spec"])) for r in document["rules"]]
    axes = [item.split("=") for item in document["mesh"]["axes"].split(",")]
    return rules, tuple(n for n, _ in axes), tuple(int(s) for _, s in axes)


def _first_match(rules, name):
    for pattern, spec in rules:
        if re.search(pattern, name):
            return spec if isinstance(spec, tuple) else (spec,)
    return None


def _is_private(func):
    return ("sym_visibility" in func.attributes
            and str(func.attributes["sym_visibility"]) == '"private"')


def _shardings_by_name(text):
    with make_context() as context:
        module = parse_module(text, "annotated.mlir", context)
        result = {}
        for func in functions(module):
            if _is_private(func):
                continue  # helpers JAX outlines are not annotated
            for value in function_values(func):
                attr = value.get(MHLO_SHARDING)
                result[value.name] = (str(attr).strip('"') if attr is not None else None,
                                      value.rank)
        return result


@pytest.mark.parametrize("example", ["transformer", "mlp"])
def test_rules_file_gives_named_sharding_strings(example):
    namespace = _load_example(example)
    fn, args = namespace["train_step_example"]()
    exported = ss.export(fn, *args)
    rules_path = rules_file(example)

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ss.SpmdWarning)  # rules meant for other entry points
        annotated = ss.annotate(exported, rules=str(rules_path), filename="model.mlir")

    rules, names, sizes = _independent_rules(rules_path)
    jax_mesh = jax.make_mesh(sizes, names, devices=jax.devices()[: math.prod(sizes)])
    found = _shardings_by_name(annotated)
    assert len(found) > 10 if example == "transformer" else len(found) > 5
    for name, (text, rank) in found.items():
        spec = _first_match(rules, name)
        assert spec is not None, f"no rule matches {name}"
        expected = repr(NamedSharding(jax_mesh, P(*spec))._to_xla_hlo_sharding(rank))
        assert text == expected, name
    assert f"mhlo.num_partitions = {jax_mesh.size} : i32" in annotated


def test_python_rules_with_partition_spec_and_unreduced():
    text = """
    func.func @main(%arg0: tensor<8x4xf32> loc("w"), %arg1: tensor<8x4xf32> loc("g")) -> tensor<8x4xf32> {
      %0 = stablehlo.add %arg0, %arg1 : tensor<8x4xf32>
      return %0 : tensor<8x4xf32>
    }"""
    annotated = ss.annotate(text, "data=2,model=4", [
        (r"^w$", P("data", None)),
        (r"^g$", P(None, "data", unreduced={"model"})),
        (r"result", (("data", "model"), None)),
    ])
    jax_mesh = jax.make_mesh((2, 4), ("data", "model"), devices=jax.devices()[:8])
    expected = [
        repr(NamedSharding(jax_mesh, P("data", None))._to_xla_hlo_sharding(2)),
        repr(NamedSharding(jax_mesh, P(None, "data", unreduced={"model"}))._to_xla_hlo_sharding(2)),
        repr(NamedSharding(jax_mesh, P(("data", "model"), None))._to_xla_hlo_sharding(2)),
    ]
    written = re.findall(r'mhlo.sharding = "([^"]*)"', annotated)
    assert written == expected


SHORT_SPEC_MODULE = """
func.func @main(%arg0: tensor<8x4x6xf32> loc("act"), %arg1: tensor<6xf32> loc("b")) -> tensor<8x4x6xf32> {
  %0 = stablehlo.broadcast_in_dim %arg1, dims = [2] : (tensor<6xf32>) -> tensor<8x4x6xf32>
  %1 = stablehlo.add %arg0, %0 : tensor<8x4x6xf32>
  return %1 : tensor<8x4x6xf32>
}"""


def _jax_shardings(mesh_sizes, mesh_names, specs_and_ranks):
    jax_mesh = jax.make_mesh(mesh_sizes, mesh_names, devices=jax.devices()[:math.prod(mesh_sizes)])
    return [repr(NamedSharding(jax_mesh, spec)._to_xla_hlo_sharding(rank))
            for spec, rank in specs_and_ranks]


def test_short_python_specs_mean_what_jax_partition_specs_mean():
    annotated = ss.annotate(SHORT_SPEC_MODULE, "data=4,model=2",
                            [("^act$", P("data")), ("^b$", ())])
    written = re.findall(r'mhlo.sharding = "([^"]*)"', annotated)
    assert written == _jax_shardings((4, 2), ("data", "model"), [(P("data"), 3), (P(), 1)])


def test_short_toml_specs_mean_what_jax_partition_specs_mean(tmp_path):
    rules = tmp_path / "rules.toml"
    rules.write_text('[mesh]\naxes = "data=4,model=2"\n'
                     '[[rules]]\npattern = "^act$"\nspec = "(\'data\',)"\n'
                     '[[rules]]\npattern = "^b$"\nspec = "()"\n')
    annotated = ss.annotate(SHORT_SPEC_MODULE, rules=str(rules))
    written = re.findall(r'mhlo.sharding = "([^"]*)"', annotated)
    assert written == _jax_shardings((4, 2), ("data", "model"), [(P("data"), 3), (P(), 1)])


def test_replicated_bias_partitions_and_runs_like_one_device():
    per_device = ss.partition(SHORT_SPEC_MODULE, "data=4", [("^act$", P("data")), ("^b$", ())])
    activation = np.arange(8 * 4 * 6, dtype=np.float32).reshape(8, 4, 6)
    bias = np.linspace(-1, 1, 6, dtype=np.float32)
    (got,) = ss.run(per_device, [activation, bias])
    (want,) = ss.run_single_device(SHORT_SPEC_MODULE, [activation, bias])
    np.testing.assert_array_equal(np.asarray(got), np.asarray(want))


def test_python_api_errors_are_typed_and_located():
    text = 'func.func @main(%arg0: tensor<8xf32> loc("w")) -> tensor<8xf32> {\n' \
           '  return %arg0 : tensor<8xf32>\n}\n'
    with pytest.raises(ss.SpmdError) as info:
        ss.annotate(text, "data=8", [(r"w", ("data", None))], filename="prog.mlir")
    assert str(info.value) == ("prog.mlir:1:17: error: argument #0 'w' of type tensor<8xf32>: "
                               "partition spec ('data', None) has 2 entries but the tensor has rank 1")
    with pytest.raises(ss.SpmdError, match="unknown mesh axis 'model'"):
        ss.annotate(text, "data=8", [(r"w", ("model",))])
    with pytest.raises(ss.SpmdError, match="mesh axis 'data' is used twice"):
        ss.annotate(text, "data=8", [(r"w", (("data", "data"),))])
    with pytest.raises(ss.ShardingSyntaxError):
        ss.parse_sharding("{devices=[2,2]0,1,2}")
    with pytest.raises(ss.SpmdError, match="expected non-function type|expected"):
        ss.annotate("func.func @f(", "data=8", [])


def test_unmatched_rule_warns_at_the_rule():
    text = 'func.func @main(%arg0: tensor<8xf32> loc("w")) -> tensor<8xf32> {\n' \
           '  return %arg0 : tensor<8xf32>\n}\n'
    with pytest.warns(ss.SpmdWarning, match=r"rule 'nothing' -> \('data',\) matched no argument"):
        ss.annotate(text, "data=8", [(r"w", ("data",)), (r"nothing", ("data",))])
