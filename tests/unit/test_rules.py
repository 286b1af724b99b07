"""Tests for stablehlo_spmd.rules: TOML rules files and Python rule lists."""

import re
import textwrap

import pytest
from jax.sharding import PartitionSpec as P

from stablehlo_spmd.errors import RulesError
from stablehlo_spmd.mesh import Mesh
from stablehlo_spmd.rules import Rule, RuleSet, load_rules, parse_rules, rules_from_python
from stablehlo_spmd.sharding import Sharding


def write(tmp_path, text, name="rules.toml"):
    path = tmp_path / name
    path.write_text(textwrap.dedent(text).lstrip("\n"), encoding="utf-8")
    return path


def error_of(tmp_path, text, name="rules.toml"):
    path = write(tmp_path, text, name)
    with pytest.raises(RulesError) as info:
        load_rules(path)
    return str(path), info.value


DOCUMENTED = r"""
# The format shown at the top of rules.py.
[mesh]
axes = "data=4,model=2"          # major to minor
devices = [0, 1, 2, 3, 4, 5, 6, 7]  # optional device order

[[rules]]
pattern = "attn'\\]\\['w[qkv]'\\]"
spec = "(None, 'model')"         # a Python tuple literal: None, 'axis', ('a', 'b')
unreduced = ["data"]             # optional: partial sums pending over these axes
reduction = "sum"                # optional: how unreduced partials combine

[[rules]]
pattern = 'embed'                # a TOML literal string
spec = "(('data', 'model'), None)"
reduction = "max"

[[rules]]
pattern = "bias$"
spec = "('model')"

[[rules]]
pattern = "."
spec = "()"
"""


# ------------------------------------------------------------- loading


def test_documented_format_loads(tmp_path):
    path = write(tmp_path, DOCUMENTED)
    ruleset = load_rules(path)
    assert isinstance(ruleset, RuleSet)
    assert ruleset.mesh == Mesh(tuple(range(8)), (4, 2), ("data", "model"))
    patterns = [r.pattern for r in ruleset.rules]
    # TOML basic strings turn "\\]" into "\]"; literal strings keep text as is.
    assert patterns == [r"attn'\]\['w[qkv]'\]", "embed", "bias$", "."]
    specs = [r.spec for r in ruleset.rules]
    assert specs == [(None, "model"), (("data", "model"), None), ("model",), ()]
    assert ruleset.rules[0].unreduced == ("data",)
    assert ruleset.rules[0].reduction == "sum"
    assert ruleset.rules[1].unreduced == ()
    assert ruleset.rules[1].reduction == "max"
    assert ruleset.rules[2].reduction == "sum"


def test_rule_positions_are_their_headers(tmp_path):
    path = write(tmp_path, DOCUMENTED)
    ruleset = load_rules(path)
    lines = DOCUMENTED.lstrip("\n").splitlines()
    header_lines = [i + 1 for i, line in enumerate(lines) if line.strip() == "[[rules]]"]
    assert [r.position for r in ruleset.rules] == [f"{path}:{n}:1" for n in header_lines]


def test_first_match_wins_with_search(tmp_path):
    ruleset = load_rules(write(tmp_path, DOCUMENTED))
    name = "params['layers'][0]['attn']['wq']"
    assert ruleset.match(name).spec == (None, "model")
    # re.search, not re.match: the pattern may match anywhere.
    assert ruleset.match("params['embed']['table']").pattern == "embed"
    # 'bias$' comes before the catch-all '.'.
    assert ruleset.match("attn.bias").pattern == "bias$"
    assert ruleset.match("something else").pattern == "."
    assert ruleset.match("params['attn']['wo']").pattern == "."  # w[qkv] only


def test_first_match_wins_even_when_a_later_rule_is_more_specific():
    ruleset = rules_from_python([("w", ("data",)), ("^w1$", ("model",))])
    assert ruleset.match("w1").spec == ("data",)
    assert rules_from_python([("^w1$", ("model",)), ("w", ("data",))]).match("w1").spec == (
        "model",)


def test_no_match_is_none():
    ruleset = rules_from_python([("^a$", (None,))])
    assert ruleset.match("ab") is None
    assert ruleset.match("xa") is None
    assert ruleset.match("a").spec == (None,)


def test_file_without_mesh(tmp_path):
    ruleset = load_rules(write(tmp_path, """
        [[rules]]
        pattern = "."
        spec = "('x',)"
        """))
    assert ruleset.mesh is None
    assert ruleset.rules[0].spec == ("x",)


def test_permuted_mesh(tmp_path):
    ruleset = load_rules(write(tmp_path, """
        [mesh]
        axes = "a=2,b=2"
        devices = [0, 2, 1, 3]

        [[rules]]
        pattern = "."
        spec = "('a', 'b')"
        """))
    assert ruleset.mesh.device_ids == (0, 2, 1, 3)
    assert ruleset.mesh.shape() == {"a": 2, "b": 2}


