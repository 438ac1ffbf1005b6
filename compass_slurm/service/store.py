"""The decision log: the only module that writes SQL.

What the daemon did and saw, in four tables: ``decisions`` (where each job went and
why, including every move Compact made, so a job's latest decision names where it
runs), ``migrations`` (each instance requeued onto another node), ``samples`` (one
cluster sample per daemon cycle) and ``errors`` (failures worth keeping, e.g. Slurm
output that made a cycle skip). Rows written in one daemon cycle share a ``cycle`` id
(table ``cycles``).

SQLite is the default; MariaDB/MySQL (``mysql+pymysql://``) and PostgreSQL
(``postgresql+psycopg://``) are tested too (tests/service, against scripts/dev-db). The URL
comes from the caller, else ``COMPASS_DB``, else :func:`default_db_url`. SQLite runs in WAL
mode so the CLI reads while the daemon writes. Times are timezone-aware UTC datetimes in
Python, stored as float seconds since the epoch (sortable and identical on every backend).

Every write is one transaction: it lands completely or raises :class:`StoreError` and
leaves nothing behind. A :class:`Store` is meant for one thread (the daemon's loop).
"""

from __future__ import annotations

import json
import logging
import os
import re
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, fields
from datetime import UTC, datetime
from functools import cache, partial
from pathlib import Path
from typing import Any, ClassVar, TypeVar

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    Column,
    Connection,
    Double,
    Engine,
    ForeignKey,
    Index,
    Integer,
    MetaData,
    String,
    Table,
    Text,
    and_,
    case,
    create_engine,
    delete,
    event,
    func,
    insert,
    inspect,
    literal_column,
    select,
    text,
    update,
)
from sqlalchemy.dialects import mysql
from sqlalchemy.engine import URL, make_url
from sqlalchemy.exc import IntegrityError, SQLAlchemyError
from sqlalchemy.pool import StaticPool
from sqlalchemy.types import TypeDecorator

from ..engine.model import Decision, Job, Migration
from ..paths import STATE

#: The schema this code writes. Bump it and add a MIGRATIONS entry when a table changes.
SCHEMA_VERSION = 4


def _add_from_nodes(conn: Connection) -> None:
    """v1 -> v2: decisions.from_nodes, the nodes a migrated job left (NULL, read as none, on older rows)."""
    kind = decisions_table.c.from_nodes.type.compile(dialect=conn.dialect)  # TEXT; MEDIUMTEXT on MySQL
    conn.execute(text(f"ALTER TABLE decisions ADD COLUMN from_nodes {kind}"))


def _add_leader(conn: Connection) -> None:
    """v2 -> v3: the leader table (service/leader.py), so that a daemon too old to take part in the election
    refuses the log instead of changing jobs beside the leader; and samples.actions, the cycle's decisions by
    action (NULL on older rows: `compass report` counts those cycles' decisions one by one)."""
    leader_table.create(conn, checkfirst=True)  # MySQL commits DDL at once: an upgrade cut short left it there
    if "actions" not in {c["name"] for c in inspect(conn).get_columns("samples")}:
        conn.execute(text(f"ALTER TABLE samples ADD COLUMN actions {JSON().compile(dialect=conn.dialect)}"))


def _widen_texts(conn: Connection) -> None:
    """v3 -> v4: the columns of Slurm's and the engine's texts that were too narrow (WIDENED), as wide as the tables
    declare them now; MariaDB and PostgreSQL refused a longer text, so the log cut it. SQLite keeps a text of any
    length whatever the column's declared width: nothing to change there. Changing a column again to the type it
    has changes nothing (MySQL commits DDL at once: an upgrade cut short may have widened some already)."""
    dialect = conn.dialect
    if dialect.name == "sqlite":
        return
    quote = dialect.identifier_preparer.quote
    for table in dict.fromkeys(column.table for column in WIDENED):
        changes = []
        for column in (c for c in WIDENED if c.table is table):
            kind = column.type.compile(dialect=dialect)
            changes.append(f"ALTER COLUMN {quote(column.name)} TYPE {kind}" if dialect.name == "postgresql" else
                           f"MODIFY {quote(column.name)} {kind}{'' if column.nullable else ' NOT NULL'}")
        conn.execute(text(f"ALTER TABLE {table.name} {', '.join(changes)}"))  # one rewrite of the table at most


#: MIGRATIONS[v] upgrades a version-v database to v + 1, inside the transaction that opens it.
MIGRATIONS: dict[int, Callable[[Connection], None]] = {1: _add_from_nodes, 2: _add_leader, 3: _widen_texts}

SYSTEM_DB = STATE / "compass.db"
#: how long SQLite waits for another writer's lock before giving up.
BUSY_TIMEOUT_MS = 5000

MIGRATION_STATUSES = ("done", "failed")
#: the decision actions that pin a job where the daemon chose (Slurm hears them as the job's ReqNodeList)
PINS = ("placed", "replanned", "migrated")
#: the decision actions whose record names where the job runs: a job's latest such record must name its nodes
PLACES = (*PINS, "adopted")
#: rows per table one prune transaction deletes at most (a cycle goes whole): a few milliseconds of lock each
PRUNE_BATCH = 2000
#: ids per query of :meth:`Store.latest_places` and :meth:`Store.decisions_with_ids` (SQLite binds at most
#: 32,766 values per statement, PostgreSQL and MySQL 65,535)
_IN_BATCH = 500
#: seconds a server database may take to accept a connection before the open fails (a daemon start says so)
CONNECT_TIMEOUT_S = 10
#: connect arguments that bound that wait, by driver (SQLite needs none: it opens a file)
_CONNECT_ARGS = {"psycopg": {"connect_timeout": CONNECT_TIMEOUT_S}, "psycopg2": {"connect_timeout": CONNECT_TIMEOUT_S},
                 "pymysql": {"connect_timeout": CONNECT_TIMEOUT_S}, "mysqldb": {"connect_timeout": CONNECT_TIMEOUT_S}}


def _add_missing_indexes(conn: Connection) -> None:
    """Create the indexes the tables declare that the database lacks (a log an older compass made: the cycle,
    cycles.time and decisions (time, action) indexes came with retention). An index changes no row and older
    readers ignore it, so it needs no schema version; building them takes a while, once, when the daemon opens
    the log (11 s for the (time, action) one on 10 million decisions in SQLite: benchmarks/bench_log.py)."""
    inspector = inspect(conn)
    for table in metadata.sorted_tables:
        present = {index["name"] for index in inspector.get_indexes(table.name)}
        for index in sorted(table.indexes, key=lambda i: i.name):
            if index.name not in present:
                index.create(conn)


def _latest_places(conn: Connection, jobs: Iterable[str]) -> dict[str, Place]:
    """:meth:`Store.latest_places` on ``conn``."""
    table, ids = decisions_table, list(dict.fromkeys(jobs))
    out: dict[str, Place] = {}
    for batch in _batches(ids):
        latest = (select(func.max(table.c.id)).where(table.c.job_id.in_(batch), table.c.action.in_(PLACES))
                  .group_by(table.c.job_id))
        query = select(table.c.job_id, table.c.id, table.c.nodes).where(table.c.id.in_(latest))
        out.update((job, Place(i, nodes)) for job, i, nodes in conn.execute(query))
    return out


