"""Settings for the daemon, the wrapper and the CLI: defaults < TOML file < COMPASS_* environment < flags.

The file is /etc/compass/config.toml unless ``--config`` or COMPASS_CONFIG names
another; a missing default file is fine, a missing named file is an error.
Every value remembers where it came from, for ``compass config show``.
"""

from __future__ import annotations

import math
import os
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

# The budget's words live with the rate limit that resolves them, a module of plain Python (no policy is loaded).
from .engine.disciplines import DEFAULT_QUEUE, DEFAULT_RESTART_S, DEFAULT_SLACK, QUEUES
from .engine.rate_limit import BURST_DEFAULT, DEFAULT as DEFAULT_BUDGET, parse_burst, parse_setting
from .paths import ETC, RUN

DEFAULT_FILE = ETC / "config.toml"


class ConfigError(ValueError):
    """A setting that cannot be used; the message names the setting and where it came from."""


@dataclass(frozen=True)
class Config:
    #: SQLAlchemy URL of the decision log; empty means compass_slurm.service.store.default_db_url().
    db: str = ""
    #: Unix socket the daemon listens on and the wrapper connects to.
    socket: str = str(RUN / "compass.sock")
    #: where the daemon publishes the partial-node anchors for submit hooks.
    anchors: str = str(RUN / "anchors")
    #: placement policy by name (compass_slurm.engine.policies); compass-easy: docs/architecture.md "The policies".
    policy: str = "compass-easy"
    #: queue discipline of the daemon's Scheduler, as `compass simulate --queue`: "backfill" (EASY, as Slurm's
    #: sched/backfill: a reservation for the highest-priority job that does not fit) or "fifo" (strict order).
    queue: str = DEFAULT_QUEUE
    #: backfill: 1-GPU jobs may delay a one-node whole-node job at the front up to this many times its time
    #: limit past its first reservation (engine/scheduler.py, "Slack"; docs/architecture.md "The queue");
    #: 0 (the default): EASY's rule, the head's reservation is never delayed. A slack buys mean JCT with the
    #: whole-node jobs' waits and with partial nodes (0.5, held out with a quarter of the jobs migratable: 23%
    #: lower mean JCT, 15% longer whole-node waits, 21% more partial nodes than best-fit under EASY; the queue
    #: rule's gain, not COMPASS's: docs/results/README.md "The slack").
    slack: float = DEFAULT_SLACK
    #: seconds between daemon cycles.
    interval: float = 5.0
    #: the fewest seconds from one daemon cycle's start to the next one's, whatever wakes it (the look, an ended
    #: GPU job, the control socket's "submitted", which any local user may send): slurmctld answers one cycle's
    #: reads and updates at a time. A cycle at 16,384 nodes and 100,000 jobs takes about a second of its own.
    #: When more than one job waits as a spacing ends (a stream of submissions), the next one doubles, up to
    #: `interval`: a stream costs slurmctld one cycle's reads per interval (no look before it: the jobs the cycle
    #: finds new keep the spacing), not a read per job; a spacing that ends with one job waiting at most brings it
    #: back to this (docs/performance.md "slurmctld's load").
    min_cycle_spacing: float = 1.0
    #: seconds between the daemon's cheap looks for new managed pending jobs and ended GPU jobs (one squeue of
    #: the pending and running jobs' ids and states, and before Slurm 24.11 their comments, for which slurmctld
    #: packs every job whole: about a third of a second at 100,000 jobs; from 24.11 on 20 ms), which start a
    #: cycle once the spacing allows; none inside the spacing, none just before a cycle, and never sooner than 20
    #: times the last look's own seconds. 0 disables: a site whose GPU jobs all come through the wrapper (which
    #: tells the daemon) needs no look.
    watch: float = 0.5
    #: seconds a managed job (wrapper or hook) waits for the daemon before Slurm places it itself; at most 86400.
    lease: float = 60.0
    #: which jobs the daemon may migrate: "marker" (compass:migratable in the comment: the wrapper's
    #: --migratable), "requeue" (that, or Slurm's own --requeue as the hook or wrapper saw it), "never".
    migratable: str = "marker"
    #: the job_submit/lua hook's config file, written by `compass daemon` at start; empty: the admin writes it.
    hook_config: str = str(RUN / "hook.conf")
    #: seconds after which the hook takes the anchors file as stale (the daemon gone); 0: 3 intervals.
    hook_staleness: float = 0.0
    #: interactive allocations (salloc, srun outside a job) through the hook: "managed" or "unmanaged".
    interactive: str = "managed"
    #: the lease of an interactive allocation through the hook: short, so it starts within a cycle or two;
    #: at most 86400.
    interactive_lease: float = 10.0
    #: the migration budget over a sliding hour: a whole number (0 disables migration), "unlimited", or
    #: "per-node": one per managed GPU node, at least 12, following the nodes (engine/rate_limit.py).
    migrations_per_hour: int | str = DEFAULT_BUDGET
    #: the burst cap: the most migrations in any 5 minutes, a whole number, "unlimited" (only the hour counts)
    #: or a share of the hourly budget such as "10%" (engine/rate_limit.py).
    migrations_burst: int | str = BURST_DEFAULT
    #: seconds a migrated job loses restarting from its checkpoint (its requeue, start and restore), as `compass
    #: simulate --migration-delay`: the daemon moves running jobs to let a waiting one start now only when that
    #: one's expected wait (its backfill reservation) is at least 4 times this per move (docs/architecture.md
    #: "The policies").
    migration_delay: float = DEFAULT_RESTART_S
    #: partitions the daemon manages; empty means every partition with GPU nodes.
    partitions: tuple[str, ...] = ()
    #: Prometheus textfile written every cycle; empty disables it.
    metrics_textfile: str = ""
    #: how long the wrapper waits for the daemon before falling back to plain sbatch.
    wrapper_timeout: float = 1.0
    #: days of decision log the daemon keeps: between cycles it deletes older records in small batches
    #: (Store.prune; `compass log prune` by hand); 0 keeps everything.
    log_retention_days: int = 180
    #: the decision log's local spool (service/spool.py): what the database could not take while down, written
    #: to it when it is back; empty: beside a SQLite log's file, else in the state directory, one per database.
    #: Beside it, `<spool>.requeues`: the daemon's note of its migrations' requeue-held jobs (service/requeue_note.py).
    log_spool: str = ""
    #: megabytes the spool may hold; when full the daemon changes no jobs (no decision goes unlogged) and
    #: Slurm starts managed jobs itself when their leases run out. 0: it takes only the decisions of the cycle
    #: in which the log fails, and the daemon changes no jobs from the next one on until the log is back.
    spool_max_mb: float = 64.0
    #: seconds a leader's lease lasts when daemons share the decision log (one beside each slurmctld): the
    #: leader renews it every cycle and stops changing jobs before it ends; a standby takes over once it has
    #: not been renewed for that long (service/leader.py). 0: two intervals.
    leader_lease: float = 0.0
    #: where each value came from: default, the file's path, COMPASS_<NAME>, or flag.
    sources: Mapping[str, str] = field(default_factory=dict, compare=False, repr=False)

    @property
    def leader_lease_s(self) -> float:
        """The leader's lease in seconds, ``leader_lease`` resolved."""
        return self.leader_lease or 2 * self.interval

    def as_dict(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self) if f.name != "sources"}


