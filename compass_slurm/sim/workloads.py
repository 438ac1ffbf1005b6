"""Traces in, simulator jobs out: the CSV loader, the ``sacct`` loader and the GPU-count mapping.

A trace is a list of :class:`TraceRecord` (what happened: submit time, run time,
GPUs). The simulator needs engine jobs (gangs of identical instances), so
:func:`to_jobs` maps each record's GPU count onto the node size being simulated.

CSV columns: ``job_id, submit_time_s, duration_s, num_gpus`` (required),
``num_nodes, max_gpus_per_node`` (optional, the shape the trace recorded),
``migratable`` (optional: 1/0 or true/false, whether the job may be requeued
elsewhere), ``time_limit_s`` (optional: the job's time limit, what backfill plans
with instead of the real duration) and a ``cluster`` column that ``cluster=``
filters on (Microsoft ITP), ``gpu_type`` (optional: the GPU type the job asked for,
as ``--gpus=a100:8``) and ``constraint`` (optional: a Slurm ``-C`` expression over node
features, ``a100``, ``a100&80gb``, ``a100|h100``); with a layout (``compass simulate
--layout``) those two decide a job's eligible nodes.
Other columns are ignored.

Site history comes from Slurm accounting. Run (dates are examples)::

    sacct --allusers --allocations --parsable2 \\
        --format=JobIDRaw,Submit,Start,End,NNodes,AllocTRES \\
        --starttime=2026-04-01 --endtime=2026-05-01 > last-month.sacct

and pass the file as ``--trace``; it is recognised by its ``|``-separated header.
"""

from __future__ import annotations

import csv
import io
from collections import Counter
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from pathlib import Path

from ..engine.model import MAX_NODE_GPUS, MAX_NODES, Job
from ..engine.shape import PER_NODE, Shape
from ..engine.shape import instance_shape as shape_of
from ..slurm import gres
from ..timeparse import parse_duration

REQUIRED = ("job_id", "submit_time_s", "duration_s", "num_gpus")
SACCT_FIELDS = ("JobIDRaw", "Submit", "Start", "End", "NNodes", "AllocTRES")
#: the most GPUs a job of a trace may have: all those of the largest cluster a simulation takes
MAX_JOB_GPUS = MAX_NODES * MAX_NODE_GPUS


class TraceError(ValueError):
    """A trace that cannot be used; the message names the file and line."""


@dataclass(frozen=True, slots=True)
class TraceRecord:
    """One job of a trace as recorded: when it was submitted, how long it ran, how many GPUs."""

    id: str
    submit: float
    duration: float
    gpus: int
    nodes: int | None = None
    gpus_per_node: int | None = None
    #: from a ``migratable`` column (1/0, true/false); None when the trace does not say
    migratable: bool | None = None
    #: from a ``time_limit_s`` column (the user's time limit: the queue's run-time estimate); None: not given
    time_limit: float | None = None
    #: from a ``gpu_type`` column: the GPU type asked for; None: any
    gpu_type: str | None = None
    #: from a ``constraint`` column: a Slurm -C expression over node features (checked readable); None: any
    constraint: str | None = None


@dataclass(frozen=True, slots=True)
class SimJob:
    """A trace job as the simulator runs it: the engine job plus its submit time and run time.

    ``managed``: submitted through the wrapper (placed by the policy); otherwise plain
    sbatch, placed by Slurm and adopted pinned.
    """

    submit: float
    duration: float
    job: Job
    managed: bool = True
    #: the run-time estimate the queue plans with: the trace's time limit, else None (the real duration)
    limit: float | None = None
    #: the nodes it may run on, by its GPU type and constraint (None: every node)
    eligible: frozenset[str] | None = None


@dataclass(frozen=True)
class Trace:
    """Loaded records in submit order, and the rows skipped as malformed (``line N: why``)."""

    records: tuple[TraceRecord, ...]
    skipped: tuple[str, ...] = ()


# -- CSV -----------------------------------------------------------------------------------