def _leader(conn: Connection) -> LeaderRow | None:
    row = conn.execute(select(*(leader_table.c[f.name] for f in fields(LeaderRow)))
                       .where(leader_table.c.id == 1)).first()
    return None if row is None else LeaderRow(**row._mapping)


def _batches(values: list[Any]) -> Iterator[list[Any]]:
    """``values`` in slices of at most _IN_BATCH, one query's bound parameters each."""
    return (values[start:start + _IN_BATCH] for start in range(0, len(values), _IN_BATCH))


class StoreError(Exception):
    """The decision log cannot be opened, read or written; ``hint`` says what to try."""

    def __init__(self, message: str, hint: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint


class BadValue(ValueError):
    """A stored value no compass writes (the log was changed by hand or by another program); the message names it.
    :meth:`Store._guard` makes it a StoreError naming the table."""


#: what to do about a BadValue: the row stays as it is, for the admin to look at
BAD_VALUE_HINT = ("the log was changed outside compass: correct that value with the database's own shell, restore "
                  "the log from a backup, or point --db / COMPASS_DB at another log")


class DatabaseMissing(StoreError):
    """A read found no database: nothing has been logged there yet."""


class SchemaTooNew(StoreError):
    """The database was written by a newer compass; this one must not touch it."""


def default_db_url() -> str:
    """Where the log lives when neither an argument nor ``COMPASS_DB`` says.

    ``/var/lib/compass/compass.db`` for root, when that directory is writable, or when the
    file exists (so users read the log a root daemon writes); otherwise
    ``$XDG_STATE_HOME/compass/compass.db`` (``~/.local/state/compass/compass.db``).
    """
    if _visible(SYSTEM_DB) is not False or os.geteuid() == 0 or os.access(SYSTEM_DB.parent, os.W_OK):
        path = SYSTEM_DB  # also when its 0750 directory hides it: then the error names the system log
    else:
        path = Path(os.environ.get("XDG_STATE_HOME") or Path.home() / ".local" / "state") / "compass" / "compass.db"
    return f"sqlite:///{path}"


def resolve_db_url(url: str | None = None) -> str:
    """The URL to use: ``url`` if given, else ``COMPASS_DB``, else :func:`default_db_url`."""
    return url or os.environ.get("COMPASS_DB") or default_db_url()


# -- column types ---------------------------------------------------------------------------

#: text of any length: MySQL's TEXT stops at 64 KiB (a strict server refuses more), MEDIUMTEXT at 16 MiB
LongText = Text().with_variant(mysql.MEDIUMTEXT(), "mysql", "mariadb")
#: row ids: 64-bit on servers that log for years; SQLite's INTEGER PRIMARY KEY is 64-bit already and the only
#: type it numbers by itself
RowId = BigInteger().with_variant(Integer(), "sqlite")


class UtcTime(TypeDecorator):
    """An aware datetime as float epoch seconds: sorts and compares the same on every backend."""

    impl = Double
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Any) -> float | None:
        return None if value is None else value.timestamp()

    def process_result_value(self, value: float | None, dialect: Any) -> datetime | None:
        if value is None:
            return None
        try:
            return datetime.fromtimestamp(value, UTC)
        except (TypeError, ValueError, OverflowError, OSError):
            raise BadValue(f"time {value!r} is not a time (seconds since 1970)") from None


class NotJson(str):
    """A JSON column's stored text that is no JSON, kept as read so that the check of its row names the column."""


def _read_json(text: str) -> Any:
    """The engines' JSON reader: a value no compass wrote comes back as NotJson instead of stopping the read."""
    try:
        return json.loads(text)
    except (ValueError, RecursionError):
        return NotJson(text)


class NodeList(TypeDecorator):
    """Node names in instance order as a comma list, readable in a plain SQL shell."""

    impl = LongText
    cache_ok = True

    def process_bind_param(self, value: tuple[str, ...] | None, dialect: Any) -> str | None:
        return None if value is None else ",".join(value)

    def process_result_value(self, value: str | None, dialect: Any) -> tuple[str, ...]:
        if value is not None and not isinstance(value, str):
            raise BadValue(f"node list {value!r} is not text")
        return tuple(value.split(",")) if value else ()


class JsonTuple(TypeDecorator):
    """A JSON list that comes back as a tuple, so records stay immutable (anything else as read: see _wrong)."""

    impl = JSON
    cache_ok = True

    def process_result_value(self, value: Any, dialect: Any) -> Any:
        return () if value is None else tuple(value) if isinstance(value, list) else value


# -- tables ---------------------------------------------------------------------------------

metadata = MetaData()

schema_version_table = Table(
    "schema_version",
    metadata,
    Column("id", Integer, primary_key=True),  # always 1: a single row
    Column("version", Integer, nullable=False),
)

cycles_table = Table(
    "cycles",
    metadata,
    Column("id", RowId, primary_key=True, autoincrement=True),
    Column("time", UtcTime, nullable=False, index=True),  # pruning finds the last cycle older than the cut
)


def _log_table(name: str, *columns: Column) -> Table:
    """A log table: every row has an id, a time and the daemon cycle that wrote it."""
    return Table(
        name,
        metadata,
        Column("id", RowId, primary_key=True, autoincrement=True),
        Column("time", UtcTime, nullable=False, index=True),
        Column("cycle", RowId, ForeignKey("cycles.id"), index=True),  # explain reads a cycle; pruning deletes by cycles
        *columns,
    )


def _fitted(table: Table, values: dict[str, Any]) -> dict[str, Any]:
    """``values`` with each text cut to its column's width, its last character an ellipsis: MariaDB and PostgreSQL
    refuse a longer one, and a record refused would hold back the spool behind it for good. Since schema v4 no text
    the daemon writes comes near its column's width (Slurm's job ids, up to about 80 characters for an array's
    record ``A_[..]``, and user and node names, in columns of 255; the other bounded columns hold the code's own
    words): the cut only keeps an absurd one from wedging the log."""
    for name, width in _widths(table):
        value = values.get(name)
        if isinstance(value, str) and len(value) > width:
            values[name] = value[:width - 1] + "\u2026"
    return values


def _whole(table: Table, values: dict[str, Any]) -> dict[str, Any]:
    return values


@cache
def _widths(table: Table) -> tuple[tuple[str, int], ...]:
    """The table's text columns of a bounded width, with their widths."""
    return tuple((c.name, c.type.length) for c in table.columns if getattr(c.type, "length", None))


decisions_table = _log_table(
    "decisions",
    Column("job_id", String(255), nullable=False, index=True),  # schema v4: 255 (was 64), as migrations.job_id
    Column("user", String(255)),  # schema v4: 255 (was 64): a directory's names may be qualified, "name@domain"
    Column("request", String(32), nullable=False),
    Column("request_raw", JSON, nullable=False),
    Column("nodes", NodeList, nullable=False),
    Column("gpus_per_node", JSON, nullable=False),
    Column("policy", String(64), nullable=False),
    Column("rule", LongText, nullable=False),  # schema v4: any length (was 64): a multi-instance job's rules joined
    Column("candidates", JsonTuple, nullable=False),
    Column("sif_before", Double),
    Column("sif_after", Double),
    Column("partial_before", Integer),
    Column("partial_after", Integer),
    Column("reason", LongText, nullable=False),
    Column("action", String(32), nullable=False),
    Column("from_nodes", NodeList),  # schema v2: the nodes a migrated job left, in instance order
)