def _settings() -> dict[str, type]:
    return {f.name: f.type for f in fields(Config) if f.name != "sources"}


#: settings that take one of a few words
CHOICES = {"migratable": ("marker", "requeue", "never"), "interactive": ("managed", "unmanaged"), "queue": QUEUES}


#: numbers that must be finite (the others may be inf: never)
_FINITE = {"slack", "migration_delay", "spool_max_mb"}

#: upper bounds: a lease is a fallback for a daemon that missed the job, not a start time (a day at most:
#: beyond that a job the daemon never places would, in effect, never start)
_MAXIMUM = {"lease": 86400.0, "interactive_lease": 86400.0}

#: the migration rate settings, parsed by the rate limit that spends them
_RATES = {"migrations_per_hour": parse_setting, "migrations_burst": parse_burst}


def _coerce(name: str, value: Any, origin: str) -> Any:
    kind = _settings()[name]
    if name in _RATES:
        try:
            return _RATES[name](value)
        except ValueError as err:
            raise ConfigError(f"{name} = {value!r} (from {origin}) is {err}") from None
    if name in CHOICES and value not in CHOICES[name]:
        raise ConfigError(f"{name} = {value!r} (from {origin}) is not one of {', '.join(CHOICES[name])}")
    try:
        if kind == "float":
            if isinstance(value, bool):
                raise ValueError
            value = float(value)
            if not value >= 0 or (name in _FINITE and math.isinf(value)) or value > _MAXIMUM.get(name, math.inf):
                raise ValueError
        elif kind == "int":
            if isinstance(value, bool) or (isinstance(value, float) and not value.is_integer()):
                raise ValueError
            value = int(value)
            if value < 0:
                raise ValueError
        elif kind == "tuple[str, ...]":
            if isinstance(value, str):
                value = [p.strip() for p in value.split(",") if p.strip()]
            if not isinstance(value, list | tuple) or not all(isinstance(v, str) for v in value):
                raise ValueError
            value = tuple(value)
        elif not isinstance(value, str):
            raise ValueError
    except (TypeError, ValueError):
        raise ConfigError(f"{name} = {value!r} (from {origin}) is not a valid {_describe(name, kind)}") from None
    return value