def load(path: str | Path, *, skip_bad: bool = False, cluster: str | None = None) -> Trace:
    """Read a CSV trace or a ``sacct --parsable2`` dump (told apart by the header)."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8-sig")  # (a spreadsheet's export may start with a byte-order mark)
    except (OSError, UnicodeDecodeError) as err:
        raise TraceError(f"cannot read trace {path}: {err}") from None
    header = text.split("\n", 1)[0]
    if "|" in header and "JobID" in header:
        if cluster is not None:
            raise TraceError(f"{path}: a sacct dump has no cluster column to filter on")
        return load_sacct(text, name=str(path), skip_bad=skip_bad)
    return load_csv(text, name=str(path), skip_bad=skip_bad, cluster=cluster)


def load_csv(text: str, *, name: str = "<trace>", skip_bad: bool = False, cluster: str | None = None) -> Trace:
    reader = csv.reader(io.StringIO(text, newline=""))  # newline="": csv itself reads \r, \n and \r\n ends
    rows = _rows(reader, name)
    header = [h.strip() for h in next(rows, [])]
    missing = [c for c in REQUIRED if c not in header]
    if missing:
        raise TraceError(f"{name}: line 1: missing column(s) {', '.join(missing)} (need {', '.join(REQUIRED)})")
    if cluster is not None and "cluster" not in header:
        raise TraceError(f"{name}: no 'cluster' column, so --cluster {cluster} cannot select anything")
    col = {h: i for i, h in enumerate(header)}
    width = max(col[c] for c in REQUIRED) + 1
    records: list[TraceRecord] = []
    skipped: list[str] = []
    for row in rows:
        line = reader.line_num
        if not row or (len(row) == 1 and not row[0].strip()):
            continue
        if cluster is not None and (len(row) <= col["cluster"] or row[col["cluster"]] != cluster):
            continue
        try:
            if len(row) < width:
                raise ValueError(f"expected at least {width} fields, got {len(row)}")
            records.append(
                TraceRecord(
                    id=_text(row[col["job_id"]], "job_id"),
                    submit=_number(row[col["submit_time_s"]], "submit_time_s"),
                    duration=_number(row[col["duration_s"]], "duration_s"),
                    gpus=_job_gpus(_count(row[col["num_gpus"]], "num_gpus"), "num_gpus"),
                    nodes=_optional_count(row, col.get("num_nodes"), "num_nodes"),
                    gpus_per_node=_optional_count(row, col.get("max_gpus_per_node"), "max_gpus_per_node"),
                    migratable=_optional_flag(row, col.get("migratable"), "migratable"),
                    time_limit=_optional_number(row, col.get("time_limit_s"), "time_limit_s"),
                    gpu_type=_optional_text(row, col.get("gpu_type")),
                    constraint=_optional_constraint(row, col.get("constraint")),
                )
            )
        except ValueError as err:
            _bad(name, line, err, skip_bad, skipped)
    return _finish(records, skipped)


def _rows(reader: Iterator[list[str]], name: str) -> Iterator[list[str]]:
    """The reader's rows; what csv cannot split (e.g. a field past its size limit) is a TraceError."""
    try:
        yield from reader
    except csv.Error as err:
        raise TraceError(f"{name}: line {reader.line_num}: {err}") from None


def _text(value: str, column: str) -> str:
    value = value.strip()
    if not value:
        raise ValueError(f"{column} is empty")
    return value


#: the largest time a trace may give, in seconds (about 3,000 years): a simulation adds and compares times, and
#: from about 2**53 s a float no longer holds a second apart
MAX_TRACE_S = 1e11


def _number(value: str, column: str) -> float:
    try:
        x = float(value)
    except ValueError:
        raise ValueError(f"{column} {value!r} is not a number") from None
    if not 0 <= x <= MAX_TRACE_S:  # also rejects NaN and infinity
        raise ValueError(f"{column} {value!r} must be a number of seconds from 0 to {MAX_TRACE_S:.0e}")
    return x


def _count(value: str, column: str) -> int:
    try:
        x = int(value)
    except ValueError:
        raise ValueError(f"{column} {value!r} is not a whole number") from None
    if x < 1:
        raise ValueError(f"{column} {value!r} must be at least 1")
    return x


def _job_gpus(gpus: int, column: str) -> int:
    if gpus > MAX_JOB_GPUS:
        raise ValueError(f"{column} {gpus} is more than the {MAX_JOB_GPUS:,} GPUs of the largest cluster a "
                         "simulation takes")
    return gpus


def _optional_count(row: list[str], index: int | None, column: str) -> int | None:
    if index is None or index >= len(row) or not row[index].strip():
        return None
    return _count(row[index], column)