#: `compass report` counts a period's decisions by action from this index alone (a day at 16,384 nodes: millions)
Index("ix_decisions_time_action", decisions_table.c.time, decisions_table.c.action)

migrations_table = _log_table(
    "migrations",
    Column("job_id", String(255), nullable=False, index=True),
    Column("instance", Integer, nullable=False),
    Column("src", String(255), nullable=False),
    Column("dst", String(255), nullable=False),
    Column("reason", LongText, nullable=False),
    Column("status", String(16), nullable=False),
)

samples_table = _log_table(
    "samples",
    Column("nodes", Integer, nullable=False),
    Column("gpus", Integer, nullable=False),
    Column("gpus_used", Integer, nullable=False),
    Column("partial", Integer, nullable=False),
    Column("phi_star", Integer, nullable=False),
    Column("sif", Double, nullable=False),
    Column("sif_bound", Double, nullable=False),
    Column("wcc", Boolean, nullable=False),
    Column("queue_len", Integer, nullable=False),
    Column("pending_gpus", Integer, nullable=False),
    Column("orphans", Integer, nullable=False),
    Column("abs_violations", Integer, nullable=False),
    Column("errors", Integer, nullable=False),
    Column("duration", Double, nullable=False),
    Column("actions", JSON(none_as_null=True)),  # schema v3: the cycle's decisions by action, so a report need not count millions
)

#: the columns schema v4 widened (_widen_texts)
WIDENED = (decisions_table.c.job_id, decisions_table.c.user, decisions_table.c.rule, migrations_table.c.job_id)

errors_table = _log_table(
    "errors",
    Column("kind", String(64), nullable=False),
    Column("message", LongText, nullable=False),
)

#: one row (id 1): which daemon leads, under which fencing token; service/leader.py says how it is used
leader_table = Table(
    "leader",
    metadata,
    Column("id", Integer, primary_key=True),
    Column("holder", String(255)),  # "<host>:<pid>:<nonce>" of the daemon leading; NULL: no one (it resigned)
    Column("host", String(255)),
    Column("pid", Integer),
    Column("token", BigInteger, nullable=False),  # +1 with every new holder: the fencing token
    Column("beat", BigInteger, nullable=False),  # +1 with every renewal: a standby sees the lease is alive
    Column("since", UtcTime),
    Column("renewed", UtcTime),
    Column("lease_s", Double, nullable=False),  # the holder's lease, which every standby waits out
    Column("alone", Boolean, nullable=False),  # no standby seen at the last renewal: the lone lease applies
    Column("standby", String(255)),  # the last standby that said it was there, and when
    Column("standby_seen", UtcTime),
)


# -- records --------------------------------------------------------------------------------
# Field names equal column names: a record is written as-is and read back with cls(**row).
# ``time`` None means "now" and ``cycle`` None means "the open cycle, if any" when written;
# ``id`` is filled on read.


class _Record:
    __slots__ = ()
    table: ClassVar[Table]

    @classmethod
    def of_row(cls: type[_R], row: Mapping[str, Any]) -> _R:
        """The record of a row read, each value of its column's kind; raises BadValue naming the first that is not
        (a row changed outside compass)."""
        checks = _checks(cls.table)
        for name, value in row.items():
            problem = checks[name](value)
            if problem is not None:
                shown = repr(value) if len(repr(value)) <= 60 else f"{repr(value)[:57]}..."
                raise BadValue(f"{name} {shown} {problem}")
        return cls(**row)

    def as_json(self) -> dict[str, Any]:
        """A JSON-ready dict: ISO-8601 UTC time, lists for tuples."""
        doc: dict[str, Any] = {"id": self.id, "time": self.time}  # type: ignore[attr-defined]
        for f in fields(self):  # type: ignore[arg-type]
            value = getattr(self, f.name)
            if isinstance(value, datetime):
                value = value.isoformat(timespec="milliseconds")
            elif isinstance(value, tuple):
                value = list(value)
            doc[f.name] = value  # id and time keep their leading place
        return doc


_R = TypeVar("_R", bound=_Record)

#: the JSON columns that hold counts by name
_COUNTS = frozenset({"gpus_per_node", "actions"})

#: what is wrong with a value read (None: nothing)
Check = Callable[[Any], str | None]


def _must(test: Callable[[Any], bool], problem: str) -> Check:
    return lambda value: None if test(value) else problem


def _json_object(value: Any) -> str | None:
    return None if isinstance(value, dict) else "is not a JSON object"


def _counts(value: Any) -> str | None:
    return _json_object(value) or (None if all(isinstance(v, int) and not isinstance(v, bool) for v in value.values())
                                   else "is not whole numbers by name")


#: what is wrong with a value read, by column kind (the first that the column's type is)
_KINDS: tuple[tuple[type, Check], ...] = (
    (JsonTuple, _must(lambda v: isinstance(v, tuple) and all(isinstance(x, str) for x in v), "is not a list of names")),
    (JSON, _json_object),
    (Boolean, _must(lambda v: isinstance(v, (bool, int)), "is not true or false")),
    (Integer, _must(lambda v: isinstance(v, int) and not isinstance(v, bool), "is not a whole number")),
    (Double, _must(lambda v: isinstance(v, (int, float)) and not isinstance(v, bool), "is not a number")),
    (String, _must(lambda v: isinstance(v, str), "is not text")),
)


#: columns of a whole number of at least 1: a sample is of a cluster with GPU nodes (a cycle without any is skipped)
_AT_LEAST_ONE = {(samples_table.name, "nodes"), (samples_table.name, "gpus")}
_at_least_one = _must(lambda v: isinstance(v, int) and not isinstance(v, bool) and v >= 1,
                      "is not a whole number of at least 1")


@cache
def _checks(table: Table) -> dict[str, Check]:
    """Per column of ``table``, what is wrong with a value read from it (None: nothing), worked out once per table.
    SQLite keeps any value in any column, and its JSON is text: a hand-made change reads back as whatever it wrote.
    Times and node lists: their types check them as they read."""
    out = {}
    for column in table.c:
        check = (_counts if column.name in _COUNTS else _at_least_one if (table.name, column.name) in _AT_LEAST_ONE
                 else next((c for kind, c in _KINDS if isinstance(column.type, kind)), None))
        out[column.name] = partial(_wrong, check, column.nullable or column.primary_key)
    return out


def _wrong(check: Check | None, nullable: bool, value: Any) -> str | None:
    if value is None:
        return None if nullable else "is empty"
    if isinstance(value, NotJson):
        return "is not JSON"
    return None if check is None else check(value)


