"""The fast JSON path reads exactly what the parsers read, and reads it as ``json`` does."""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest

from compass_slurm.slurm import parse_json

DATA = Path(__file__).resolve().parents[1] / "data" / "slurm"
DOCS = sorted(DATA.glob("*/*.json"))
COMMAND = {"sinfo.json": "sinfo --json", "squeue.json": "squeue --json"}


def fields_read() -> set[str]:
    """Every field name the parsers ask a _Fields for (f.str("x"), _gpu_request(f, "x"), ...)."""
    tree = ast.parse(Path(parse_json.__file__).read_text())
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and node.args:
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
            if name in ("str", "int", "list", "get", "require") and isinstance(func, ast.Attribute) \
                    and getattr(func.value, "id", "") == "f":
                arg = node.args[0]
            elif name == "_gpu_request":
                arg = node.args[1]
            else:
                continue
            if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
                found.add(arg.value)
    return found


def test_every_field_a_parser_reads_is_kept_by_the_fast_loader():
    kept = set().union(*(fields for _, fields in parse_json.FIELDS.values()), parse_json.GROUPED_FIELDS)
    assert fields_read() - kept == set()


@pytest.mark.parametrize("path", [p for p in DOCS if p.name in COMMAND], ids=lambda p: f"{p.parent.name}/{p.name}")
def test_the_fast_loader_reads_recorded_documents_as_json_does(path):
    command = COMMAND[path.name]
    text = path.read_text()
    fast = parse_json._fast_load(text, command)
    key, fields = parse_json.FIELDS[command]
    plain = json.loads(text)
    if key not in plain:  # the grouped shape of newer releases: left to json
        assert fast is None and "sinfo" in plain
        return
    assert fast[key] == [{k: v for k, v in entry.items() if k in fields} for entry in plain[key]]
    parse = parse_json.nodes if key == "nodes" else parse_json.jobs
    assert parse(parse_json.load(text, command)) == parse(plain)


@pytest.mark.parametrize("text", ['{"jobs": [1, 2]}', '{"jobs": [{"job_id": NaN}]}', '{"jobs": {}}'])
def test_what_msgspec_declines_is_read_by_json(text):
    assert parse_json._fast_load(text, "squeue --json") is None
    assert parse_json.load(text, "squeue --json") == json.loads(text)


@pytest.mark.parametrize("text, message", [("[]", "expected a JSON object"), ('{"jobs": [', "not JSON")])
def test_errors_keep_the_json_module_s_message(text, message):
    with pytest.raises(parse_json.SlurmParseError, match=message):
        parse_json.load(text, "squeue --json")


def test_a_memo_returns_what_a_fresh_parse_builds():
    doc = json.loads((DATA / "mixed-16x8" / "squeue.json").read_text())
    memo = parse_json.Memo()
    first = parse_json.jobs(doc, memo)
    doc["jobs"][0]["comment"] = "compass:migratable"  # one job changed since the last read
    doc["jobs"][1]["priority"] = True  # not a number: parsed afresh, and refused, although True == 1
    with pytest.raises(Exception, match="is not a number"):
        parse_json.jobs(doc, memo)
    doc["jobs"][1]["priority"] = json.loads((DATA / "mixed-16x8" / "squeue.json").read_text())["jobs"][1]["priority"]
    again = parse_json.jobs(doc, memo)
    assert again == parse_json.jobs(doc)
    assert again[0].migratable and not first[0].migratable
    assert all(a is b for a, b in zip(again[1:], first[1:]))  # unchanged jobs: the same objects


def test_a_memo_keeps_json_values_apart_and_parses_what_has_no_key_afresh():
    doc = json.loads((DATA / "mixed-16x8" / "squeue.json").read_text())
    memo = parse_json.Memo()
    doc["jobs"][0]["time_limit"] = None
    first = parse_json.jobs(doc, memo)
    doc["jobs"][0]["time_limit"] = float("nan")  # json.loads reads NaN: it must not pass for the null before
    with pytest.raises(parse_json.SlurmParseError, match="is not a number"):
        parse_json.jobs(doc, memo)
    doc["jobs"][0]["time_limit"] = None
    doc["jobs"][0]["priority"] = 2**70  # beyond MessagePack: no key, parsed every time
    again, twice = parse_json.jobs(doc, memo), parse_json.jobs(doc, memo)
    assert again[0] == twice[0] and again[0] is not twice[0] and again[0].priority == 2**70
    assert again[1] is first[1] and twice[1] is first[1]


def test_a_memo_drops_entries_no_longer_printed_once_they_outnumber_the_live_ones():
    memo = parse_json.Memo()
    memo.map([{"n": k} for k in range(3000)], lambda i, raw: raw["n"])
    kept = memo.map([{"n": 1}, {"n": 2}], lambda i, raw: -1)  # seen before: not built again
    assert kept == [1, 2]
    memo.map([{"n": 2}, {"n": 5000}], lambda i, raw: raw["n"])  # the next read prunes to the last one's
    assert len(memo._built) <= 3
    assert memo.map([{"n": 7}, {"n": 2}], lambda i, raw: "afresh") == ["afresh", 2]


def test_a_job_requeued_while_its_steps_end_reads_as_completing_not_pending():
    """squeue --json (v0.0.39+) lists a requeued job whose steps still end as PENDING with COMPLETING; squeue and
    scontrol call it COMPLETING. Read as pending, the daemon re-pinned it then, and the StartTime=now it sent was
    overwritten once the steps ended (23.11 on: the job waited out Slurm's requeue delay)."""
    doc = json.loads((DATA / "mixed-16x8-23.11" / "squeue.json").read_text())
    raw = doc["jobs"][0]
    states = {"PENDING+COMPLETING": ("COMPLETING", False), "PENDING": ("PENDING", True),
              "RUNNING": ("RUNNING", False), "PENDING+REQUEUED": ("PENDING", True)}
    for listed, (state, pending) in states.items():
        raw["job_state"] = listed.split("+")
        (job,) = parse_json.jobs({**doc, "jobs": [raw]})
        assert (job.state, job.pending) == (state, pending), listed