@pytest.mark.parametrize(
    "literal, expected",
    [
        ("(None, 'model')", (None, "model")),
        ("('data',)", ("data",)),
        ("('data')", ("data",)),  # a parenthesized string is one entry
        ("None", (None,)),
        ("()", ()),
        ("  (('a', 'b'), None)  ", (("a", "b"), None)),
        ("[None, 'x']", (None, "x")),
        ("(('a',),)", (("a",),)),
    ],
)
def test_spec_literals(tmp_path, literal, expected):
    ruleset = load_rules(write(tmp_path, f"""
        [[rules]]
        pattern = "."
        spec = "{literal}"
        """))
    assert ruleset.rules[0].spec == expected


def test_parse_rules_from_text_uses_given_filename():
    ruleset = parse_rules('[[rules]]\npattern = "a"\nspec = "(None,)"\n', "inline.toml")
    assert ruleset.rules[0].position == "inline.toml:1:1"


def test_loaded_rule_builds_sharding(tmp_path):
    ruleset = load_rules(write(tmp_path, DOCUMENTED))
    rule = ruleset.match("params['attn']['wk']")
    sharding = Sharding.from_spec(ruleset.mesh, rule.spec, 2, unreduced=rule.unreduced,
                                  reduction=rule.reduction)
    assert sharding.dim_axes == ((), ("model",))
    assert sharding.unreduced == ("data",)


@pytest.mark.parametrize("spec, rank, expected", [
    ((), 1, (None,)),                              # P(): replicated at any rank
    ((), 0, ()),
    (("data",), 3, ("data", None, None)),          # P('data') on an activation
    ((("data", "model"),), 2, (("data", "model"), None)),
    (("data", None), 2, ("data", None)),
    (("data", None, None), 2, ("data", None, None)),  # longer: kept for annotate to refuse
])
def test_short_spec_leaves_trailing_dims_replicated(spec, rank, expected):
    assert Rule("x", spec).spec_for_rank(rank) == expected


def test_short_spec_from_a_file_builds_the_padded_sharding(tmp_path):
    ruleset = load_rules(write(tmp_path, """
        [mesh]
        axes = "data=4,model=2"

        [[rules]]
        pattern = "^b$"
        spec = "()"

        [[rules]]
        pattern = "^act$"
        spec = "('data',)"
        """))
    bias, activation = ruleset.match("b"), ruleset.match("act")
    assert Sharding.from_spec(ruleset.mesh, bias.spec_for_rank(1), 1).dim_axes == ((),)
    assert (Sharding.from_spec(ruleset.mesh, activation.spec_for_rank(3), 3).dim_axes
            == (("data",), (), ()))


# ------------------------------------------------------ Python rule lists


def test_python_tuples():
    ruleset = rules_from_python([
        (r"wq", (None, "model")),
        (r"embed", [("data", "model"), None]),
        (r"partial", ("data",), ["model"]),
    ])
    assert [r.pattern for r in ruleset.rules] == ["wq", "embed", "partial"]
    assert ruleset.rules[0].spec == (None, "model")
    assert ruleset.rules[1].spec == (("data", "model"), None)
    assert ruleset.rules[2].unreduced == ("model",)
    assert ruleset.mesh is None


def test_python_rules_with_mesh():
    mesh = Mesh.from_string("data=4,model=2")
    ruleset = rules_from_python([(".", (None,))], mesh)
    assert ruleset.mesh == mesh
    again = rules_from_python(ruleset, Mesh.from_string("a=8"))
    assert again.rules == ruleset.rules and again.mesh == Mesh.from_string("a=8")
    assert rules_from_python(ruleset) is ruleset


def test_python_rule_objects_kept():
    rule = Rule("w", ("data",), ("model",), "min")
    ruleset = rules_from_python([rule, ("x", (None,))])
    assert ruleset.rules[0] is rule
    assert ruleset.rules[0].reduction == "min"
    assert ruleset.match("xw") is rule


def test_python_unreduced_set():
    ruleset = rules_from_python([("a", (None,), {"b", "a", "c"})])
    assert set(ruleset.rules[0].unreduced) == {"a", "b", "c"}
    assert len(ruleset.rules[0].unreduced) == 3


def test_python_partition_spec():
    ruleset = rules_from_python([("w", P(None, "model"))])
    assert ruleset.rules[0].spec == (None, "model")
    assert ruleset.rules[0].unreduced == ()


def test_python_partition_spec_with_unreduced():
    ruleset = rules_from_python([("w", P(("data", "model"), None, unreduced={"pipe"}))])
    assert ruleset.rules[0].spec == (("data", "model"), None)
    assert ruleset.rules[0].unreduced == ("pipe",)


