"""Fuzzing the readers of Slurm's output, starting from what the dev cluster really printed.

Mutated output (truncated, fields dropped or retyped, garbage injected) must read or fail with
SlurmParseError. Changes a newer Slurm makes without changing meaning (fields added, numbers
wrapped as ``{"set", "infinite", "number"}``, states as lists) must read to the very same state.
"""

from __future__ import annotations

import json
import re
from typing import Any

from fuzzing import clear, garbage, json_values, mutated_json, mutated_text, recorded, target
from hypothesis import strategies as st

from compass_slurm.slurm import parse_json, parse_text
from compass_slurm.slurm.cli import CliBackend
from compass_slurm.slurm.errors import SlurmParseError

TEXT_PARSERS = {
    "scontrol show node": ("nodes.txt", parse_text.nodes),
    "scontrol show job": ("jobs.txt", parse_text.jobs),
    "scontrol show partition": ("partitions.txt", parse_text.partitions),
    "scontrol show reservation": ("reservations.txt", parse_text.reservations),
}
JSON_PARSERS = {
    "sinfo --json": ("sinfo.json", parse_json.nodes),
    "squeue --json": ("squeue.json", parse_json.jobs),
}


def _text_target(command: str) -> None:
    filename, parse = TEXT_PARSERS[command]

    @target(command, mutated_text(filename))
    def test(text: str) -> None:
        clear(lambda: parse(text), SlurmParseError)

    globals()[f"test_mutated_{filename.replace('.', '_')}_reads_or_raises"] = test


def _json_target(command: str) -> None:
    filename, parse = JSON_PARSERS[command]

    @target(command, mutated_json(filename))
    def test(text: str) -> None:
        clear(lambda: parse(parse_json.load(text, command)), SlurmParseError)

    globals()[f"test_mutated_{filename.replace('.', '_')}_reads_or_raises"] = test


for _command in TEXT_PARSERS:
    _text_target(_command)
for _command in JSON_PARSERS:
    _json_target(_command)


# -- fields a newer Slurm adds change nothing ---------------------------------------------------------

_KEY_START = re.compile(r"(?<= )[A-Za-z][\w:/.]*=")


@st.composite
def with_new_fields(draw: st.DrawFn, filename: str) -> tuple[str, str]:
    """(recorded output, the same output with unknown ``Key=value`` fields put before existing keys)."""
    base = draw(st.sampled_from([text for text in recorded(filename) if _KEY_START.search(text)]))
    starts = [m.start() for m in _KEY_START.finditer(base)]
    chosen = sorted(draw(st.sets(st.sampled_from(starts), min_size=1, max_size=5)), reverse=True)
    out = base
    for pos in chosen:
        value = draw(st.from_regex(r"[\w:,.()/=+-]{0,20}", fullmatch=True))
        out = f"{out[:pos]}NewIn2599_{pos}={value} {out[pos:]}"
    return base, out


def _new_fields_target(command: str) -> None:
    filename, parse = TEXT_PARSERS[command]

    @target(command, with_new_fields(filename))
    def test(case: tuple[str, str]) -> None:
        base, newer = case
        assert parse(newer) == parse(base)

    globals()[f"test_new_fields_in_{filename.replace('.', '_')}_change_nothing"] = test


for _command in TEXT_PARSERS:
    _new_fields_target(_command)


@target("scontrol --version", st.one_of(mutated_text("version.txt"), garbage))
def test_version_line_reads_or_raises(text):
    version = clear(lambda: parse_text.version(text), SlurmParseError)
    if isinstance(version, str):
        assert re.fullmatch(r"\d+\.\d+\.\S+", version)


@target("squeue --format=%T", st.integers(0, 255), st.one_of(mutated_text("squeue-state.txt"), garbage))
def test_job_state_answer_is_a_word_or_none(code, text):
    backend = CliBackend(runner=lambda argv, timeout: (code, text, ""))
    state = backend.job_state("42")
    assert state is None or (state == state.strip() and state)


# -- JSON documents of other Slurm versions ----------------------------------------------------------

#: fields later releases spell differently: states become lists, numbers become {"set", "infinite", "number"}
_STATE_FIELDS = {"state", "job_state"}


def _respell(obj: Any, choose: st.DrawFn) -> Any:
    """The same document as a later openapi version might print it, respelling each field or not."""
    if isinstance(obj, list):
        return [_respell(v, choose) for v in obj]
    if not isinstance(obj, dict):
        return obj
    out: dict[str, Any] = {}
    for key, value in obj.items():
        if key in _STATE_FIELDS and isinstance(value, str) and choose(st.booleans()):
            value = value.upper().split("+")
        elif isinstance(value, int) and not isinstance(value, bool) and choose(st.booleans()):
            value = {"set": True, "infinite": False, "number": value}
        elif value is None and choose(st.booleans()):
            value = {"set": False, "infinite": False, "number": 0}
        out[key] = _respell(value, choose)
    if choose(st.booleans()):
        out[choose(st.from_regex(r"new_[a-z_]{1,12}", fullmatch=True))] = choose(json_values)
    return out


def _meta(choose: st.DrawFn) -> dict[str, Any]:
    major, minor = choose(st.sampled_from([(21, 8), (22, 5), (23, 2), (23, 11), (24, 5), (25, 5)]))
    plugin = choose(st.sampled_from(["v0.0.37", "v0.0.38", "v0.0.39", "v0.0.40", "v0.0.41", "v0.0.42"]))
    return {"plugin": {"type": f"openapi/{plugin}", "name": f"Slurm OpenAPI {plugin}"},
            "Slurm": {"version": {"major": major, "minor": minor, "micro": 1}, "release": f"{major}.{minor:02d}.1"}}


def _other_version_target(command: str) -> None:
    filename, parse = JSON_PARSERS[command]

    @target("--json of other Slurm versions", st.sampled_from(recorded(filename)), st.data())
    def test(text: str, data: st.DataObject) -> None:
        doc = json.loads(text)
        newer = _respell(doc, data.draw)
        newer["meta"] = _meta(data.draw)
        assert parse(parse_json.load(json.dumps(newer), command)) == parse(doc)
        assert parse_json.version(newer) == newer["meta"]["Slurm"]["release"]

    globals()[f"test_{filename.replace('.', '_')}_of_other_versions_reads_the_same"] = test


for _command in JSON_PARSERS:
    _other_version_target(_command)


@target("--json of other Slurm versions", st.sampled_from(["sinfo", "jobs_v2", "data", "nodes"]), json_values)
def test_a_reshaped_document_is_refused_with_a_clear_error(key, entries):
    # Slurm 23.02's sinfo --json lists partition groups under "sinfo", not nodes under "nodes"
    text = json.dumps({"meta": {}, "errors": [], key: entries})
    clear(lambda: parse_json.nodes(parse_json.load(text, "sinfo --json")), SlurmParseError)
