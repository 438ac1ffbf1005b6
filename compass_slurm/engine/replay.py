"""Replay an arrival/departure event stream through a policy: events in, cluster states out.

Input lines (JSON Lines)::

    {"t": 0.0, "event": "arrive", "job": "j1", "instances": 2, "gpus": 4,
     "migratable": true, "distinct_nodes": false}
    {"t": 9.5, "event": "depart", "job": "j1"}

For every input event, ``states`` yields one JSON-ready dict describing the
cluster after that event and everything it triggered, so that anyone can
re-check the placements from outside.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from .fragmentation import measure
from .model import EngineError, Job, Node
from .policies.base import make_policy
from .scheduler import Scheduler, Step


#: event lines: text, or bytes as a file opened in binary gives them
Lines = Iterable[str] | Iterable[bytes]


class EventError(EngineError):
    """An event line that cannot be replayed; names the line."""

    def __init__(self, line: int, problem: str) -> None:
        super().__init__(f"line {line}: {problem}")
        self.line = line


@dataclass(frozen=True, slots=True)
class Event:
    line: int
    t: float
    kind: str  # arrive | depart
    job: Job | None = None
    job_id: str = ""


def _int_field(doc: dict, name: str, line: int, default: int | None = None) -> int:
    value = doc.get(name, default)
    if value is None:
        raise EventError(line, f"missing field {name!r}")
    if isinstance(value, bool) or not isinstance(value, int):
        raise EventError(line, f"{name!r} must be an integer, got {value!r}")
    return value


def _bool_field(doc: dict, name: str, line: int, default: bool) -> bool:
    value = doc.get(name, default)
    if not isinstance(value, bool):
        raise EventError(line, f"{name!r} must be true or false, got {value!r}")
    return value


def parse_events(lines: Lines, max_gpus: int) -> Iterator[Event]:
    """Parse and check event lines (bytes: a file read as such, UTF-8 line by line, so that a bad byte names its
    line); blank lines are skipped, anything else wrong raises EventError."""
    for number, raw in enumerate(lines, start=1):
        if isinstance(raw, bytes):
            try:
                raw = raw.decode()
            except UnicodeDecodeError as err:
                raise EventError(number, f"not UTF-8 text (byte {err.start + 1} of the line)") from None
        if not raw.strip():
            continue
        raw = raw.rstrip("\r\n")  # so that a column points into the line
        if "\r" in raw:  # a file of bare carriage returns reads as one line
            raise EventError(number, "a carriage return inside the line: end each event's line with \\n (or \\r\\n)")
        try:
            doc = json.loads(raw)
        except json.JSONDecodeError as err:
            raise EventError(number, f"malformed JSON ({err.msg} at column {err.colno})") from None
        except (ValueError, RecursionError) as err:  # a number too long for int(), nesting too deep
            raise EventError(number, f"unreadable JSON ({err})") from None
        if not isinstance(doc, dict):
            raise EventError(number, "an event must be a JSON object")
        missing = [name for name in ("t", "event", "job") if name not in doc]
        if missing:
            raise EventError(number, f"missing field{'s' if len(missing) > 1 else ''} {', '.join(map(repr, missing))}")
        t = doc.get("t")
        if isinstance(t, bool) or not isinstance(t, (int, float)) or not abs(t) < 1e300:  # NaN, inf, 10**400
            raise EventError(number, f"'t' must be a number, got {t!r}")
        job_id = doc.get("job")
        if not isinstance(job_id, str) or not job_id:
            raise EventError(number, f"'job' must be a non-empty string, got {job_id!r}")
        kind = doc.get("event")
        if kind == "depart":
            yield Event(number, float(t), "depart", job_id=job_id)
        elif kind == "arrive":
            gpus = _int_field(doc, "gpus", number)
            if not 1 <= gpus <= max_gpus:
                raise EventError(number, f"gpus must be between 1 and {max_gpus} (GPUs per node), got {gpus}")
            instances = _int_field(doc, "instances", number, 1)
            if instances < 1:
                raise EventError(number, f"instances must be at least 1, got {instances}")
            job = Job(
                job_id,
                instances,
                gpus,
                migratable=_bool_field(doc, "migratable", number, True),
                distinct_nodes=_bool_field(doc, "distinct_nodes", number, False),
            )
            yield Event(number, float(t), "arrive", job=job, job_id=job_id)
        else:
            raise EventError(number, f"'event' must be \"arrive\" or \"depart\", got {kind!r}")


class Replay:
    """A Scheduler over one event stream: checks what the parser cannot (duplicates, unknown departures)."""

    def __init__(self, nodes: list[Node], policy: str) -> None:
        self.nodes = nodes
        self.scheduler = Scheduler(make_policy(policy, nodes))
        self.seen: set[str] = set()

    def steps(self, lines: Lines) -> Iterator[tuple[Event, Step]]:
        """Each input event and what it caused, in input order."""
        scheduler, seen, count = self.scheduler, self.seen, len(self.nodes)
        for event in parse_events(lines, max(n.gpus for n in self.nodes)):
            if event.kind == "arrive":
                job = event.job
                assert job is not None
                if event.job_id in seen:
                    raise EventError(event.line, f"duplicate job id {event.job_id}")
                if job.distinct_nodes and job.instances > count:
                    raise EventError(event.line, f"job {event.job_id} wants {job.instances} distinct nodes of {count}")
                seen.add(event.job_id)
                yield event, scheduler.arrive(job)
            else:
                if not scheduler.knows(event.job_id):
                    raise EventError(event.line, f"departure of unknown job {event.job_id}")
                yield event, scheduler.depart(event.job_id)


def states(lines: Lines, nodes: list[Node], policy: str) -> Iterator[dict]:
    """Drive a Scheduler over the events; one state per input event."""
    replay = Replay(nodes, policy)
    scheduler = replay.scheduler
    p = scheduler.policy
    for index, (event, step) in enumerate(replay.steps(lines)):
        frag = measure(p.cluster)
        yield {
            "i": index,
            "t": event.t,
            "nodes": {
                v.name: [[pl.job, pl.instance, pl.gpus] for pl in v.instances] for v in p.view() if v.instances
            },
            "pending": list(scheduler.queue),
            "migrations": [[m.job, m.instance, m.src, m.dst] for m in step.migrations],
            "partial": frag.partial,
            "phi_star": frag.phi_star,
            "sif": frag.sif,
        }


def summary(lines: Lines, nodes: list[Node], policy: str) -> dict[str, int | float]:
    """Totals over the whole stream, at O(1) cost per event beyond the engine's own work.

    No node map is built. SIF = (partial - Phi*) / N is at most partial / N, so Phi*
    is computed only on events where that bound exceeds the largest SIF so far.
    """
    replay = Replay(nodes, policy)
    cluster = replay.scheduler.policy.cluster
    n = len(cluster)
    events = migrations = max_partial = 0
    max_sif = 0.0
    for _, step in replay.steps(lines):
        events += 1
        migrations += len(step.migrations)
        partial = len(cluster.partial)
        if partial > max_partial:
            max_partial = partial
        if partial / n > max_sif:
            max_sif = max(max_sif, measure(cluster).sif)
    return {"events": events, "migrations": migrations, "max_partial": max_partial, "max_sif": max_sif,
            "pending_at_end": len(replay.scheduler.queue)}
