"""Fuzz the two parsers that read user text before any MLIR is involved.

`parse_hlo_sharding` (``mhlo.sharding`` strings) and `parse_rules` (TOML
rules files) may refuse their input only with the project's typed error
(`ShardingSyntaxError`, `RulesError`); any other exception is a crash the
user would see as an internal error.  Inputs are random text over each
grammar's alphabet and mutations of valid inputs, which reach deeper than
random text.  What does parse must mean something: a sharding prints and
re-parses to itself, a rule set's patterns compile.

CI runs a few hundred examples per test; ``STABLEHLO_SPMD_LONG=1`` runs many
more, for a fuzzing session.
"""

from __future__ import annotations

import json
import os
import re

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from stablehlo_spmd.errors import RulesError, ShardingSyntaxError
from stablehlo_spmd.hlo_sharding import format_hlo_sharding, parse_hlo_sharding
from stablehlo_spmd.rules import RuleSet, parse_rules

LONG = os.environ.get("STABLEHLO_SPMD_LONG") == "1"
FUZZ = settings(max_examples=20000 if LONG else 300, deadline=None,
                suppress_health_check=[HealthCheck.too_slow])


# ------------------------------------------------------------------ mutation

def _mutate(data: st.DataObject, text: str, tokens: list[str]) -> str:
    """A few random edits: delete, duplicate, insert a token, or replace a span."""
    for _ in range(data.draw(st.integers(1, 4), label="edits")):
        start = data.draw(st.integers(0, len(text)), label="start")
        end = data.draw(st.integers(start, min(len(text), start + 8)), label="end")
        edit = data.draw(st.sampled_from(["delete", "duplicate", "insert", "replace"]), label="edit")
        token = data.draw(st.sampled_from(tokens), label="token")
        if edit == "delete":
            text = text[:start] + text[end:]
        elif edit == "duplicate":
            text = text[:end] + text[start:end] + text[end:]
        elif edit == "insert":
            text = text[:start] + token + text[start:]
        else:
            text = text[:start] + token + text[end:]
    return text


# ---------------------------------------------------------- sharding parser

VALID_SHARDINGS = [
    "{replicated}", "{manual}", "{unknown}", "{maximal device=3}",
    "{devices=[2,2]<=[4]}", "{devices=[4,1,2]<=[8] last_tile_dim_replicate}",
    "{devices=[2,2,2]<=[2,2,2]T(2,0,1) last_tile_dims={manual}}",
    "{devices=[2,1,4]<=[8] last_tile_dims={unreduced, replicated}}",
    "{devices=[2,2]0,2,1,3}", "{devices=[2]<=[2] shard_as 1}",
    "{{replicated}, {devices=[2]<=[2]}, {maximal device=0}}",
    '{replicated metadata={op_name="a/b" source_file="x.py" source_line=3}}',
]
SHARDING_TOKENS = ["{", "}", "[", "]", "(", ")", ",", "=", "<=", "T", " ", "-", "0", "1", "7",
                   "4294967296", "99999999999999999999", "devices", "maximal", "device",
                   "replicated", "manual", "last_tile_dims", "last_tile_dim_replicate",
                   "shard_like", "metadata", '"', "\\", "/*", "*/", "\x00", "é"]


def _check_sharding_text(text: str) -> None:
    try:
        sharding = parse_hlo_sharding(text)
    except ShardingSyntaxError as error:
        # The column must point into the text (or just past its end).
        assert error.column is None or 1 <= error.column <= len(text) + 1, (text, error.column)
        return
    printed = format_hlo_sharding(sharding)
    assert parse_hlo_sharding(printed) == sharding, (text, printed)
    assert format_hlo_sharding(parse_hlo_sharding(printed)) == printed


@FUZZ
@given(st.text(alphabet=st.sampled_from("{}[](),=<>T -0123456789abcdeilmnoprstuvxy_\"\\/*"),
               max_size=60))
def test_sharding_parser_on_random_text(text):
    _check_sharding_text(text)


@FUZZ
@given(st.lists(st.sampled_from(SHARDING_TOKENS), max_size=25).map("".join))
def test_sharding_parser_on_random_tokens(text):
    _check_sharding_text(text)


@FUZZ
@given(st.sampled_from(VALID_SHARDINGS), st.data())
def test_sharding_parser_on_mutated_shardings(valid, data):
    _check_sharding_text(_mutate(data, valid, SHARDING_TOKENS))


