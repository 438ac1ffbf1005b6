"""The decision log's local spool: what the store could not take, kept until it can.

Slurm is the truth about jobs, so a database down or restarting never stops placement:
the records a cycle could not write (decisions written ahead, the rest of the cycle,
rewrites of decisions Slurm refused) are appended here, one JSON line per write, fsync'd,
and written to the store in order when it is back (:meth:`Spool.flush`).

Each line belongs to a batch: one daemon cycle of one daemon process (``key``). A batch
goes to the store in one transaction together with an error record of kind ``spool``
naming its key, so a flush cut short half-way (the store failed again, the daemon was
killed) writes no batch twice: the next flush skips the keys the store already has.
The file is truncated only once every batch is in the store.

Spooled decisions carry ids below zero (``-1 - pos``, their place among the batch's
decisions), so a rewrite of one Slurm refused can name it before it has a real id.

A line::

    {"key": "<daemon>:<cycle>", "at": <epoch s>, "resume": <log cycle id or null>,
     "records": [{"kind": "decision", "record": {...}}, {"kind": "rewrite", "record": {...}}, ...]}
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import time
from dataclasses import dataclass, fields, replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from sqlalchemy.engine import make_url
from sqlalchemy.exc import SQLAlchemyError

from .store import (DecisionRecord, ErrorRecord, MigrationRecord, SampleRecord, Store, _Record,
                    default_db_url, resolve_db_url)

#: the kinds of records a line holds; "rewrite": a decision Slurm refused, replacing the one of its id
KINDS: dict[str, type[_Record]] = {"decision": DecisionRecord, "migration": MigrationRecord,
                                   "error": ErrorRecord, "sample": SampleRecord, "rewrite": DecisionRecord}
MODE = 0o640
#: the error kind of the record that says a batch came from the spool (and names its key)
MARKER_KIND = "spool"
_MARKER_KEY = re.compile(r"\(spool batch (\S+)\)$")
#: how far before the oldest spooled line the flush looks for batches written already (a clock stepped back)
_MARKER_SLACK = timedelta(hours=1)


def spool_path(setting: str, db: str) -> Path:
    """The spool of the log at URL ``db``: ``setting`` if given; else beside a SQLite log's file, and for a
    server in the state directory (where store.default_db_url keeps the SQLite log), one file per server and
    database, so that no spool is ever written to a log it was not meant for."""
    if setting:
        return Path(setting)
    url = make_url(db)
    if url.get_backend_name() == "sqlite" and url.database and url.database != ":memory:":
        return Path(url.database + ".spool")
    digest = hashlib.sha256(url.render_as_string(hide_password=True).encode()).hexdigest()[:12]
    return Path(default_db_url().removeprefix("sqlite:///")).with_name(f"spool-{digest}.jsonl")


def as_doc(record: _Record) -> dict[str, Any]:
    """A record as JSON values (``from_doc`` reads it back)."""
    out = {}
    for f in fields(record):  # type: ignore[arg-type]
        value = getattr(record, f.name)
        out[f.name] = value.isoformat() if isinstance(value, datetime) else value
    return out


def _stamped(record: _Record, at: float) -> _Record:
    """A record's time is when it happened, not when the store took it."""
    if record.time is not None:  # type: ignore[attr-defined]
        return record
    return replace(record, time=datetime.fromtimestamp(at, UTC))  # type: ignore[type-var]


def from_doc(kind: str, doc: dict[str, Any]) -> _Record:
    """The record of ``kind`` (see KINDS) that ``as_doc`` made ``doc`` of."""
    cls = KINDS[kind]
    values = {}
    for f in fields(cls):  # type: ignore[arg-type]
        if f.name not in doc:
            continue
        value = doc[f.name]
        if f.name == "time" and value is not None:
            value = datetime.fromisoformat(value)
        elif isinstance(value, list) and str(f.type).startswith("tuple"):
            value = tuple(value)
        values[f.name] = value
    return cls(**values)


@dataclass(frozen=True, slots=True)
class Entry:
    """One spooled record: its kind (see KINDS) and the record."""

    kind: str
    record: _Record


@dataclass(frozen=True, slots=True)
class Line:
    key: str
    at: float
    resume: int | None
    entries: tuple[Entry, ...]


@dataclass(frozen=True, slots=True)
class Backlog:
    """How far the log is behind: records spooled, the oldest line's time (epoch s), the file's size."""

    records: int
    oldest: float | None
    size: int


