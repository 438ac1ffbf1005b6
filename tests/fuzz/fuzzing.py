"""What every fuzz target shares: the example budget, the per-parser case counter, the "clear error" check
and the mutations applied to Slurm output recorded on the dev cluster.

A fuzz target is a test decorated with ``@target("parser name", strategies...)``: it runs
``EXAMPLES`` hypothesis examples (COMPASS_FUZZ_EXAMPLES, default 60, so the suite stays fast;
benchmarks/fuzz_counts.py raises it) and counts every example it runs under its parser's name.
"""

from __future__ import annotations

import functools
import json
import os
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

EXAMPLES = int(os.environ.get("COMPASS_FUZZ_EXAMPLES", "60"))
#: parser name -> examples run in this session
CASES: Counter[str] = Counter()

SLURM_DATA = Path(__file__).resolve().parents[1] / "data" / "slurm"
SCENARIOS = ("mixed-16x8", "typed-4x4")


def target(parser: str, *strategies: st.SearchStrategy, **named: st.SearchStrategy) -> Callable:
    """Mark a test as a fuzz target of ``parser`` and run it over ``strategies`` with the session budget."""

    def wrap(test: Callable) -> Callable:
        @functools.wraps(test)
        def counted(*args: Any, **kwargs: Any) -> None:
            CASES[parser] += 1
            test(*args, **kwargs)

        run = settings(max_examples=EXAMPLES, deadline=None, database=None,
                       suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
        return pytest.mark.fuzz(parser=parser)(run(given(*strategies, **named)(counted)))

    return wrap


def clear(call: Callable[[], Any], *errors: type[BaseException]) -> Any:
    """Run ``call``; one of the parser's own ``errors`` is fine if it says something, anything else escapes."""
    try:
        return call()
    except errors as err:
        assert str(err).strip(), f"{type(err).__name__} raised without a message"
        return err


def recorded(filename: str) -> list[str]:
    """The text a command printed on the dev cluster, one entry per scenario that recorded it."""
    paths = [SLURM_DATA / scenario / filename for scenario in SCENARIOS]
    return [path.read_text() for path in paths if path.exists()]


# -- text mutations ---------------------------------------------------------------------------------

#: what a newer Slurm, a broken pipe or a confused terminal might put into a field
garbage = st.one_of(
    st.text(max_size=30),
    st.text(alphabet="[](),:=+-_*~#%!$@^ \t0123456789abcxyzNODE", max_size=30),
    st.sampled_from(["(null)", "N/A", "None", "Unknown", "-1", "0", "1e9", "99999999999999999999999", "½", "²", "١٢",
                     "nan", "inf", "node[", "node]", "node[1-", "n[3-1]", "gpu:", "gpu:a100:x", "gres/gpu=",
                     "2026-13-45T99:99:99", "1-2-3", "\x00", "\ufeff", "=", "==", "a=b=c"]),
    st.integers(min_value=-(10**30), max_value=10**30).map(str),
    st.floats(allow_nan=True).map(str),
)


def _insert(text: str, at: float, payload: str) -> str:
    i = int(at * len(text))
    return text[:i] + payload + text[i:]


def _field_spans(text: str) -> list[tuple[int, int, int]]:
    """(start, '=' position, end) of every ``Key=Value`` token, split on whitespace."""
    spans, pos = [], 0
    for token in text.split(" "):
        eq = token.find("=")
        if eq > 0:
            spans.append((pos, pos + eq, pos + len(token)))
        pos += len(token) + 1
    return spans


def _edit_field(text: str, at: float, payload: str | None) -> str:
    """Drop the field at ``at`` (payload None) or replace its value with ``payload``."""
    spans = _field_spans(text)
    if not spans:
        return text
    start, eq, end = spans[int(at * len(spans)) % len(spans)]
    return text[:start] + text[end:] if payload is None else text[: eq + 1] + payload + text[end:]


def _mutate_text(text: str, op: tuple[str, float, str]) -> str:
    kind, at, payload = op
    if kind == "truncate":
        return text[: int(at * len(text))]
    if kind == "drop_field":
        return _edit_field(text, at, None)
    if kind == "change_value":
        return _edit_field(text, at, payload.replace(" ", "").replace("\n", ""))
    if kind == "new_field":  # a field a newer Slurm added, between two existing ones
        i = text.find(" ", int(at * len(text)))
        return text if i < 0 else text[:i] + f" NewerField={payload}" + text[i:]
    if kind == "inject":
        return _insert(text, at, payload)
    if kind == "drop_line":
        lines = text.splitlines(keepends=True)
        if lines:
            del lines[int(at * len(lines)) % len(lines)]
        return "".join(lines)
    return text.replace("\n", "\r\n") if kind == "crlf" else text


TEXT_OPS = ("truncate", "drop_field", "change_value", "new_field", "inject", "drop_line", "crlf")
_unit = st.floats(min_value=0, max_value=1, exclude_max=True)
text_mutations = st.lists(st.tuples(st.sampled_from(TEXT_OPS), _unit, garbage), min_size=1, max_size=4)


def mutated_text(filename: str) -> st.SearchStrategy[str]:
    """A recorded output of one scenario with a few mutations applied in turn."""

    def apply(base: str, ops: list[tuple[str, float, str]]) -> str:
        for op in ops:
            base = _mutate_text(base, op)
        return base

    return st.builds(apply, st.sampled_from(recorded(filename)), text_mutations)


# -- JSON mutations ---------------------------------------------------------------------------------

json_values = st.recursive(
    st.none() | st.booleans() | st.integers(min_value=-(2**70), max_value=2**70) | st.floats() | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=10), inner, max_size=4),
    max_leaves=12,
)


