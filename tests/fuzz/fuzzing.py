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
import re
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
#: every release's recordings (tests/data/slurm/record.py)
SCENARIOS = (*(f"{name}{suffix}" for name in ("mixed-16x8", "typed-4x4") for suffix in ("", "-23.11", "-24.11", "-25.11", "-26.05")),
             "narrow-8x8-24.11", "narrow-8x8-25.11", "narrow-8x8-26.05",
             *(f"{name}{suffix}" for name in ("features-4x8", "layout-mixed", "layout-shared")
               for suffix in ("", "-23.11", "-24.11", "-25.11", "-26.05")),
             *(f"layout-blocks-{release}" for release in ("23.11", "24.11", "25.11", "26.05")))


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


def clear(call: Callable[[], Any], *errors: type[BaseException], case: str = "") -> Any:
    """Run ``call``; one of the parser's own ``errors`` is fine if it says something, anything else escapes
    (noting ``case``, the input, where hypothesis does not print it)."""
    try:
        return call()
    except errors as err:
        assert str(err).strip(), f"{type(err).__name__} raised without a message"
        return err
    except BaseException as err:
        if case:
            err.add_note(f"input: {case[:300]!r}")
        raise


def recorded(filename: str) -> list[str]:
    """The text a command printed on the dev cluster, one entry per scenario that recorded it (but nothing: no
    topology plugin, no topology printed)."""
    paths = [SLURM_DATA / scenario / filename for scenario in SCENARIOS]
    return [text for path in paths if path.exists() and (text := path.read_text()).strip()]


# -- text mutations ---------------------------------------------------------------------------------

#: values that have broken parsers before: digits int() refuses, numbers past float's range, odd spaces
NASTY = ("(null)", "N/A", "None", "Unknown", "-1", "0", "1e9", "9" * 400, "9" * 400 + "M", "½", "²", "١٢", "１２",
         "nan", "inf", "node[", "node]", "node[1-", "n[3-1]", "gpu:", "gpu:a100:x", "gres/gpu=", "2026-13-45T99:99:99",
         "0001-01-01T00:00:00", "1-2-3", "\x00", "\ufeff", "=", "a=b=c", "\u2028", "\x85")
nasty = st.sampled_from(NASTY)
#: what a newer Slurm, a broken pipe or a confused terminal might put into a field (half of it nasty)
garbage = nasty | st.one_of(
    st.text(max_size=30),
    st.text(alphabet="[](),:=+-_*~#%!$@^ \t0123456789abcxyzNODE", max_size=30),
    st.integers(min_value=-(10**30), max_value=10**30).map(str),
    st.floats().map(str),
)
_unit = st.floats(min_value=0, max_value=1, exclude_max=True)


def _pick(items: list, at: float):
    return items[int(at * len(items)) % len(items)]


def _insert(text: str, at: float, payload: str) -> str:
    i = int(at * len(text))
    return text[:i] + payload + text[i:]


_TOKEN = re.compile(r"(?:^|(?<=\s))([A-Za-z][\w:/.]*)=(\S*)")


def _edit_token(text: str, at: float, payload: str | None) -> str:
    """Drop one ``Key=Value`` token (payload None) or give it the value ``payload``."""
    tokens = list(_TOKEN.finditer(text))
    if not tokens:
        return text
    m = _pick(tokens, at)
    return text[: m.start()] + ("" if payload is None else f"{m.group(1)}={payload}") + text[m.end() :]


def _edit_key(text: str, at: float, payload: str) -> str:
    """Give one key the value ``payload`` in every record, as a Slurm that changed the field would."""
    keys = sorted({m.group(1) for m in _TOKEN.finditer(text)})
    if not keys:
        return text
    key = _pick(keys, at)
    return _TOKEN.sub(lambda m: f"{key}={payload}" if m.group(1) == key else m.group(0), text)