@dataclass(frozen=True, slots=True)
class DecisionRecord(_Record):
    """A placement the daemon made (or would make in a dry run), with its context."""

    table: ClassVar[Table] = decisions_table

    job_id: str
    request: str  # "2x4": instances x GPUs per instance
    nodes: tuple[str, ...]  # nodes[i] hosts instance i
    gpus_per_node: dict[str, int]
    policy: str
    rule: str  # the placement rule that chose
    user: str | None = None
    request_raw: dict[str, Any] = field(default_factory=dict)
    candidates: tuple[str, ...] = ()
    sif_before: float | None = None
    sif_after: float | None = None
    partial_before: int | None = None
    partial_after: int | None = None
    reason: str = ""
    #: placed | replanned | migrated (Compact moved the job to ``nodes`` from ``from_nodes``) | adopted (Slurm
    #: started a decided job on ``nodes``, not on ``from_nodes``) | dry-run | failed
    action: str = "placed"
    from_nodes: tuple[str, ...] = ()  # JSON key "from"
    time: datetime | None = None
    cycle: int | None = None
    id: int | None = None

    def as_json(self) -> dict[str, Any]:
        doc = _Record.as_json(self)
        doc["from"] = doc.pop("from_nodes")
        return doc

    @classmethod
    def of(cls, decision: Decision, job: Job, policy: str, **context: Any) -> DecisionRecord:
        """The record of an engine decision about ``job``; ``context`` fills the other fields."""
        context.setdefault(
            "request_raw",
            {"instances": job.instances, "gpus": job.gpus, "migratable": job.migratable,
             "distinct_nodes": job.distinct_nodes},
        )
        return cls(
            job_id=decision.job,
            user=job.user,
            request=f"{job.instances}x{job.gpus}",
            nodes=decision.nodes,
            gpus_per_node=decision.gpus_per_node(),
            policy=policy,
            rule=decision.rule,
            candidates=decision.candidates,
            **context,
        )


@dataclass(frozen=True, slots=True)
class MigrationRecord(_Record):
    """One instance requeued from ``src`` to ``dst``; ``status`` says whether Slurm did it: done or failed."""

    table: ClassVar[Table] = migrations_table

    job_id: str
    instance: int
    src: str
    dst: str
    reason: str = ""
    status: str = "done"
    time: datetime | None = None
    cycle: int | None = None
    id: int | None = None

    @classmethod
    def of(cls, migration: Migration, **context: Any) -> MigrationRecord:
        return cls(job_id=migration.job, instance=migration.instance, src=migration.src, dst=migration.dst, **context)


@dataclass(frozen=True, slots=True)
class SampleRecord(_Record):
    """The cluster as one daemon cycle saw it; ``duration`` is the cycle's wall time in seconds."""

    table: ClassVar[Table] = samples_table

    nodes: int
    gpus: int
    gpus_used: int
    partial: int
    phi_star: int
    sif: float
    sif_bound: float  # 2/N
    wcc: bool
    queue_len: int  # pending GPU jobs
    pending_gpus: int
    orphans: int = 0
    abs_violations: int = 0
    errors: int = 0
    duration: float = 0.0
    #: the cycle's decisions by action as logged at its end (None: not counted, e.g. a sample of an older compass)
    actions: dict[str, int] | None = None
    time: datetime | None = None
    cycle: int | None = None
    id: int | None = None


@dataclass(frozen=True, slots=True)
class ErrorRecord(_Record):
    """A failure worth keeping: ``kind`` groups them (e.g. slurm-parse, scontrol, store)."""

    table: ClassVar[Table] = errors_table

    kind: str
    message: str
    time: datetime | None = None
    cycle: int | None = None
    id: int | None = None


@dataclass(frozen=True, slots=True)
class Place:
    """A job's latest record naming its nodes, in brief (a restart reads one per job Slurm has): its id and
    nodes; :meth:`Store.decisions_with_ids` reads the whole records where they are needed."""

    id: int
    nodes: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class LeaderRow:
    """The leader table's row: who leads (``holder`` None: no one), its fencing token and renewal count."""

    holder: str | None
    host: str | None
    pid: int | None
    token: int
    beat: int
    since: datetime | None
    renewed: datetime | None
    lease_s: float
    alone: bool
    standby: str | None
    standby_seen: datetime | None

    @property
    def version(self) -> tuple[int, int]:
        """What changes with every claim and renewal: a standby waits for it to stand still."""
        return self.token, self.beat


# -- the store ------------------------------------------------------------------------------

#: (words in the driver's message, what to tell the admin)
#: what to do about a decision log the caller may not read (docs/security.md makes its directory 0750)
PERMISSION_HINT = ("the decision log is readable only by the daemon's account and group (docs/security.md): "
                   "run the command with sudo, join that group, or point --db / COMPASS_DB at a copy")


_HINTS = (
    (("readonly", "read-only"), "the database or its directory is read-only: check permissions and mounts"),
    (("full",), "the disk is full: free space, or point COMPASS_DB / --db elsewhere"),
    (("locked",), "another process holds the database lock for too long"),
    (("not a database",), "the file is not a SQLite database: point COMPASS_DB / --db at the right file"),
    (("permission denied",), PERMISSION_HINT),
    (("unable to open",), "SQLite cannot open the file there: a file in a writable directory that exists (not a "
                          "directory, not under /proc), its directory readable by the caller (docs/security.md); or "
                          "point --db / COMPASS_DB elsewhere"),
)


def _describe(err: Exception) -> tuple[str, str]:
    """The driver's own words for a failure, and a hint that matches them."""
    cause = str(getattr(err, "orig", None) or err).splitlines()[0]
    lowered = cause.lower()
    hint = next((h for keys, h in _HINTS if any(k in lowered for k in keys)),
                "check that the database is reachable and writable")
    return cause, hint


def _sqlite_path(url: URL) -> Path | None:
    """The file behind a SQLite URL; None for other backends and in-memory databases."""
    if url.get_backend_name() != "sqlite" or url.database in (None, "", ":memory:"):
        return None
    if url.query.get("uri") == "true":  # sqlite:///file:/x.db?mode=ro&uri=true
        return None if url.query.get("mode") == "memory" else Path(url.database.removeprefix("file:"))
    return Path(url.database)


def _sqlite_pragmas(writable: bool) -> Callable[[Any, Any], None]:
    def on_connect(dbapi_connection: Any, _record: Any) -> None:
        cursor = dbapi_connection.cursor()
        cursor.execute(f"PRAGMA busy_timeout={BUSY_TIMEOUT_MS}")
        cursor.execute("PRAGMA foreign_keys=ON")
        if writable:
            # WAL lets CLI readers run while the daemon writes; NORMAL is durable enough in WAL.
            cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute("PRAGMA synchronous=NORMAL")
        cursor.close()

    return on_connect


def _visible(path: Path) -> bool | None:
    """Whether ``path`` exists; None when a directory on the way may not be searched (it may well exist)."""
    try:
        path.stat()
    except PermissionError:
        return None
    except OSError:
        return False
    return True


def _check_file(path: Path, create: bool) -> None:
    """A reader needs the file to exist (and must not create it); a writer needs its directory."""
    visible = _visible(path)
    if visible is None or (visible and not create and not os.access(path, os.R_OK)):
        raise StoreError(f"cannot open the decision log {path}: permission denied", hint=PERMISSION_HINT)
    if not create and not visible:
        raise DatabaseMissing(
            f"no decision log at {path}",
            hint="is the daemon running? see `compass doctor`; --db URL or COMPASS_DB pick another database",
        )
    if create:
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as err:
            raise StoreError(f"cannot create the directory for {path}: {err.strerror}",
                             hint="choose a writable path with --db or COMPASS_DB") from None