def _describe(name: str, kind: str) -> str:
    bound = f" of seconds up to {_MAXIMUM[name]:g}" if name in _MAXIMUM else ""
    return {"float": f"non-negative number{bound}", "int": "non-negative whole number",
            "tuple[str, ...]": "list of names"}.get(kind, "string")


def load_config(path: str | os.PathLike | None = None, flags: Mapping[str, Any] | None = None,
                environ: Mapping[str, str] | None = None) -> Config:
    """Merge defaults, the TOML file, COMPASS_* variables and flags (None values in flags are ignored)."""
    env = os.environ if environ is None else environ
    known = _settings()
    values: dict[str, Any] = {}
    sources = {name: "default" for name in known}
    if path is not None and not str(path):
        raise ConfigError("an empty config file name: give a path, or leave --config out for the default")
    named = path or env.get("COMPASS_CONFIG")
    file = Path(named) if named else DEFAULT_FILE
    try:
        present = file.exists()
    except PermissionError:  # a directory we may not search: reading the file says so below
        present = True
    if present:
        try:
            doc = tomllib.loads(file.read_text())
        except PermissionError:
            raise ConfigError(f"cannot read config file {file}: permission denied (every user of compass needs "
                              "to read it: mode 0644, see docs/security.md; or name another with COMPASS_CONFIG)") from None
        except (OSError, tomllib.TOMLDecodeError, UnicodeDecodeError) as err:
            raise ConfigError(f"cannot read config file {file}: {err}") from None
        section = doc.get("compass", doc)
        if not isinstance(section, dict):
            raise ConfigError(f"{file}: 'compass' must be a table of settings, got {section!r}")
        for name, value in section.items():
            if name not in known:
                raise ConfigError(f"unknown setting {name!r} in {file}; known: {', '.join(known)}")
            values[name] = _coerce(name, value, str(file))
            sources[name] = str(file)
    elif named:
        raise ConfigError(f"config file {file} does not exist")
    for name in known:
        var = f"COMPASS_{name.upper()}"
        if env.get(var):
            values[name] = _coerce(name, env[var], var)
            sources[name] = var
    for name, value in (flags or {}).items():
        if value is None:
            continue
        if name not in known:
            raise ConfigError(f"unknown setting {name!r}")
        values[name] = _coerce(name, value, "flag")
        sources[name] = "flag"
    return Config(**values, sources=sources)