def test_python_explicit_unreduced_beats_partition_spec():
    ruleset = rules_from_python([("w", P(None, "model"), ("data",))])
    assert ruleset.rules[0].unreduced == ("data",)


@pytest.mark.parametrize(
    "item, fragment",
    [
        ("w", "rule #0 must be (pattern, spec)"),
        (("w",), "rule #0 must be (pattern, spec)"),
        (("w", (None,), (), "extra"), "rule #0 must be (pattern, spec)"),
        ((3, (None,)), "rule #0: pattern must be a string"),
        (("w[", (None,)), "rule #0: invalid regular expression 'w['"),
        (("w", "data"), "rule #0: spec must be a tuple"),
        (("w", {"data", "model"}), "rule #0: spec must be a tuple"),
        (("w", {"data": None}), "rule #0: spec must be a tuple"),
        (("w", 3), "rule #0: spec must be a tuple"),
        (("w", (None, 3)), "rule #0: spec entry 3 must be None, an axis name"),
        (("w", (("a", 1),)), "spec entry ('a', 1) must be None"),
    ],
)
def test_python_rule_errors(item, fragment):
    with pytest.raises(RulesError) as info:
        rules_from_python([item])
    assert fragment in str(info.value)


def test_python_rule_error_names_its_index():
    with pytest.raises(RulesError, match=r"rule #2: invalid regular expression"):
        rules_from_python([("a", ()), ("b", ()), ("(", ())])


# ------------------------------------------------------------ file errors


def test_toml_syntax_error_position(tmp_path):
    path, error = error_of(tmp_path, """
        [mesh]
        axes = "data=4,model=2"

        [[rules]]
        pattern = "x
        spec = "(None,)"
        """)
    # The string opened on line 5 ends at the newline after column 12.
    assert error.location == f"{path}:5:13"
    assert str(error).startswith(f"{path}:5:13: error: invalid TOML")
    assert "(at line" not in str(error)


def test_toml_duplicate_key_position(tmp_path):
    path, error = error_of(tmp_path, """
        [[rules]]
        pattern = "a"
        pattern = "b"
        spec = "()"
        """)
    assert error.location.startswith(f"{path}:3:")
    assert "invalid TOML" in error.message


@pytest.mark.parametrize("missing", ["pattern", "spec"])
def test_missing_key(tmp_path, missing):
    body = {"pattern": 'pattern = "w"', "spec": 'spec = "(None,)"'}
    del body[missing]
    path, error = error_of(tmp_path, "[[rules]]\npattern = \"a\"\nspec = \"()\"\n\n"
                           "# second rule\n[[rules]]\n" + "\n".join(body.values()) + "\n")
    assert error.location == f"{path}:6:1"
    assert error.message == f"rule is missing '{missing}'"


def test_bad_regex(tmp_path):
    path, error = error_of(tmp_path, """
        [mesh]
        axes = "a=2"

        [[rules]]
        pattern = "ok"
        spec = "()"

        [[rules]]
        pattern = "w(["
        spec = "()"
        """)
    assert error.location == f"{path}:8:1"
    assert "invalid regular expression 'w(['" in error.message


@pytest.mark.parametrize(
    "spec_line, fragment",
    [
        ('spec = "(None, model)"', "is not a Python tuple literal"),
        ('spec = "(None,"', "is not a Python tuple literal"),
        ('spec = "__import__(\'os\')"', "is not a Python tuple literal"),
        ('spec = "42"', "spec must be a tuple"),
        ('spec = "{\'a\': 1}"', "spec must be a tuple"),
        ('spec = "{\'data\', \'model\'}"', "spec must be a tuple"),  # a set: no order
        ('spec = "(None, 3)"', "spec entry 3 must be None, an axis name"),
        ("spec = ['data', 'model']", "rule 'spec' must be a string holding a tuple"),
        ("spec = 5", "rule 'spec' must be a string holding a tuple"),
    ],
)
def test_bad_spec(tmp_path, spec_line, fragment):
    path, error = error_of(tmp_path, f'# spec\n\n[[rules]]\npattern = "w"\n{spec_line}\n')
    assert error.location == f"{path}:3:1"
    assert fragment in error.message


def test_unknown_rule_key(tmp_path):
    path, error = error_of(tmp_path, """
        [[rules]]
        pattern = "w"
        spec = "()"
        reduce = "max"
        """)
    assert error.location == f"{path}:1:1"
    assert "unknown rule key(s) 'reduce'" in error.message


def test_unknown_mesh_key(tmp_path):
    path, error = error_of(tmp_path, """
        # comment
        [mesh]
        axes = "a=2"
        device = [1, 0]

        [[rules]]
        pattern = "w"
        spec = "()"
        """)
    assert error.location == f"{path}:2:1"
    assert "unknown mesh key(s) 'device'" in error.message