#: a password given in a URL's query (``?password=...``, which some drivers read)
_QUERY_PASSWORD = re.compile(r"(?i)([?&]password=)[^&]*")


def shown_url(raw: str) -> str:
    """The database URL ``raw`` as logs and messages show it: without its password, read from the text as given
    (SQLAlchemy parses ``u:p@ss@h`` as password "p", and cannot parse ``mysql+pymysql//root:pw@host`` at all): all
    between the user's ``:`` and the last ``@``, and a ``password=`` in the query."""
    head, at, host = raw.rpartition("@")
    if at:
        start = head.find("//") + 2 if "//" in head else 0  # (a password may hold '/', the scheme ':')
        user, colon, _ = head[start:].partition(":")
        raw = f"{head[:start]}{user}{colon and ':***'}@{host}"
    return _QUERY_PASSWORD.sub(r"\1***", raw)


def _engine(raw: str) -> tuple[Engine, str, Path | None]:
    """An engine for the URL ``raw``, the name messages give it (no password) and its SQLite file, if any."""
    try:
        parsed = make_url(raw)
    except (SQLAlchemyError, ValueError) as err:  # ValueError: a port that is not a number
        raise StoreError(
            f"invalid database URL {shown_url(raw)!r}: {err}",
            hint="use a SQLAlchemy URL, e.g. sqlite:////var/lib/compass/compass.db or mysql+pymysql://user@host/compass",
        ) from None
    path = _sqlite_path(parsed)
    name = str(path) if path is not None else shown_url(raw)
    try:
        if parsed.get_backend_name() == "sqlite":
            # An in-memory SQLite database lives in one connection; share it.
            shared = {"poolclass": StaticPool} if path is None else {}
            return create_engine(parsed, json_deserializer=_read_json, **shared), name, path
        # A server closes idle connections (MySQL after wait_timeout, 8 h): test each before use, renew hourly.
        return create_engine(parsed, pool_pre_ping=True, pool_recycle=3600, connect_args=_connect_args(parsed),
                             json_deserializer=_read_json), name, None
    except (SQLAlchemyError, ImportError) as err:
        raise StoreError(f"cannot use database URL {name}: {err}",
                         hint="install the database driver the URL names: scripts/install --extras mysql or "
                              "postgresql (docs/install.md), or pip install pymysql / psycopg in compass's venv"
                         ) from None


def _connect_args(url: URL) -> dict[str, Any]:
    """The driver's connect arguments for ``url``. PyMySQL tries TLS on every connection unless told not to, and
    building its context costs 30-50 ms, a CLI command's whole budget: on a local socket TLS protects nothing."""
    args = dict(_CONNECT_ARGS.get(url.get_driver_name(), {}))
    if url.get_driver_name() == "pymysql" and "unix_socket" in url.query:
        args["ssl_disabled"] = True
    return args


def probe(url: str | None = None) -> str:
    """Raise StoreError unless the URL is well formed, its driver is installed and, for a server database, the
    server accepts a connection; returns the database's name for messages.

    What the daemon checks before it starts. A SQLite file is not opened: a full disk or a read-only file is a
    log that fails while placement goes on, not a reason not to start.
    """
    engine, name, path = _engine(resolve_db_url(url))
    try:
        if engine.dialect.name != "sqlite":
            try:
                engine.connect().close()
            except SQLAlchemyError as err:
                cause, hint = _describe(err)
                raise StoreError(f"cannot connect to the decision log {name}: {cause}", hint=hint) from None
    finally:
        engine.dispose()
    return name