def test_the_sharding_corpus_is_valid():
    # Mutations of invalid seeds would not reach the parser's later checks.
    for text in VALID_SHARDINGS:
        assert format_hlo_sharding(parse_hlo_sharding(text))


# -------------------------------------------------------------- rules loader

VALID_RULES = '''\
[mesh]
axes = "data=4,model=2"
devices = [0, 1, 2, 3, 4, 5, 6, 7]

[[rules]]
pattern = "attn'\\\\]\\\\['w[qkv]'\\\\]"
spec = "(None, 'model')"

[[rules]]
pattern = '^batch'
spec = "(('data', 'model'), None)"
unreduced = ["data"]
reduction = "max"
'''
RULES_TOKENS = ["[", "]", "[[", "]]", "=", "\"", "'", "\n", "#", ",", "(", ")", "None",
                "'data'", "mesh", "rules", "axes", "devices", "pattern", "spec", "unreduced",
                "reduction", "model=0", "data=-1", "x=99999999999999999999", "(((((", "\\",
                "\\u00e9", "[a-", "{1,}", "*", "inf", "nan", "true", "1979-05-27", "\x00"]


def _check_rules_text(text: str) -> None:
    lines = text.count("\n") + 1
    try:
        rule_set = parse_rules(text, "fuzz.toml")
    except RulesError as error:
        # Located in the rules file, at a line it has.
        assert error.location is not None and error.location.startswith("fuzz.toml")
        found = re.match(r"fuzz\.toml:(\d+):(\d+)$", error.location)
        assert found or error.location == "fuzz.toml", error.location
        assert not found or 1 <= int(found.group(1)) <= lines, (text, error.location)
        return
    assert isinstance(rule_set, RuleSet) and rule_set.rules
    for rule in rule_set.rules:
        rule.regex.search("params['w']")  # compiled and usable


def _toml_value(value) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return json.dumps(value)  # a TOML basic string, JSON's escapes
    if isinstance(value, list):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    return repr(value)


def _toml_document(document: dict) -> str:
    """A TOML emitter just large enough for the documents drawn below."""
    out = []
    for key, value in document.items():
        if isinstance(value, dict):
            out.append(f"[{key}]")
            out += [f"{k} = {_toml_value(v)}" for k, v in value.items()]
        elif isinstance(value, list) and value and all(isinstance(v, dict) for v in value):
            for table in value:
                out.append(f"[[{key}]]")
                out += [f"{k} = {_toml_value(v)}" for k, v in table.items()]
        else:
            out.append(f"{key} = {_toml_value(value)}")
    return "\n".join(out) + "\n"


_SCALARS = st.one_of(
    st.text(max_size=12), st.integers(-5, 2**70), st.booleans(),
    st.floats(allow_nan=True), st.sampled_from(["data=4,model=2", "data=2", "x=0", "a=2,a=2",
                                                "(None, 'model')", "('data', 'data')", "(1,)",
                                                "None", "w[", "^x$", "sum", "max", "avg"]))
_VALUES = st.one_of(_SCALARS, st.lists(_SCALARS, max_size=4))
_KEYS = st.sampled_from(["axes", "devices", "pattern", "spec", "unreduced", "reduction", "other"])
_DOCUMENTS = st.fixed_dictionaries({}, optional={
    "mesh": st.one_of(st.dictionaries(_KEYS, _VALUES, max_size=3), _SCALARS),
    "rules": st.one_of(st.lists(st.dictionaries(_KEYS, _VALUES, max_size=5), max_size=3),
                       _SCALARS),
    "extra": _VALUES,
})


@FUZZ
@given(st.text(alphabet=st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=80))
def test_rules_loader_on_random_text(text):
    _check_rules_text(text)


@FUZZ
@given(_DOCUMENTS)
def test_rules_loader_on_random_documents(document):
    _check_rules_text(_toml_document(document))


@FUZZ
@given(st.data())
def test_rules_loader_on_mutated_rules(data):
    _check_rules_text(_mutate(data, VALID_RULES, RULES_TOKENS))


def test_the_rules_corpus_is_valid():
    rule_set = parse_rules(VALID_RULES, "fuzz.toml")
    assert len(rule_set.rules) == 2 and rule_set.mesh.size == 8
