"""Fuzzing the readers of Slurm's output, starting from what the dev cluster really printed.

Mutated output (truncated, fields dropped or retyped, garbage injected) must read or fail with
SlurmParseError. Changes a newer Slurm makes without changing meaning (fields added, numbers
wrapped as ``{"set", "infinite", "number"}``, states as lists) must read to the very same state.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any

import pytest
from fuzzing import CASES, NASTY, clear, garbage, json_values, mutated_json, mutated_text, recorded, target
from hypothesis import strategies as st

from compass_slurm.slurm import parse_json, parse_narrow, parse_text
from compass_slurm.slurm.cli_backend import CliBackend
from compass_slurm.slurm.errors import SlurmParseError

TEXT_PARSERS = {
    "scontrol show node": ("nodes.txt", parse_text.nodes),
    "scontrol show job": ("jobs.txt", parse_text.jobs),
    "scontrol show partition": ("partitions.txt", parse_text.partitions),
    "scontrol show reservation": ("reservations.txt", parse_text.reservations),
    "scontrol show topology": ("topology.txt", parse_text.topology),
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


# -- every field of a record, every nasty value: the rare combinations random mutation would miss ----

_FIELD = re.compile(r"(?:^|(?<=\s))([A-Za-z][\w:/.]*)=(\S*)")
JSON_NASTY = ("NaN", "Infinity", "1e400", "-1", "1.5", "9" * 400, '""', '"²"', '"9999M"', "[]", "[[]]", "{}",
              '{"set": true, "number": "x"}', '{"number": NaN}', "true", "null", '"a,b"', '"node[1-"', '"gpu:x:y"')


def _text_sweep(command: str) -> None:
    filename, parse = TEXT_PARSERS[command]

    @pytest.mark.fuzz(parser=command)
    def test() -> None:
        for text in filter(str.strip, recorded(filename)):  # (no topology plugin: nothing printed)
            line = text.splitlines()[0]
            for field in _FIELD.finditer(line):
                for value in NASTY:
                    CASES[command] += 1
                    changed = f"{line[: field.start()]}{field.group(1)}={value}{line[field.end() :]}"
                    clear(lambda: parse(changed), SlurmParseError, case=f"{field.group(1)}={value}")

    globals()[f"test_every_field_of_{filename.replace('.', '_')}_with_nasty_values"] = test


def _json_sweep(command: str) -> None:
    filename, parse = JSON_PARSERS[command]

    @pytest.mark.fuzz(parser=command)
    def test() -> None:
        for text in recorded(filename):
            doc = json.loads(text)
            entries = next(key for key in ("nodes", "jobs", "sinfo") if key in doc)  # sinfo: 23.02+ records
            first = doc[entries][0]
            for key in first:
                for value in JSON_NASTY:
                    CASES[command] += 1
                    changed = json.dumps({entries: [{**first, key: "@"}]}).replace('"@"', value)
                    clear(lambda: parse(parse_json.load(changed, command)), SlurmParseError, case=f"{key}: {value}")

    globals()[f"test_every_field_of_{filename.replace('.', '_')}_with_nasty_values"] = test


for _command in TEXT_PARSERS:
    _text_sweep(_command)
for _command in JSON_PARSERS:
    _json_sweep(_command)


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


def _by_line(text: str) -> tuple[list, dict] | str:
    """Jobs read by line: what a first read and a second one (everything parsed before) make of ``text``."""
    read = parse_text.job_lines(text, {})
    if isinstance(read, tuple):
        jobs, kept = read
        assert len({job.id for job in jobs}) == len(jobs) == len(kept)  # one line, one job
        assert parse_text.job_lines(text, kept) == read
    return read


@target("scontrol show job (by line)", st.one_of(mutated_text("jobs.txt"), garbage))
def test_mutated_job_lines_read_raise_or_are_not_trusted(text):
    clear(lambda: _by_line(text), SlurmParseError)


@pytest.mark.fuzz(parser="scontrol show job (by line)")
def test_every_field_of_a_job_line_with_nasty_values():
    for text in recorded("jobs.txt"):
        line = text.splitlines()[0]
        for field in _FIELD.finditer(line):
            for value in NASTY:
                CASES["scontrol show job (by line)"] += 1
                changed = f"{line[: field.start()]}{field.group(1)}={value}{line[field.end() :]}"
                clear(lambda: _by_line(changed), SlurmParseError, case=f"{field.group(1)}={value}")


@target("squeue --Format (narrow)", st.one_of(mutated_text("narrow.txt"), garbage))
def test_mutated_narrow_lines_read_or_raise(text):
    lines = clear(lambda: parse_narrow.lines(text, (24, 11), parse_narrow.Kept()), SlurmParseError)
    if isinstance(lines, list):  # a trusted read: each line one job's, ending in its id
        assert all(line.endswith(f"|{job_id}|") and "\n" not in line for job_id, line, _ in lines)
        assert len({job_id for job_id, _, _ in lines}) == len(lines)


@target("squeue --format=%T", st.integers(0, 255), st.one_of(mutated_text("squeue-state.txt"), garbage))
def test_job_state_answer_is_a_word_or_none(code, text):
    backend = CliBackend(runner=lambda argv, timeout: (code, text, ""))
    state = backend.job_state("42")
    assert state is None or (state == state.strip() and state)


# -- JSON documents of other Slurm versions ----------------------------------------------------------

#: fields later releases spell differently: states become lists, numbers become {"set", "infinite", "number"}
_STATE_FIELDS = {"state", "job_state"}


def _keys(obj: Any) -> set[str]:
    if isinstance(obj, list):
        return set().union(*map(_keys, obj))
    return set(obj).union(*map(_keys, obj.values())) if isinstance(obj, dict) else set()


def _respell(obj: Any, respelled: set[str], extra: dict[str, Any]) -> Any:
    """The same document as a later openapi version might print it: the ``respelled`` fields in the new
    spelling, and ``extra`` fields (unknown to us) in every object."""
    if isinstance(obj, list):
        return [_respell(v, respelled, extra) for v in obj]
    if not isinstance(obj, dict):
        return obj
    out: dict[str, Any] = {}
    for key, value in obj.items():  # a value re-spelt here is not re-spelt again ("number" may be respelled)
        if key in respelled and key in _STATE_FIELDS and isinstance(value, str):
            out[key] = value.upper().split("+")
        elif key in respelled and isinstance(value, int) and not isinstance(value, bool):
            out[key] = {"set": True, "infinite": False, "number": value}
        elif key in respelled and value is None:
            out[key] = {"set": False, "infinite": False, "number": 0}
        else:
            out[key] = _respell(value, respelled, extra)
    return {**out, **{k: v for k, v in extra.items() if k not in out}}


def _meta(choose: st.DrawFn) -> dict[str, Any]:
    major, minor = choose(st.sampled_from([(21, 8), (22, 5), (23, 2), (23, 11), (24, 5), (25, 5)]))
    plugin = choose(st.sampled_from(["v0.0.37", "v0.0.38", "v0.0.39", "v0.0.40", "v0.0.41", "v0.0.42"]))
    return {"plugin": {"type": f"openapi/{plugin}", "name": f"Slurm OpenAPI {plugin}"},
            "Slurm": {"version": {"major": major, "minor": minor, "micro": 1}, "release": f"{major}.{minor:02d}.1"}}


def _readable(parse: Callable[[Any], Any], text: str, command: str) -> bool:
    try:
        parse(parse_json.load(text, command))
    except SlurmParseError:  # 24.11's plain sinfo --json: grouped nodes with summed allocations
        return False
    return True


def _other_version_target(command: str) -> None:
    filename, parse = JSON_PARSERS[command]
    readable = [text for text in recorded(filename) if _readable(parse, text, command)]

    @target("--json of other Slurm versions", st.sampled_from(readable), st.data())
    def test(text: str, data: st.DataObject) -> None:
        doc = json.loads(text)
        # the parts of an already wrapped number ({"set", "infinite", "number"}) are never wrapped again
        keys = sorted(_keys(doc) - {"set", "infinite", "number"})
        respelled = data.draw(st.sets(st.sampled_from(keys)), label="respelled fields")
        extra = data.draw(st.dictionaries(st.from_regex(r"new_[a-z_]{1,12}", fullmatch=True), json_values,
                                          max_size=3), label="new fields")
        newer = _respell(doc, respelled, extra)
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