class Store:
    """An open decision log. Make one with :meth:`open`; :meth:`close` it when done."""

    def __init__(self, engine: Engine, name: str) -> None:
        self.engine = engine
        self.name = name  # the file, or the URL without its password: for messages
        #: how a record's texts are written: whole where the database keeps them whole whatever the column's width
        #: (SQLite), else cut to it (see _fitted)
        self._texts: Callable[[Table, dict[str, Any]], dict[str, Any]] = (
            _whole if engine.dialect.name == "sqlite" else _fitted)
        self._conn: Connection | None = None  # the open cycle's transaction
        self._cycle: int | None = None

    @classmethod
    def open(cls, url: str | None = None, *, create: bool = True) -> Store:
        """Open the log at ``url`` (see :func:`resolve_db_url`).

        ``create=True`` (the daemon) creates the file, its directory and the tables and
        upgrades an older schema. ``create=False`` (read commands) changes nothing and
        raises :class:`DatabaseMissing` when there is no database yet.
        """
        engine, name, path = _engine(resolve_db_url(url))
        if path is not None:
            _check_file(path, create)
        if engine.dialect.name == "sqlite":
            event.listen(engine, "connect", _sqlite_pragmas(writable=create))
        store = cls(engine, name)
        try:
            store._prepare(create)
        except BaseException:
            engine.dispose()
            raise
        return store

    def close(self) -> None:
        self.engine.dispose()

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- schema ---------------------------------------------------------------------------

    def _prepare(self, create: bool) -> None:
        """Check the schema version; with ``create``, make the tables or upgrade them."""
        with self._guard("open"), self.engine.begin() as conn:
            version = self._stored_version(conn)
            if version is None:
                if not create:
                    raise StoreError(f"{self.name} holds no compass decision log",
                                     hint="point --db or COMPASS_DB at the database the daemon writes")
                # another program's tables: the log must not be made among them (only ours may stand, left by a
                # creation cut short where DDL is not transactional, as on MariaDB)
                others = sorted(set(inspect(conn).get_table_names()) - set(metadata.tables))
                if others:
                    raise StoreError(f"{self.name} holds other tables ({', '.join(others[:5])}"
                                     f"{', ...' if len(others) > 5 else ''}) and no compass decision log",
                                     hint="give the daemon a database of its own: a new SQLite file, or an empty "
                                          "MariaDB or PostgreSQL database")
                metadata.create_all(conn)
                conn.execute(insert(schema_version_table).values(id=1, version=SCHEMA_VERSION))
            elif version > SCHEMA_VERSION:
                raise SchemaTooNew(
                    f"{self.name} has schema version {version}, newer than this compass understands ({SCHEMA_VERSION})",
                    hint="upgrade compass_slurm to the version the daemon runs",
                )
            elif version < SCHEMA_VERSION:
                if not create:
                    raise StoreError(f"{self.name} has the old schema version {version} (this compass: {SCHEMA_VERSION})",
                                     hint="restart the daemon: it upgrades the schema when it opens the log")
                self._migrate(conn, version)
            if create:
                _add_missing_indexes(conn)

    @staticmethod
    def _stored_version(conn: Connection) -> int | None:
        if not inspect(conn).has_table(schema_version_table.name):
            return None
        version = conn.scalar(select(schema_version_table.c.version))
        if version is not None and (isinstance(version, bool) or not isinstance(version, int)):
            raise BadValue(f"table schema_version: version {version!r} is not a whole number")
        return version

    def _migrate(self, conn: Connection, version: int) -> None:
        for step in range(version, SCHEMA_VERSION):
            if step not in MIGRATIONS:
                raise StoreError(f"{self.name}: no migration from schema version {step} to {step + 1}",
                                 hint="move the old database aside; the daemon then starts a new one")
            MIGRATIONS[step](conn)
        conn.execute(update(schema_version_table).values(version=SCHEMA_VERSION))

    def schema_version(self) -> int:
        with self._guard("read"), self.engine.connect() as conn:
            return self._stored_version(conn) or 0

    def integrity_check(self) -> list[str] | None:
        """SQLite's ``PRAGMA integrity_check``: [] when the file is sound, else its complaints.

        None for other backends, which have no such check.
        """
        if self.engine.dialect.name != "sqlite":
            return None
        with self._guard("check"), self.engine.connect() as conn:
            found = [row[0] for row in conn.execute(text("PRAGMA integrity_check"))]
        return [] if found == ["ok"] else found

    # -- writing --------------------------------------------------------------------------

    @contextmanager
    def _guard(self, doing: str, table: Table | None = None) -> Iterator[None]:
        """Turn a database failure, or a value read from ``table`` that no compass wrote, into a StoreError that
        names the database and a fix."""
        try:
            yield
        except SQLAlchemyError as err:
            cause, hint = _describe(err)
            raise StoreError(f"cannot {doing} the decision log {self.name}: {cause}", hint=hint) from err
        except BadValue as err:
            where = f"table {table.name}: " if table is not None else ""
            raise StoreError(f"cannot {doing} the decision log {self.name}: {where}{err}",
                             hint=BAD_VALUE_HINT) from None

    @contextmanager
    def cycle(self, resume: int | None = None) -> Iterator[int]:
        """One transaction for what a daemon cycle records; yields the cycle id.

        Records written inside are tagged with the cycle and commit together when the
        block ends; an exception (or a failing write) rolls all of them back. ``resume``:
        a cycle begun by an earlier transaction (its decisions, written before Slurm heard
        them), whose id the records of this one take.
        """
        if self._conn is not None:
            raise StoreError("a cycle is already open", hint="cycles do not nest")
        with self._guard("write to"), self.engine.begin() as conn:
            cycle_id = resume if resume is not None else conn.execute(
                insert(cycles_table).values(time=datetime.now(UTC))).inserted_primary_key[0]
            self._conn, self._cycle = conn, cycle_id
            try:
                yield cycle_id
            finally:
                self._conn = self._cycle = None

    @contextmanager
    def _transaction(self) -> Iterator[Connection]:
        """The open cycle's connection, else a transaction of its own."""
        if self._conn is not None:
            with self._guard("write to"):
                yield self._conn
            return
        with self._guard("write to"), self.engine.begin() as conn:
            yield conn

    def _values(self, record: _Record) -> dict[str, Any]:
        values = self._texts(record.table, {f.name: getattr(record, f.name) for f in fields(record) if f.name != "id"})
        values["time"] = values["time"] or datetime.now(UTC)
        if values["cycle"] is None:
            values["cycle"] = self._cycle
        return values

    def _record(self, record: _Record) -> int:
        with self._transaction() as conn:
            # the values as parameters, not .values(): building a statement per row cost a cycle of 700 decisions
            # 0.17 s (benchmarks/bench_daemon.py), ten times what inserting them does
            return conn.execute(insert(record.table), self._values(record)).inserted_primary_key[0]

    def record_decision(self, record: DecisionRecord) -> int:
        """Log a decision; returns its id."""
        return self._record(record)

    def record_decisions(self, records: Sequence[DecisionRecord]) -> list[int]:
        """Log decisions in one statement (a cycle's, written ahead); returns their ids in their order."""
        if not records:
            return []
        with self._transaction() as conn:
            # one INSERT .. RETURNING for the lot: a statement per decision was most of the log's share of a cycle
            rows = conn.execute(insert(decisions_table).returning(decisions_table.c.id, sort_by_parameter_order=True),
                                [self._values(record) for record in records])
            return [row.id for row in rows]

    def rewrite_decision(self, record: DecisionRecord) -> None:
        """Replace the logged decision ``record.id`` with ``record`` (one Slurm refused after it was logged)."""
        values = {f.name: getattr(record, f.name) for f in fields(record) if f.name not in ("id", "time", "cycle")}
        with self._transaction() as conn:
            conn.execute(update(decisions_table).where(decisions_table.c.id == record.id).values(
                self._texts(decisions_table, values)))

    def record_migration(self, record: MigrationRecord) -> int:
        """Log a migration; returns its id."""
        if record.status not in MIGRATION_STATUSES:  # checked on writing only: old rows always read back
            raise ValueError(f"migration status must be one of {MIGRATION_STATUSES}, got {record.status!r}")
        return self._record(record)

    def record_sample(self, record: SampleRecord) -> int:
        return self._record(record)

    def record_error(self, record: ErrorRecord) -> int:
        return self._record(record)

    # -- reading --------------------------------------------------------------------------

    def _query(self, kind: type[_R], since: datetime | None, job: str | None = None,
               limit: int | None = None, cycle: int | None = None, action: str | None = None) -> list[_R]:
        """Rows of ``kind`` oldest first; with ``limit``, only the latest ``limit`` of them."""
        table = kind.table
        query = select(table)
        if since is not None:
            query = query.where(table.c.time >= since)
        if job is not None:
            query = query.where(table.c.job_id == job)
        if cycle is not None:
            query = query.where(table.c.cycle == cycle)
        if action is not None:
            query = query.where(table.c.action == action)
        newest_first = limit is not None
        order = (table.c.time.desc(), table.c.id.desc()) if newest_first else (table.c.time, table.c.id)
        query = query.order_by(*order).limit(limit)
        with self._guard("read", table), self.engine.connect() as conn:
            records = [kind.of_row(row) for row in conn.execute(query).mappings()]
        return records[::-1] if newest_first else records

    def decisions(self, since: datetime | None = None, job: str | None = None, limit: int | None = None,
                  cycle: int | None = None, action: str | None = None) -> list[DecisionRecord]:
        """Decisions oldest first; ``limit`` keeps the latest ones (``limit=5``: the last five); ``cycle``: those
        of one daemon cycle; ``action``: those of one action."""
        return self._query(DecisionRecord, since, job, limit, cycle, action)

    def latest_places(self, jobs: Iterable[str]) -> dict[str, Place]:
        """Each job's latest record naming where it runs (action in PLACES); jobs without one are left out."""
        with self._guard("read"), self.engine.connect() as conn:
            return _latest_places(conn, jobs)

    def decisions_with_ids(self, ids: Iterable[int]) -> list[DecisionRecord]:
        """The decisions of these ids, oldest first."""
        table, wanted = decisions_table, sorted(set(ids))
        out: list[DecisionRecord] = []
        with self._guard("read", table), self.engine.connect() as conn:
            for batch in _batches(wanted):
                query = select(table).where(table.c.id.in_(batch)).order_by(table.c.id)
                out += map(DecisionRecord.of_row, conn.execute(query).mappings())
        return out

    def unfinished_cycle_jobs(self) -> list[str]:
        """The jobs given a place by the cycles logged after the latest one that ended (wrote its sample): a
        daemon killed mid-cycle logged decisions Slurm may never have heard; cycles skipped since decide none."""
        ended = select(samples_table.c.cycle).order_by(samples_table.c.id.desc()).limit(1).scalar_subquery()
        since = select(cycles_table.c.time).where(cycles_table.c.id == ended).scalar_subquery()
        table = decisions_table
        # the time bound (an hour early, for a clock stepped back) lets the index skip the log's past; the cycle
        # bound is the condition
        early = func.coalesce(since, literal_column("0")) - literal_column("3600")
        query = (select(table.c.job_id).where(table.c.time >= early,
                                              table.c.cycle > func.coalesce(ended, 0), table.c.action.in_(PLACES))
                 .order_by(table.c.id))
        with self._guard("read"), self.engine.connect() as conn:
            return list(dict.fromkeys(conn.execute(query).scalars()))

    def migrations(self, since: datetime | None = None, job: str | None = None,
                   cycle: int | None = None) -> list[MigrationRecord]:
        return self._query(MigrationRecord, since, job, cycle=cycle)

    def samples(self, since: datetime | None = None) -> list[SampleRecord]:
        return self._query(SampleRecord, since)

    def errors(self, since: datetime | None = None) -> list[ErrorRecord]:
        return self._query(ErrorRecord, since)


    def count(self, kind: type[_Record], by: str, since: datetime | None = None, until: datetime | None = None,
              cycle: int | None = None) -> dict[Any, int]:
        """How many records of ``kind`` in [since, until] (or of one ``cycle``) have each value of column ``by``
        (a report's tallies: counted by the database, which reads the time index only where the column is in it)."""
        table = kind.table
        column = table.c[by]
        query = select(column, func.count())
        if since is not None:
            query = query.where(table.c.time >= since)
        if until is not None:
            query = query.where(table.c.time <= until)
        if cycle is not None:
            query = query.where(table.c.cycle == cycle)
        with self._guard("read"), self.engine.connect() as conn:
            return {value: n for value, n in conn.execute(query.group_by(column))}

    def count_actions(self, since: datetime, until: datetime) -> dict[str, int]:
        """Decisions by action of the cycles that began in [since, until]: from their samples' tallies, and for
        the cycles whose sample has none (cut short, skipped, written by an older compass) and records of no
        cycle, counted one by one. A day at 16,384 nodes is millions of decisions, but only 17,280 samples."""
        s, c, d = samples_table.c, cycles_table.c, decisions_table.c
        totals: Counter[str] = Counter()
        tallied = select(s.cycle).where(s.cycle.is_not(None), s.actions.is_not(None))
        untallied = select(c.id).where(c.time >= since, c.time <= until, c.id.not_in(tallied))
        with self._guard("read"), self.engine.connect() as conn:
            for (actions,) in conn.execute(select(s.actions).join(cycles_table, c.id == s.cycle).where(
                    c.time >= since, c.time <= until, s.actions.is_not(None))):
                totals.update(actions)
            for query in (select(d.action, func.count()).where(d.cycle.in_(untallied)),
                          select(d.action, func.count()).where(d.cycle.is_(None), d.time >= since, d.time <= until)):
                totals.update(dict(conn.execute(query.group_by(d.action)).all()))
        return dict(totals)

    # -- the leader's lease (service/leader.py); each call is one transaction of its own -----------

    def leader(self) -> LeaderRow | None:
        """The leader row; None before any daemon claimed it."""
        with self._guard("read", leader_table), self.engine.connect() as conn:
            return _leader(conn)

    def claim_lead(self, holder: str, host: str, pid: int, lease_s: float,
                   seen: tuple[int, int] | None) -> LeaderRow | None:
        """Take the lead, if the row is still at version ``seen`` (None: there is no row yet); returns the row
        now, or None when another daemon changed it first (a compare-and-set: at most one claim of a version wins).
        The row's beat is 0 until the first renewal: a standby waits only the short lease for such a claim."""
        t, now = leader_table.c, datetime.now(UTC)
        values = dict(holder=holder, host=host, pid=pid, beat=0, since=now, renewed=now, lease_s=lease_s, alone=True)
        with self._guard("write to"):
            try:
                with self.engine.begin() as conn:
                    if seen is None:
                        conn.execute(insert(leader_table).values(id=1, token=1, **values))
                    elif not conn.execute(update(leader_table).where(t.id == 1, t.token == seen[0], t.beat == seen[1])
                                          .values(token=t.token + 1, **values)).rowcount:
                        return None
                    return _leader(conn)
            except IntegrityError:  # another daemon made the row first
                return None

    def renew_lead(self, holder: str, token: int, lease_s: float, standby_since: datetime) -> LeaderRow | None:
        """Renew the lead of ``holder`` under ``token``; ``alone`` says whether no standby said it was there since
        ``standby_since``. None when the lead is no longer its own."""
        t = leader_table.c
        # (the leader's own note, from when it stood by, is no standby's)
        there = and_(t.standby_seen.is_not(None), t.standby_seen >= standby_since, t.standby != holder)
        with self._guard("write to"), self.engine.begin() as conn:
            if not conn.execute(update(leader_table).where(t.id == 1, t.token == token, t.holder == holder).values(
                    beat=t.beat + 1, renewed=datetime.now(UTC), lease_s=lease_s,
                    alone=case((there, False), else_=True))).rowcount:
                return None
            return _leader(conn)

    def note_standby(self, holder: str) -> None:
        """A standby says it is there, so that the leader takes the short lease (and it may take over soon)."""
        with self._guard("write to"), self.engine.begin() as conn:
            conn.execute(update(leader_table).where(leader_table.c.id == 1)
                         .values(standby=holder, standby_seen=datetime.now(UTC)))

    def withdraw_standby(self, holder: str) -> None:
        """A standby stopping: the row no longer names it (a later standby's word stands)."""
        t = leader_table.c
        with self._guard("write to"), self.engine.begin() as conn:
            conn.execute(update(leader_table).where(t.id == 1, t.standby == holder)
                         .values(standby=None, standby_seen=None))

    def resign_lead(self, holder: str, token: int) -> bool:
        """Give up the lead (a daemon stopping): a standby takes it at its next cycle."""
        t = leader_table.c
        with self._guard("write to"), self.engine.begin() as conn:
            return bool(conn.execute(update(leader_table).where(t.id == 1, t.token == token, t.holder == holder)
                                     .values(holder=None, host=None, pid=None)).rowcount)

    # -- retention ------------------------------------------------------------------------

    def prune(self, before: datetime, keep: Iterable[str] = (), *, batch: int = PRUNE_BATCH,
              budget_s: float | None = None, clock: Callable[[], float] = time.monotonic) -> Pruned:
        """Delete the records of the cycles begun before ``before``, oldest first, in transactions of at most
        ``batch`` rows per table (more only when one cycle alone logged more: a cycle goes whole, so ``compass
        explain`` never sees half of one), until none is left or ``budget_s`` seconds have passed.

        Kept whatever their age: the latest record naming where each job in ``keep`` runs (the jobs Slurm has:
        a restart reads it, :meth:`latest_places`), the latest sample (:meth:`unfinished_cycle_jobs` starts from
        it), and the cycles those name. Records written outside a cycle go by their own time.
        """
        started, keep = clock(), set(keep)
        with self._guard("prune"), self.engine.connect() as conn:
            latest = conn.execute(select(samples_table.c.id, samples_table.c.cycle)
                                  .order_by(samples_table.c.id.desc()).limit(1)).first()
        counts = {table.name: 0 for table in _PRUNED}
        longest, low, done, kept = 0.0, 0, False, 0
        while not done:
            began = clock()
            with self._guard("prune"), self.engine.begin() as conn:
                low, deleted, spared, done = _prune_batch(conn, before, batch, low, keep, latest)
            longest = max(longest, clock() - began)
            kept += spared
            for name, n in deleted.items():
                counts[name] += n
            if budget_s is not None and clock() - started >= budget_s:
                break
        return Pruned(counts, done, longest, kept)