def _optional_text(row: list[str], index: int | None) -> str | None:
    if index is None or index >= len(row) or not row[index].strip():
        return None
    return row[index].strip()


def _optional_constraint(row: list[str], index: int | None) -> str | None:
    """A constraint column's text, checked to be one Slurm reads node by node (constraint.py)."""
    from ..slurm.constraint import parse_constraint
    from ..slurm.errors import SlurmParseError

    text = _optional_text(row, index)
    if text is not None:
        try:
            parse_constraint(text)
        except SlurmParseError as err:
            raise ValueError(f"constraint: {err}") from None
    return text


_FLAGS = {"1": True, "true": True, "yes": True, "0": False, "false": False, "no": False}


def _optional_number(row: list[str], index: int | None, column: str) -> float | None:
    if index is None or index >= len(row) or not row[index].strip():
        return None
    return _number(row[index], column)


def _optional_flag(row: list[str], index: int | None, column: str) -> bool | None:
    if index is None or index >= len(row) or not row[index].strip():
        return None
    try:
        return _FLAGS[row[index].strip().lower()]
    except KeyError:
        raise ValueError(f"{column} {row[index]!r} is not 1/0 or true/false") from None


def _bad(name: str, line: int, err: Exception, skip_bad: bool, skipped: list[str]) -> None:
    message = f"line {line}: {err}"
    if not skip_bad:
        raise TraceError(f"{name}: {message} (use --skip-bad to skip malformed rows)")
    skipped.append(message)


def _finish(records: list[TraceRecord], skipped: list[str]) -> Trace:
    records.sort(key=lambda r: r.submit)  # stable: equal submit times keep file order
    return Trace(tuple(records), tuple(skipped))


# -- sacct ---------------------------------------------------------------------------------


def load_sacct(text: str, *, name: str = "<sacct>", skip_bad: bool = False) -> Trace:
    """Turn ``sacct --parsable2`` output (with its header) into a trace.

    Job steps (``123.batch``, ``123.0``) are skipped; so are jobs that never
    started or are still running and jobs without GPUs (not ours). Submit
    times become seconds after the earliest submit in the dump.
    """
    lines = text.splitlines()
    header = lines[0].split("|") if lines else []
    id_field = "JobIDRaw" if "JobIDRaw" in header else "JobID"
    need = (id_field, *SACCT_FIELDS[1:])
    missing = [f for f in need if f not in header]
    if missing:
        raise TraceError(f"{name}: line 1: missing sacct field(s) {', '.join(missing)}")
    col = {f: header.index(f) for f in need}
    rows: list[tuple[str, datetime, float, int, int]] = []
    skipped: list[str] = []
    for line, raw in enumerate(lines[1:], start=2):
        if not raw.strip():
            continue
        fields = raw.split("|")
        try:
            if len(fields) < len(header):
                raise ValueError(f"expected {len(header)} fields, got {len(fields)}")
            job_id = fields[col[id_field]].strip()
            if "." in job_id:
                continue  # a step of a job: the allocation line already covers it
            gpus = gres.tres_gpus(fields[col["AllocTRES"]])
            start, end = fields[col["Start"]], fields[col["End"]]
            if gpus == 0 or start in _NOT_A_TIME or end in _NOT_A_TIME:
                continue
            submit = _timestamp(fields[col["Submit"]], "Submit")
            duration = (_timestamp(end, "End") - _timestamp(start, "Start")).total_seconds()
            if duration < 0:
                raise ValueError(f"End {end} is before Start {start}")
            rows.append((job_id, submit, duration, _job_gpus(gpus, "AllocTRES gres/gpu"),
                         _count(fields[col["NNodes"]], "NNodes")))
        except ValueError as err:
            _bad(name, line, err, skip_bad, skipped)
    origin = min((r[1] for r in rows), default=None)
    records = [
        TraceRecord(job_id, (submit - origin).total_seconds(), duration, gpus, nodes, _per_node(gpus, nodes))
        for job_id, submit, duration, gpus, nodes in rows
    ]
    return _finish(records, skipped)


_NOT_A_TIME = {"Unknown", "None", ""}