class Spool:
    """The spool file at ``path``; full at ``max_bytes`` (an append that starts below it is taken whole)."""

    def __init__(self, path: str | os.PathLike[str], max_bytes: int) -> None:
        self.path = Path(path)
        self.max_bytes = max_bytes
        try:
            self.backlog = read_backlog(self.path)
        except OSError:  # unreadable: the first flush says why; until then it counts as not empty
            self.backlog = Backlog(0, None, 1)

    @property
    def records(self) -> int:
        return self.backlog.records

    @property
    def full(self) -> bool:
        return self.backlog.size >= self.max_bytes

    def append(self, key: str, resume: int | None, entries: list[Entry], now: float | None = None) -> None:
        """Append one line and fsync it (raises OSError when the file cannot take it)."""
        at = time.time() if now is None else now
        doc = {"key": key, "at": at, "resume": resume,
               "records": [{"kind": e.kind, "record": as_doc(_stamped(e.record, at))} for e in entries]}
        data = (json.dumps(doc, separators=(",", ":"), default=list) + "\n").encode()
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, MODE)
        try:
            os.write(fd, data)
            os.fsync(fd)
        finally:
            os.close(fd)
        b = self.backlog
        self.backlog = Backlog(b.records + len(entries), b.oldest if b.oldest is not None else at, b.size + len(data))

    def lines(self) -> list[Line]:
        return read_lines(self.path)

    def flush(self, store: Store) -> int:
        """Write every batch the store does not have yet, in order, then empty the file; returns the records
        written (raises StoreError when the store fails: the batches written so far stay written, once)."""
        lines = self.lines()
        if not lines:
            self._truncate()
            return 0
        since = datetime.fromtimestamp(min(line.at for line in lines), UTC) - _MARKER_SLACK
        done = {m.group(1) for e in store.errors(since=since) if e.kind == MARKER_KIND
                and (m := _MARKER_KEY.search(e.message))}
        written = 0
        for key, batch in _batches(lines):
            if key not in done:
                written += _write_batch(store, key, batch)
        self._truncate()
        return written

    def _truncate(self) -> None:
        if self.path.exists():
            fd = os.open(self.path, os.O_WRONLY | os.O_TRUNC)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        self.backlog = Backlog(0, None, 0)


def for_log(db: str | None, setting: str, max_mb: float) -> Spool | None:
    """The spool of the daemon's log ``db`` (None: no log, or a URL the store will refuse with the reason)."""
    if db is None:
        return None
    try:
        path = spool_path(setting, resolve_db_url(db))
    except (ValueError, SQLAlchemyError):
        return None
    return Spool(path, int(max_mb * 2**20))


def read_lines(path: Path) -> list[Line]:
    """The spool's lines, oldest first; none when there is no file. A torn last line (a crash mid-write: it was
    never fsync'd, so no cycle went on after it) is left out."""
    try:
        text = path.read_text()
    except FileNotFoundError:
        return []
    out = []
    for raw in text.splitlines():
        try:
            doc = json.loads(raw)
        except json.JSONDecodeError:
            continue
        out.append(Line(doc["key"], float(doc["at"]), doc.get("resume"),
                        tuple(Entry(r["kind"], from_doc(r["kind"], r["record"])) for r in doc["records"])))
    return out


def read_backlog(path: Path) -> Backlog:
    """What ``compass doctor`` and the metrics say of the spool (raises OSError when it cannot be read)."""
    lines = read_lines(path)
    size = path.stat().st_size if lines or path.exists() else 0
    return Backlog(sum(len(line.entries) for line in lines), lines[0].at if lines else None, size)


def _batches(lines: list[Line]) -> list[tuple[str, list[Line]]]:
    out: list[tuple[str, list[Line]]] = []
    for line in lines:
        if out and out[-1][0] == line.key:
            out[-1][1].append(line)
        else:
            out.append((line.key, [line]))
    return out


def _write_batch(store: Store, key: str, batch: list[Line]) -> int:
    """One batch in one transaction, with the marker that says it is written. Spooled decisions are written in
    their final form: a spooled rewrite replaces the decision it names before either reaches the store."""
    entries = [e for line in batch for e in line.entries]
    final: dict[int, DecisionRecord] = {}
    for e in entries:
        rec = e.record
        if e.kind == "rewrite" and rec.id is not None and rec.id < 0:  # type: ignore[attr-defined]
            final[rec.id] = rec  # type: ignore[attr-defined,assignment]
    cycle = _cycle_of(key)
    with store.cycle(resume=batch[0].resume):
        for e in entries:
            rec = e.record
            if e.kind == "decision":
                if rec.id in final:  # type: ignore[attr-defined]
                    rec = replace(final[rec.id], time=rec.time)  # type: ignore[attr-defined]  # when it was decided
                store.record_decision(replace(rec, id=None, cycle=None))  # type: ignore[type-var]
            elif e.kind == "rewrite":
                if rec.id is not None and rec.id >= 0:  # type: ignore[attr-defined]
                    store.rewrite_decision(rec)  # type: ignore[arg-type]
            elif e.kind == "migration":
                store.record_migration(replace(rec, cycle=None))  # type: ignore[type-var]
            elif e.kind == "error":
                store.record_error(replace(rec, cycle=None))  # type: ignore[type-var]
            else:
                store.record_sample(replace(rec, cycle=None))  # type: ignore[type-var]
        store.record_error(ErrorRecord(kind=MARKER_KIND, message=f"{len(entries)} records of daemon cycle {cycle} "
                                       f"written late, from the spool (spool batch {key})"))
    return len(entries)


def _cycle_of(key: str) -> str:
    return key.rpartition(":")[2]