def _spared(conn: Connection, rows: list[tuple[int, str]], keep: set[str]) -> set[int]:
    """Of the decisions ``rows`` (id, job) about to go, those that are the latest place of a job in ``keep``."""
    wanted = {job for _, job in rows if job in keep}
    if not wanted:
        return set()
    ids = {i for i, _ in rows}
    return {place.id for place in _latest_places(conn, wanted).values() if place.id in ids}


def _prune_batch(conn: Connection, before: datetime, batch: int, low: int, keep: set[str],
                 latest: tuple[int, int | None] | None) -> tuple[int, dict[str, int], int, bool]:
    """One transaction of :meth:`Store.prune`: the cycles from ``low`` up to the one holding some table's
    ``batch``-th row, whole, and up to ``batch`` rows per table written outside a cycle. Returns where the next
    batch starts, the rows deleted per table, the job places spared and whether nothing older is left."""
    deleted = dict.fromkeys((table.name for table in _PRUNED), 0)
    decisions, cycles = decisions_table.c, cycles_table.c
    spared_ids: set[int] = set()
    done = True
    cut = conn.scalar(select(func.max(cycles.id)).where(cycles.time < before))
    first = conn.scalar(select(func.min(cycles.id)).where(cycles.id >= low))
    if cut is not None and first is not None and first <= cut:
        end = cut + 1  # the first cycle this batch leaves
        for table in _PRUNED:
            column = table.c.id if table is cycles_table else table.c.cycle
            nth = conn.scalar(select(column).where(column >= first, column <= cut).order_by(column)
                              .offset(batch).limit(1))
            if nth is not None:
                end = min(end, nth)
        end = max(end, first + 1)  # a cycle of more than ``batch`` rows goes whole
        places = conn.execute(select(decisions.id, decisions.job_id, decisions.cycle).where(
            decisions.cycle >= first, decisions.cycle < end, decisions.action.in_(PLACES))).all()
        spared = _spared(conn, [(i, job) for i, job, _ in places], keep)
        spare = {decisions_table.name: spared, cycles_table.name: {c for i, _, c in places if i in spared}}
        if latest is not None and latest[1] is not None and first <= latest[1] < end:
            spare[samples_table.name], spare[cycles_table.name] = {latest[0]}, spare[cycles_table.name] | {latest[1]}
        for table in _PRUNED:
            column = table.c.id if table is cycles_table else table.c.cycle
            query = delete(table).where(column >= first, column < end)
            if spare.get(table.name):
                query = query.where(table.c.id.not_in(sorted(spare[table.name])))
            deleted[table.name] += conn.execute(query).rowcount
        spared_ids |= spared
        low, done = end, end > cut
    for table in _PRUNED[:-1]:  # records written outside a cycle, by their own time
        query = select(table.c.id, table.c.job_id if table is decisions_table else literal_column("NULL")).where(
            table.c.cycle.is_(None), table.c.time < before)
        if table is samples_table and latest is not None and latest[1] is None:
            query = query.where(table.c.id != latest[0])
        rows = conn.execute(query.order_by(table.c.id).limit(batch)).all()
        spared = _spared(conn, [tuple(r) for r in rows], keep) if table is decisions_table else set()
        ids = [i for i, _ in rows if i not in spared]
        if ids:
            deleted[table.name] += conn.execute(delete(table).where(table.c.id.in_(ids))).rowcount
        spared_ids |= spared
        done = done and (len(rows) < batch or not ids)  # a batch of spared rows only: they stay, as they are
    return low, deleted, len(spared_ids), done