def _paths(doc: Any, prefix: tuple = ()) -> list[tuple]:
    """Every path (tuple of keys / indexes) into a JSON document, the root included."""
    out = [prefix]
    if isinstance(doc, dict):
        for key, value in doc.items():
            out += _paths(value, (*prefix, key))
    elif isinstance(doc, list):
        for i, value in enumerate(doc):
            out += _paths(value, (*prefix, i))
    return out


def _set(doc: Any, path: tuple, value: Any, delete: bool = False) -> Any:
    if not path:
        return value
    parent = doc
    for key in path[:-1]:
        parent = parent[key]
    if delete:
        del parent[path[-1]]
    else:
        parent[path[-1]] = value
    return doc


def _newer_shape(value: Any, flag: bool) -> Any:
    """How Slurm 23.02+ (openapi v0.0.39+) spells the same value: numbers wrapped, strings as lists."""
    if isinstance(value, int) and not isinstance(value, bool):
        return {"set": flag, "infinite": not flag and value == 0, "number": value}
    if isinstance(value, str):
        return [value] if value else []
    return value


def _mutate_doc(doc: Any, op: tuple[str, float, Any, bool]) -> Any:
    kind, at, payload, flag = op
    paths = _paths(doc)
    path = paths[int(at * len(paths)) % len(paths)]
    node: Any = doc
    for key in path:
        node = node[key]
    if kind == "delete" and path:
        return _set(doc, path, None, delete=True)
    if kind == "replace":
        return _set(doc, path, payload)
    if kind == "newer_shape":
        return _set(doc, path, _newer_shape(node, flag))
    if kind == "unknown_field" and isinstance(node, dict):
        node[f"new_in_next_release_{len(node)}"] = payload
    return doc


JSON_OPS = ("delete", "replace", "newer_shape", "unknown_field")
json_mutations = st.lists(st.tuples(st.sampled_from(JSON_OPS), _unit, json_values, st.booleans()), min_size=1, max_size=5)


def mutated_json(filename: str) -> st.SearchStrategy[str]:
    """A recorded ``--json`` document with structural mutations, sometimes then cut or corrupted as text."""

    def apply(base: str, ops: list, cut: tuple[str, float, str] | None) -> str:
        doc = json.loads(base)
        for op in ops:
            doc = _mutate_doc(doc, op)
        text = json.dumps(doc)
        return text if cut is None else _mutate_text(text, cut)

    cuts = st.none() | st.tuples(st.sampled_from(("truncate", "inject")), _unit, garbage)
    return st.builds(apply, st.sampled_from(recorded(filename)), json_mutations, cuts)