def test_unknown_top_level_key(tmp_path):
    path, error = error_of(tmp_path, """
        [mesh]
        axes = "a=2"

        [meshes]
        axes = "b=2"

        [[rules]]
        pattern = "w"
        spec = "()"
        """)
    assert "unknown top-level key(s) 'meshes'" in error.message
    assert error.location == f"{path}:4:1"


@pytest.mark.parametrize(
    "mesh_lines, fragment",
    [
        ('axes = "data=4,model"', "is not of the form name=size"),
        ('axes = "data=0"', "sizes must be positive"),
        ('axes = "a=2,a=2"', "must be unique"),
        ('axes = "a=2,b=2"\ndevices = [0, 1, 1, 3]', "repeated: [1]"),
        ('axes = "a=2,b=2"\ndevices = [0, 1, 2]', "holds 4 devices but 3"),
        ('axes = "a=2"\ndevices = [0, "1"]', "mesh 'devices' must be a list of integer"),
        ("axes = 8", "mesh 'axes' must be a string"),
        ('devices = [0, 1]', "mesh 'axes' must be a string"),
    ],
)
def test_bad_mesh(tmp_path, mesh_lines, fragment):
    path, error = error_of(tmp_path, f'# rules\n\n[mesh]\n{mesh_lines}\n\n'
                           '[[rules]]\npattern = "w"\nspec = "()"\n')
    assert error.location == f"{path}:3:1"
    assert fragment in error.message


def test_mesh_not_a_table(tmp_path):
    path, error = error_of(tmp_path, 'mesh = "a=2"\n[[rules]]\npattern = "w"\nspec = "()"\n')
    assert "'mesh' must be a table" in error.message
    assert error.location.startswith(path)


@pytest.mark.parametrize("reduction", ["mean", "SUM", "prod"])
def test_bad_reduction(tmp_path, reduction):
    path, error = error_of(tmp_path, f"""
        [[rules]]
        pattern = "w"
        spec = "(None,)"
        unreduced = ["data"]
        reduction = "{reduction}"
        """)
    assert error.location == f"{path}:1:1"
    assert "'reduction' must be one of sum, max, min" in error.message
    assert repr(reduction) in error.message


@pytest.mark.parametrize("value", ['"data"', "[1]", '["a", 2]'])
def test_bad_unreduced(tmp_path, value):
    path, error = error_of(tmp_path, f'[[rules]]\npattern = "w"\nspec = "()"\nunreduced = {value}\n')
    assert error.location == f"{path}:1:1"
    assert "'unreduced' must be a list of axis names" in error.message


def test_non_string_pattern(tmp_path):
    path, error = error_of(tmp_path, '[[rules]]\npattern = 3\nspec = "()"\n')
    assert error.location == f"{path}:1:1"
    assert "'pattern' must be a string" in error.message


def test_no_rules(tmp_path):
    path, error = error_of(tmp_path, '[mesh]\naxes = "a=2"\n')
    assert "no [[rules]] entries" in error.message
    assert error.location.startswith(path)


def test_rules_not_array_of_tables(tmp_path):
    path, error = error_of(tmp_path, 'rules = "everything"\n')
    assert "'rules' must be an array of tables" in error.message


def test_missing_file(tmp_path):
    path = tmp_path / "nope.toml"
    with pytest.raises(RulesError) as info:
        load_rules(path)
    assert str(path) in str(info.value)
    assert "cannot read rules file" in str(info.value)
    assert "No such file" in str(info.value)


def test_directory_instead_of_file(tmp_path):
    with pytest.raises(RulesError, match=r"cannot read rules file"):
        load_rules(tmp_path)


def test_non_utf8_file(tmp_path):
    path = tmp_path / "latin1.toml"
    path.write_bytes('[[rules]]\npattern = "caf\u00e9"\nspec = "()"\n'.encode("latin-1"))
    with pytest.raises(RulesError) as info:
        load_rules(path)
    # Located at the bad byte: line 2, column 15 (columns count bytes).
    assert str(info.value).startswith(f"{path}:2:15: error: ")
    assert "not UTF-8" in str(info.value)


def test_utf8_file_with_non_ascii_pattern(tmp_path):
    ruleset = load_rules(write(tmp_path, '[[rules]]\npattern = "caf\u00e9"\nspec = "()"\n'))
    assert ruleset.match("le caf\u00e9") is not None


def test_error_string_format(tmp_path):
    path, error = error_of(tmp_path, '[[rules]]\nspec = "()"\n')
    assert re.fullmatch(re.escape(path) + r":1:1: error: rule is missing 'pattern'", str(error))