#: the tables pruning deletes from, each cycle's records before the cycle itself (they name it)
_PRUNED = (decisions_table, migrations_table, errors_table, samples_table, cycles_table)


@dataclass(frozen=True)
class Pruned:
    """What one :meth:`Store.prune` did: rows deleted per table, whether nothing older is left (``done``; false
    when the time budget ran out first), its longest transaction in seconds and how many old records it kept
    as the latest place of a job Slurm has."""

    deleted: dict[str, int]
    done: bool
    longest_s: float
    kept_places: int

    @property
    def total(self) -> int:
        return sum(self.deleted.values())


#: the daemon prunes at most this often (seconds between passes), sooner again while a pass leaves old rows
PRUNE_EVERY_S = 120.0
PRUNE_CATCH_UP_S = 30.0
#: seconds one pass may take (checked after each batch: a pass ends at most one batch later)
PRUNE_BUDGET_S = 0.5


class Pruner:
    """The daemon's retention: between cycles, at most every PRUNE_EVERY_S, one pass of :meth:`Store.prune`
    within PRUNE_BUDGET_S over the records older than ``days`` (0 or no log: never). Its own connection, so
    the cycle's Recorder is left as it is; a failure is logged, and the next pass tries again."""

    def __init__(self, db: str | None, days: int, *, clock: Callable[[], float] = time.monotonic,
                 wall: Callable[[], float] = time.time) -> None:
        self.db = db if days > 0 else None
        self.days = days
        self.clock, self.wall = clock, wall
        self.due = clock() + PRUNE_CATCH_UP_S  # not in the daemon's first cycles
        self.store: Store | None = None
        self.last: Pruned | None = None

    def between_cycles(self, keep: Callable[[], Iterable[str]]) -> Pruned | None:
        """A pass if one is due; ``keep()``: the jobs Slurm has (their latest places stay)."""
        if self.db is None or self.clock() < self.due:
            return None
        log = logging.getLogger("compass.daemon")
        before = datetime.fromtimestamp(self.wall() - self.days * 86400, UTC)
        try:
            self.store = self.store or Store.open(self.db)
            pruned = self.last = self.store.prune(before, keep(), budget_s=PRUNE_BUDGET_S, clock=self.clock)
        except StoreError as err:
            log.warning("decision log not pruned: %s", err.message)
            self.due = self.clock() + PRUNE_EVERY_S
            return None
        self.due = self.clock() + (PRUNE_EVERY_S if pruned.done else PRUNE_CATCH_UP_S)
        if pruned.total:
            log.info("decision log: %d records older than %d days deleted (%s)%s", pruned.total, self.days,
                     ", ".join(f"{n} {name}" for name, n in pruned.deleted.items() if n),
                     "" if pruned.done else "; more next pass")
        return pruned

    def close(self) -> None:
        if self.store is not None:
            self.store.close()
            self.store = None