def _mutate_text(text: str, op: tuple[str, float, str]) -> str:
    kind, at, payload = op
    flat = re.sub(r"\s", "", payload)
    if kind == "truncate":
        return text[: int(at * len(text))]
    if kind == "drop_field":
        return _edit_token(text, at, None)
    if kind == "change_value":
        return _edit_token(text, at, flat)
    if kind == "change_key":
        return _edit_key(text, at, flat)
    if kind == "new_field":  # a field a newer Slurm added, between two existing ones
        i = text.find(" ", int(at * len(text)))
        return text if i < 0 else f"{text[:i]} NewerField={payload}{text[i:]}"
    if kind == "inject":
        return _insert(text, at, payload)
    if kind == "drop_line":
        lines = text.splitlines(keepends=True)
        return "".join(line for i, line in enumerate(lines) if i != int(at * len(lines)))
    return text.replace("\n", "\r\n") if kind == "crlf" else text


TEXT_OPS = ("truncate", "drop_field", "change_value", "change_key", "new_field", "inject", "drop_line", "crlf")
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
#: JSON tokens json.dumps never writes but json.loads accepts (or chokes on)
RAW_TOKENS = ("NaN", "Infinity", "-Infinity", "1e400", "9" * 400, "9" * 5000, "[" * 100_000 + "]" * 100_000)
_RAW = "\x00raw{}\x00"
json_payloads = json_values | st.sampled_from(range(len(RAW_TOKENS))).map(_RAW.format)


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


def _get(doc: Any, path: tuple) -> Any:
    for key in path:
        doc = doc[key]
    return doc


def _newer_shape(value: Any, flag: bool) -> Any:
    """How Slurm 23.02+ (openapi v0.0.39+) spells the same value: numbers wrapped, strings as lists."""
    if isinstance(value, int) and not isinstance(value, bool):
        return {"set": flag, "infinite": not flag and value == 0, "number": value}
    if isinstance(value, str):
        return [value] if value else []
    return value


def _change(kind: str, value: Any, payload: Any, flag: bool) -> Any:
    return payload if kind == "replace" else _newer_shape(value, flag)


def _mutate_doc(doc: Any, op: tuple[str, float, Any, bool]) -> Any:
    """One structural change: at one place in the document, or to one key wherever it appears."""
    kind, at, payload, flag = op
    paths = _paths(doc)
    if kind.endswith("_key"):  # delete_key, replace_key, newer_shape_key
        keys = sorted({p[-1] for p in paths if p and isinstance(p[-1], str)})
        if not keys:
            return doc
        key, kind = _pick(keys, at), kind.removesuffix("_key")
        for path in sorted((p for p in paths if p and p[-1] == key), key=len, reverse=True):  # inner ones first
            parent = _get(doc, path[:-1])
            if kind == "delete":
                parent.pop(key, None)
            else:
                parent[key] = _change(kind, parent.get(key), payload, flag)
        return doc
    path = _pick(paths, at)
    if kind == "unknown_field":
        node = _get(doc, path)
        if isinstance(node, dict):
            node[f"new_in_next_release_{len(node)}"] = payload
        return doc
    if not path:
        return _change(kind, doc, payload, flag) if kind != "delete" else {}
    parent = _get(doc, path[:-1])
    if kind == "delete":
        del parent[path[-1]]
    else:
        parent[path[-1]] = _change(kind, parent[path[-1]], payload, flag)
    return doc


JSON_OPS = ("delete", "replace", "newer_shape", "unknown_field", "delete_key", "replace_key", "newer_shape_key")
json_mutations = st.lists(st.tuples(st.sampled_from(JSON_OPS), _unit, json_payloads, st.booleans()),
                          min_size=1, max_size=5)


def to_json(doc: Any) -> str:
    """``json.dumps``, with the raw-token placeholders swapped for the tokens themselves."""
    text = json.dumps(doc)
    for i, token in enumerate(RAW_TOKENS):
        text = text.replace(json.dumps(_RAW.format(i)), token)
    return text


def mutated_json(filename: str) -> st.SearchStrategy[str]:
    """A recorded ``--json`` document with structural mutations, sometimes then cut or corrupted as text."""

    def apply(base: str, ops: list, cut: tuple[str, float, str] | None) -> str:
        doc = json.loads(base)
        for op in ops:
            doc = _mutate_doc(doc, op)
        text = to_json(doc)
        return text if cut is None else _mutate_text(text, cut)

    cuts = st.none() | st.tuples(st.sampled_from(("truncate", "inject")), _unit, garbage)
    return st.builds(apply, st.sampled_from(recorded(filename)), json_mutations, cuts)
