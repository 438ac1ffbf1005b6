"""A job's --constraint as the daemon reads it: the per-node forms exactly, the per-set forms refused."""

from __future__ import annotations

import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from compass_slurm.slurm.constraint import ANY, UnsupportedConstraint, parse_constraint
from compass_slurm.slurm.errors import SlurmParseError

A100_80 = frozenset({"a100", "80gb"})
A100_40 = frozenset({"a100", "40gb"})
V100 = frozenset({"v100", "32gb"})


@pytest.mark.parametrize(("text", "yes", "no"), [
    ("a100", [A100_80, A100_40], [V100, frozenset()]),
    ("a100|v100", [A100_80, V100], [frozenset({"h100"})]),
    ("a100&80gb", [A100_80], [A100_40, V100]),
    ("a100,80gb", [A100_80], [A100_40]),  # slurmctld reads a comma as &
    ("(a100|v100)&32gb", [V100], [A100_80, A100_40]),
    ("80gb&(a100|h100)", [A100_80, frozenset({"h100", "80gb"})], [A100_40]),
    (" a100 & 80gb ", [A100_80], [A100_40]),
    ("((a100))", [A100_40], [V100]),
])
def test_per_node_forms_are_read_exactly(text, yes, no):
    c = parse_constraint(text)
    assert all(c.satisfied_by(f) for f in yes)
    assert not any(c.satisfied_by(f) for f in no)


@pytest.mark.parametrize("text", ["", "  ", None, "(null)"])
def test_no_constraint_is_any_node(text):
    assert parse_constraint(text) is ANY
    assert ANY.satisfied_by(frozenset())


@pytest.mark.parametrize("text", ["[rack1|rack2]", "[a100*2&v100*2]", "a100*2", "!a100", "a|b&c", "a&b|c"])
def test_forms_over_the_set_of_nodes_are_left_to_slurm(text):
    with pytest.raises(UnsupportedConstraint, match="constraint"):
        parse_constraint(text)


@pytest.mark.parametrize("text", ["a100&", "&a100", "(a100", "a100)", "a100||v100", "()", "a100 v100", "a%b"])
def test_malformed_text_is_an_error_naming_it(text):
    with pytest.raises(SlurmParseError, match="constraint") as err:
        parse_constraint(text)
    assert not isinstance(err.value, UnsupportedConstraint)


def test_features_named():
    assert parse_constraint("(a100|h100)&80gb").features == {"a100", "h100", "80gb"}


_names = st.sampled_from(["a", "b", "c", "d"])


def _expr(depth: int):
    if depth == 0:
        return _names
    sub = _expr(depth - 1)
    return st.one_of(_names, st.tuples(sub, st.sampled_from("&|"), sub).map(lambda t: f"({t[0]}{t[1]}{t[2]})"))


def _truth(text: str, features: frozenset[str]) -> bool:
    """The same expression evaluated by Python (fully parenthesised, so precedence never matters)."""
    code = re.sub(r"[abcd]", lambda m: str(m.group() in features), text)
    return eval(code.replace("&", " and ").replace("|", " or "))  # noqa: S307 - our own generated text


@given(_expr(3), st.frozensets(_names))
def test_normal_form_agrees_with_the_expression(text, features):
    assert parse_constraint(text).satisfied_by(features) == _truth(text, features)