def _timestamp(value: str, field: str) -> datetime:
    try:
        stamp = datetime.fromisoformat(value.strip())
        # sacct prints local times; one with a UTC offset is made local too, so that the two can be subtracted
        return stamp.astimezone().replace(tzinfo=None) if stamp.tzinfo else stamp
    except (ValueError, OverflowError):
        raise ValueError(f"{field} {value!r} is not a date-time") from None


def _per_node(gpus: int, nodes: int) -> int | None:
    return gpus // nodes if gpus % nodes == 0 else None


# -- selection and mapping -------------------------------------------------------------------


def parse_window(text: str) -> tuple[float, float]:
    """``"START:END"`` in trace seconds, each with an optional unit (s, m, h, d, w: timeparse.py); either may be
    empty.

    ``"2d:9d"`` is the week from day 2; ``":12h"`` the first half day; ``"30d:"`` everything after day 30.
    """
    start, sep, end = text.partition(":")
    if not sep:
        raise ValueError(f"bad window {text!r}: expected START:END, e.g. 2d:9d or 0:86400")
    bounds = (_seconds(start, 0.0, text), _seconds(end, float("inf"), text))
    if bounds[0] >= bounds[1]:
        raise ValueError(f"bad window {text!r}: START must be before END")
    return bounds


def _seconds(part: str, default: float, text: str) -> float:
    part = part.strip()
    if not part:
        return default
    if part.startswith("-"):
        raise ValueError(f"bad window {text!r}: times are seconds from the trace start, not negative")
    value = parse_duration(part)
    if value is None:
        raise ValueError(f"bad window {text!r}: {part!r} is not a time like 90, 30m, 12h or 2d")
    return value


def select(records: Sequence[TraceRecord], window: tuple[float, float] | None, limit: int | None) -> list[TraceRecord]:
    """Jobs submitted in ``[start, end)`` (trace seconds), then at most the first ``limit`` of them."""
    chosen: Iterable[TraceRecord] = records
    if window is not None:
        start, end = window
        chosen = (r for r in chosen if start <= r.submit < end)
    out = list(chosen)
    return out[:limit] if limit is not None else out


def instance_shape(record: TraceRecord, node_gpus: int) -> Shape:
    """The gang a record runs as on nodes of ``node_gpus`` GPUs: the daemon's rule (engine/shape.py).

    A trace says where a job ran, not what it asked for. Its node count shapes the gang
    only where the GPUs are not whole nodes' worth (more than a node, not a multiple of
    one), and even then is no demand for distinct nodes: 12 GPUs recorded on 12 nodes run
    as 12 x 1 wherever they fit. Otherwise the rule is the daemon's: 12 GPUs with no usable
    recorded shape run as 2 x 6 on distinct nodes, 16 as 2 x 8, 4 as 1 x 4.
    """
    n = record.gpus
    shape = shape_of(n, node_gpus, record.nodes if n > node_gpus and n % node_gpus else None)
    return replace(shape, distinct_nodes=False) if shape.rule == PER_NODE else shape


def to_jobs(
    records: Iterable[TraceRecord],
    node_gpus: int,
    *,
    migratable: float | None = None,
    managed: float = 1.0,
    seed: int = 0,
) -> tuple[list[SimJob], Counter[str]]:
    """Engine jobs for ``records`` and how many used each mapping rule.

    ``migratable``: the share of jobs that may be migrated, drawn per job with ``seed``;
    None keeps the trace's ``migratable`` column (jobs without one are migratable).
    ``managed``: the share submitted through the wrapper, drawn the same way; the
    draws are independent of each other and of the policy, so every policy of a
    run sees the same jobs.
    """
    import random

    rules: Counter[str] = Counter()
    jobs = []
    seen: set[str] = set()
    draw_migratable = random.Random(f"migratable:{seed}")
    draw_managed = random.Random(f"managed:{seed}")
    for r in records:
        if r.id in seen:
            raise TraceError(f"job id {r.id} appears twice in the trace")
        seen.add(r.id)
        shape = instance_shape(r, node_gpus)
        rules[shape.rule] += 1
        moves = draw_migratable.random() < migratable if migratable is not None else r.migratable is not False
        wrapped = draw_managed.random() < managed
        jobs.append(SimJob(r.submit, r.duration, Job(r.id, shape.instances, shape.gpus, migratable=moves,
                                                     distinct_nodes=shape.distinct_nodes), managed=wrapped,
                           limit=r.time_limit))
    return jobs, rules
