"""Sweeps: one ``compass simulate`` run per (trace window, policy, eta, queue, slack, budget, burst cap), merged into one table.

A sweep file (TOML) names the grid; every value may be one value or a list::

    output = "sweep-results"              # directory for the results (relative to this file)
    policies = ["compass", "best-fit"]    # required
    eta = [0.85, 0.90]                    # default 0.90
    queue = ["backfill", "fifo"]          # default backfill
    slack = [0, 0.5]                      # backfill's slack for whole-node heads (--slack; default the daemon's)
    migrations_per_hour = [12, "per-node"]   # the migration budget: N, "unlimited" or "per-node" (the default)
    migrations_burst = ["unlimited", "10%"]  # its burst cap per 5 minutes: N, "P%" (default "10%") or "unlimited"
    seeds = [1, 2, 3]                     # optional: --seed (the --migratable, --managed and --typed draws)
    perturb = [1, 2, 3]                   # optional: --perturb (a seeded order of same-instant events)
    migratable = [0, 0.25]                # optional: --migratable (the share of jobs that may move)
    migration_delay = [8, 120]            # optional: --migration-delay (seconds per restart)
    options = ["--estimate-factor", "2"]  # more `compass simulate` options for every task

    [[windows]]                           # at least one (or windows_from = "slices.toml": that file's)
    trace = "/data/last-year.sacct"       # relative to this file
    window = "20d:60d"                    # optional, as --window
    limit = 4000                          # optional, as --limit
    cluster = "cluster07"                 # optional, as --cluster
    layout = "layouts/mixed.toml"         # optional, as --layout (relative to this file)
    typed = 0.3                           # optional, as --typed (with a layout)
    name = "spring"                       # optional label

    [sbatch]                              # optional, for --sbatch
    options = ["--partition=batch", "--time=60"]

The plan (``plan.json`` in the output directory) fixes each task's command line:
``compass simulate ... --json``, whose stdout is ``tasks/<i>.json`` and stderr
``tasks/<i>.err``. ``collect`` merges whatever tasks finished (adding each row's
coordinates in the grid) into ``results.json``, ``table.md`` and ``sweep.png`` and
names the tasks that failed, with their last error line (``failed.json``), so one
bad window costs only its own rows.

Locally the tasks run in processes, one per CPU. With ``--sbatch`` they are one
Slurm array job (``task.sh``: a case per task, running the ``compass`` beside this
Python, so the nodes need the same path) and a collect job (``python -m
compass_slurm.sim.sweep collect PLAN``) that depends on it with ``afterany``, so
it merges even when some tasks failed.
"""

from __future__ import annotations

import json
import math
import os
import shlex
import sys
import tomllib
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from itertools import product
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..atomic import write_atomic
from ..engine.disciplines import DEFAULT_QUEUE, DEFAULT_SLACK, EASY_SLACK, QUEUES
from ..engine.rate_limit import BURST_DEFAULT, DEFAULT as DEFAULT_BUDGET, UNLIMITED, parse_burst, parse_setting

if TYPE_CHECKING:
    from ..slurm.cli_backend import Runner

PLAN = "plan.json"
TASKS = "tasks"
DEFAULT_ETA = 0.90
#: options a task sets itself; in ``options`` they would contradict the grid
OWN_OPTIONS = frozenset({"--trace", "--synthetic", "--window", "--limit", "--cluster", "--policy", "--eta",
                         "--queue", "--backfill", "--no-backfill", "--slack", "--migrations-per-hour",
                         "--migrations-burst", "--json", "--layout", "--typed", "--perturb",
                         "--output",
                         "--sweep", "--sbatch"})
_TOP = frozenset({"output", "policies", "eta", "queue", "slack", "migrations_per_hour", "migrations_burst",
                  "seeds", "perturb", "migratable", "migration_delay", "options", "windows", "windows_from",
                  "sbatch"})
#: grid keys that are ``compass simulate`` options: the key -> its option
_OPTION_KEYS = {"seeds": "--seed", "migratable": "--migratable", "migration_delay": "--migration-delay"}
_WINDOW = frozenset({"trace", "window", "limit", "cluster", "layout", "typed", "name"})


class SweepError(ValueError):
    """A sweep file that cannot be run; the message names the file and the key."""


@dataclass(frozen=True)
class Task:
    """One run of the grid and the ``compass simulate`` arguments that make it."""

    index: int
    window: str
    policy: str
    eta: float
    queue: str
    #: migrations per sliding hour, or "unlimited"
    migrations_per_hour: int | str
    argv: tuple[str, ...]
    #: the burst cap per 5 minutes (a plan saved before the setting has none: it ran uncapped)
    migrations_burst: int | str = UNLIMITED
    #: backfill's slack for whole-node heads (a plan saved before the setting has none: 0, EASY's rule)
    slack: float = EASY_SLACK
    #: --seed, when the sweep has seeds (None: the default seed)
    seed: int | None = None
    #: --perturb, when the sweep perturbs ties (None: none)
    perturb: int | None = None
    #: --migratable and --migration-delay, when the sweep sets them per task (None: options' or the default)
    migratable: float | None = None
    migration_delay: float | None = None

    def label(self) -> str:
        burst = "" if self.migrations_burst == BURST_DEFAULT else f" burst={self.migrations_burst}"
        seed = "" if self.seed is None else f" seed={self.seed}"
        perturb = "" if self.perturb is None else f" perturb={self.perturb}"
        movable = "" if self.migratable is None else f" migratable={self.migratable:g}"
        delay = "" if self.migration_delay is None else f" delay={self.migration_delay:g}"
        return (f"{self.window} {self.policy} eta={self.eta:g} {self.queue} slack={self.slack:g} "
                f"budget={self.migrations_per_hour}{burst}{seed}{perturb}{movable}{delay}")


@dataclass(frozen=True)
class Plan:
    output: Path
    tasks: tuple[Task, ...]
    sbatch_options: tuple[str, ...] = ()

    @property
    def task_dir(self) -> Path:
        return self.output / TASKS

    def save(self) -> Path:
        self.task_dir.mkdir(parents=True, exist_ok=True)
        doc = {"output": str(self.output), "sbatch_options": list(self.sbatch_options),
               "tasks": [asdict(t) for t in self.tasks]}
        path = self.output / PLAN
        write_atomic(path, json.dumps(doc, indent=1) + "\n")
        return path

    @classmethod
    def load(cls, path: str | Path) -> Plan:
        try:
            doc = json.loads(Path(path).read_text())
            tasks = tuple(Task(**{**t, "argv": tuple(t["argv"])}) for t in doc["tasks"])
            return cls(Path(doc["output"]), tasks, tuple(doc["sbatch_options"]))
        except (OSError, ValueError, KeyError, TypeError) as err:
            raise SweepError(f"{path}: not a sweep plan ({type(err).__name__}: {err})") from None


# -- the sweep file ------------------------------------------------------------------------------


def load(path: str | Path, policies: Sequence[str]) -> Plan:
    """The plan of the sweep file at ``path``; ``policies`` are the registered names."""
    path = Path(path)
    try:
        doc = tomllib.loads(path.read_text(encoding="utf-8"))
    except OSError as err:
        raise SweepError(f"cannot read sweep file {path}: {err.strerror or err}") from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as err:
        raise SweepError(f"{path}: not TOML: {err}") from None
    return parse(doc, path.resolve().parent, str(path), policies)


def parse(doc: Mapping[str, Any], base: Path, name: str, policies: Sequence[str]) -> Plan:
    """Check every key of a sweep document and build its tasks (paths relative to ``base``)."""
    from .workloads import parse_window

    def bad(message: str) -> SweepError:
        return SweepError(f"{name}: {message}")

    unknown = sorted(set(doc) - _TOP)
    if unknown:
        raise bad(f"unknown key {unknown[0]!r} (known: {', '.join(sorted(_TOP))})")
    chosen = _list(doc, "policies", None, str, bad)
    if not chosen:
        raise bad("'policies' is required, e.g. policies = [\"compass\", \"best-fit\"]")
    for p in chosen:
        if p not in policies:
            raise bad(f"unknown policy {p!r} in 'policies' (choose from: {', '.join(policies)})")
    etas = _list(doc, "eta", DEFAULT_ETA, (int, float), bad)
    for eta in etas:
        if not 0 < eta <= 1:
            raise bad(f"eta {eta} is not in (0, 1]")
    queues = _list(doc, "queue", DEFAULT_QUEUE, str, bad)
    for q in queues:
        if q not in QUEUES:
            raise bad(f"unknown queue {q!r} (choose from: {', '.join(QUEUES)})")
    slacks = _list(doc, "slack", DEFAULT_SLACK, (int, float), bad)
    for slack in slacks:
        if slack < 0:
            raise bad(f"slack {slack} is negative: give 0 (EASY's rule) or more")
    budgets = _rates(doc, "migrations_per_hour", DEFAULT_BUDGET, parse_setting, bad)
    bursts = _rates(doc, "migrations_burst", BURST_DEFAULT, parse_burst, bad)
    seeds: list[int | None] = _list(doc, "seeds", None, int, bad) or [None]
    perturbs: list[int | None] = _list(doc, "perturb", None, int, bad) or [None]
    shares: list[float | None] = _list(doc, "migratable", None, (int, float), bad) or [None]
    if any(share is not None and not 0 <= share <= 1 for share in shares):
        raise bad("'migratable' must list fractions in [0, 1]")
    delays: list[float | None] = _list(doc, "migration_delay", None, (int, float), bad) or [None]
    if any(delay is not None and delay < 0 for delay in delays):
        raise bad("'migration_delay' must list seconds >= 0")
    per_task = {option for key, option in _OPTION_KEYS.items() if key in doc}
    options = _options(doc.get("options", []), "options", bad)
    for opt in options:
        if opt.split("=")[0] in OWN_OPTIONS | per_task:
            raise bad(f"'options' may not set {opt.split('=')[0]}: the sweep sets it per task")
    sbatch = doc.get("sbatch", {})
    if not isinstance(sbatch, Mapping) or set(sbatch) - {"options"}:
        raise bad("[sbatch] takes one key, options = [\"--partition=...\", ...]")
    sbatch_options = _options(sbatch.get("options", []), "sbatch.options", bad)
    windows, wbase = _windows(doc, base, bad)
    spans = []
    for k, w in enumerate(windows, 1):
        where = f"windows #{k}"
        if not isinstance(w, Mapping):
            raise bad(f"{where} is not a table")
        extra = sorted(set(w) - _WINDOW)
        if extra:
            raise bad(f"{where}: unknown key {extra[0]!r} (known: {', '.join(sorted(_WINDOW))})")
        trace = w.get("trace")
        if not isinstance(trace, str) or not trace:
            raise bad(f"{where}: 'trace' (a file) is required")
        trace_path = (wbase / trace).resolve()
        if not trace_path.is_file():
            raise bad(f"{where}: trace {trace} not found")
        argv = ["--trace", str(trace_path)]
        label = w.get("name", None)
        if "window" in w:
            if not isinstance(w["window"], str):
                raise bad(f"{where}: 'window' must be text like \"20d:60d\"")
            try:
                parse_window(w["window"])
            except ValueError as err:
                raise bad(f"{where}: {err}") from None
            argv += ["--window", w["window"]]
        if "limit" in w:
            if isinstance(w["limit"], bool) or not isinstance(w["limit"], int) or w["limit"] < 1:
                raise bad(f"{where}: 'limit' must be a whole number >= 1")
            argv += ["--limit", str(w["limit"])]
        if "cluster" in w:
            if not isinstance(w["cluster"], str) or not w["cluster"]:
                raise bad(f"{where}: 'cluster' must be a name")
            argv += ["--cluster", w["cluster"]]
        if "layout" in w:
            if not isinstance(w["layout"], str) or not (wbase / w["layout"]).is_file():
                raise bad(f"{where}: layout {w['layout']!r} not found (a TOML file, relative to the sweep file)")
            argv += ["--layout", str((wbase / w["layout"]).resolve())]
        if "typed" in w:
            typed = w["typed"]
            if isinstance(typed, bool) or not isinstance(typed, (int, float)) or not 0 <= typed <= 1:
                raise bad(f"{where}: 'typed' must be a fraction in [0, 1]")
            if "layout" not in w:
                raise bad(f"{where}: 'typed' needs a 'layout' (the GPU types come from it)")
            argv += ["--typed", f"{typed:g}"]
        if label is None:
            label = trace_path.stem + "".join(f" {w[k]}" for k in ("cluster", "window") if k in w)
        elif not isinstance(label, str) or not label:
            raise bad(f"{where}: 'name' must be text")
        spans.append((label, argv))
    labels = [label for label, _ in spans]
    if len(set(labels)) != len(labels):
        raise bad("two windows have the same name; give each a distinct 'name'")
    output = doc.get("output", f"{Path(name).stem}-results")
    if not isinstance(output, str) or not output:
        raise bad("'output' must be a directory name")
    tasks = tuple(
        Task(i, label, policy, float(eta), queue, budget,
             (*argv, "--policy", policy, "--eta", f"{eta:g}", "--queue", queue,
              "--slack", f"{slack:g}", "--migrations-per-hour", str(budget),
              "--migrations-burst", str(burst),  # named as the slack is: the default may change, a plan must not
              *(() if seed is None else ("--seed", str(seed))),
              *(() if perturb is None else ("--perturb", str(perturb))),
              *(() if share is None else ("--migratable", f"{share:g}")),
              *(() if delay is None else ("--migration-delay", f"{delay:g}")), *options, "--json"),
             burst, float(slack), seed, perturb, None if share is None else float(share),
             None if delay is None else float(delay))
        for i, ((label, argv), policy, eta, queue, slack, budget, burst, seed, perturb, share, delay)
        in enumerate(product(spans, chosen, etas, queues, slacks, budgets, bursts, seeds, perturbs, shares, delays))
    )
    return Plan((base / output).resolve(), tasks, tuple(sbatch_options))


def _windows(doc: Mapping[str, Any], base: Path, bad: Callable[[str], SweepError]) -> tuple[Any, Path]:
    """The [[windows]] tables, the sweep file's own or those of the file ``windows_from`` names (so sweeps
    of one protocol share its slices), and the directory their paths are relative to."""
    if "windows_from" not in doc:
        windows = doc.get("windows")
    elif "windows" in doc:
        raise bad("give [[windows]] or windows_from, not both")
    else:
        source = doc["windows_from"]
        path = base / source if isinstance(source, str) else None
        try:
            windows = tomllib.loads(path.read_text(encoding="utf-8")).get("windows") if path else None
        except (OSError, tomllib.TOMLDecodeError, UnicodeDecodeError) as err:
            raise bad(f"windows_from {source!r}: cannot read its [[windows]] ({err})") from None
        base = path.resolve().parent if path else base
    if not isinstance(windows, list) or not windows:
        raise bad("at least one [[windows]] table with a trace is required")
    return windows, base


def _rates(doc: Mapping[str, Any], key: str, default: int | str, parse: Callable[[object], int | str],
           bad: Callable[[str], SweepError]) -> list[int | str]:
    """The values of a rate limit setting (``parse``: engine/rate_limit.py's parser of it)."""
    values = []
    for value in _list(doc, key, default, (int, str), bad):
        try:
            values.append(parse(value))
        except ValueError as err:
            raise bad(f"{key} {value!r} is {err}") from None
    return values


def _list(doc: Mapping[str, Any], key: str, default: Any, kind: type | tuple[type, ...],
          bad: Callable[[str], SweepError]) -> list[Any]:
    value = doc.get(key, default)
    values = value if isinstance(value, list) else [value]
    if value is None:
        return []
    for v in values:
        if isinstance(v, bool) or not isinstance(v, kind) or (isinstance(v, float) and not math.isfinite(v)):
            names = kind.__name__ if isinstance(kind, type) else " or ".join(k.__name__ for k in kind)
            raise bad(f"{key!r}: {v!r} is not {'an' if names[0] in 'aeiou' else 'a'} {names}")
    if len(set(values)) != len(values):
        raise bad(f"{key!r} lists a value twice")
    return values


def _options(value: Any, key: str, bad: Callable[[str], SweepError]) -> list[str]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise bad(f"{key!r} must be a list of strings, e.g. [\"--migration-delay\", \"8\"]")
    return value


# -- running tasks ---------------------------------------------------------------------------------


def result_path(plan: Plan, task: Task) -> Path:
    """The task's stdout: ``compass simulate --json``'s rows."""
    return plan.task_dir / f"{task.index}.json"


def error_path(plan: Plan, task: Task) -> Path:
    """The task's stderr: its one-line error, or Slurm's own (a time-limit kill)."""
    return plan.task_dir / f"{task.index}.err"


#: runs ``compass simulate ARGV`` and returns (exit code, stdout, stderr); must be picklable
Simulate = Callable[[tuple[str, ...]], tuple[int, str, str]]


def run_local(plan: Plan, simulate: Simulate, workers: int | None = None,
              on_done: Callable[[Task], None] | None = None) -> None:
    """Every task of ``plan`` in local processes (at most one per CPU this process may use, so ``taskset``
    bounds a sweep on a shared machine), calling ``on_done`` as each ends."""
    from concurrent.futures import ProcessPoolExecutor, as_completed

    plan.save()
    workers = max(1, min(workers or len(os.sched_getaffinity(0)) or 1, len(plan.tasks)))

    def record(task: Task, outcome: tuple[int, str, str]) -> None:
        _, out, err = outcome
        write_atomic(result_path(plan, task), out)
        write_atomic(error_path(plan, task), err)
        if on_done is not None:
            on_done(task)

    if workers == 1:
        for task in plan.tasks:
            record(task, simulate(task.argv))
        return
    with ProcessPoolExecutor(workers) as pool:
        futures = {pool.submit(simulate, t.argv): t for t in plan.tasks}
        for future in as_completed(futures):
            record(futures[future], future.result())


# -- Slurm --------------------------------------------------------------------------------------------


def task_script(plan: Plan, compass: str) -> str:
    """The array job's script: task $SLURM_ARRAY_TASK_ID runs its own ``compass simulate`` command line."""
    lines = ["#!/bin/sh", "# written by compass simulate --sweep: one case per task of plan.json",
             'case "$SLURM_ARRAY_TASK_ID" in']
    for task in plan.tasks:
        command = shlex.join([compass, "simulate", *task.argv])
        lines.append(f"{task.index}) exec {command} ;;  # {task.label()}")
    lines += ['*) echo "no task $SLURM_ARRAY_TASK_ID in this sweep" >&2; exit 2 ;;', "esac", ""]
    return "\n".join(lines)


def collect_script(plan_path: Path, python: str) -> str:
    return f"#!/bin/sh\nexec {shlex.quote(python)} -m compass_slurm.sim.sweep collect {shlex.quote(str(plan_path))}\n"


def array_argv(plan: Plan, script: Path) -> list[str]:
    return ["sbatch", "--parsable", f"--array=0-{len(plan.tasks) - 1}", "--job-name=compass-sweep",
            f"--output={plan.task_dir / '%a.json'}", f"--error={plan.task_dir / '%a.err'}", *plan.sbatch_options,
            str(script)]


def collect_argv(plan: Plan, script: Path, array_id: str) -> list[str]:
    return ["sbatch", "--parsable", f"--dependency=afterany:{array_id}", "--job-name=compass-sweep-collect",
            f"--output={plan.output / 'collect.log'}", *plan.sbatch_options, str(script)]


def submit(plan: Plan, runner: Runner, python: str = sys.executable) -> tuple[str, str]:
    """Submit the array job and its collect job; returns their job ids.

    The scripts name this Python and the ``compass`` beside it, so the nodes need the same path
    (a shared file system, or the same installation everywhere).
    """
    plan_path = plan.save()
    compass = str(Path(python).with_name("compass"))
    scripts = {}
    for kind, text in (("task", task_script(plan, compass)), ("collect", collect_script(plan_path, python))):
        scripts[kind] = plan.output / f"{kind}.sh"
        write_atomic(scripts[kind], text, mode=0o755)
    array_id = _sbatch(array_argv(plan, scripts["task"]), runner)
    return array_id, _sbatch(collect_argv(plan, scripts["collect"], array_id), runner)


def _sbatch(argv: list[str], runner: Runner) -> str:
    code, out, err = runner(argv, 60.0)
    job_id = out.strip().split(";")[0]
    if code != 0 or not job_id.isdigit():
        raise SweepError(f"sbatch refused the sweep: {(err or out).strip()[:300] or f'exit {code}'}")
    return job_id


# -- collect ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Collected:
    rows: list[dict[str, Any]]
    failed: list[tuple[Task, str]]


def collect(plan: Plan) -> Collected:
    """Merge the tasks that wrote rows; the others are failures with the reason they left."""
    rows: list[dict[str, Any]] = []
    failed: list[tuple[Task, str]] = []
    for task in plan.tasks:
        try:
            found = json.loads(result_path(plan, task).read_text())
            if not isinstance(found, list) or not all(isinstance(r, dict) for r in found):
                raise ValueError("not a list of rows")
        except (OSError, ValueError):
            failed.append((task, _failure(plan, task)))
            continue
        coordinates = {"task": task.index, "window": task.window, "policy": task.policy, "eta": task.eta,
                       "queue": task.queue, "slack": task.slack, "migrations_per_hour_setting": task.migrations_per_hour,
                       "migrations_burst_setting": task.migrations_burst, "seed": task.seed,
                       "perturb": task.perturb}
        rows += [{**row, **coordinates} for row in found]
    return Collected(rows, failed)


def _failure(plan: Plan, task: Task) -> str:
    """The last line the task wrote on stderr ("compass: error: ...", or Slurm's kill notice)."""
    try:
        lines = [line for line in error_path(plan, task).read_text(errors="replace").splitlines() if line.strip()]
    except OSError:
        lines = []
    errors = [line for line in lines if not line.startswith("hint:")]
    return (errors or lines or ["no result (the task did not run or was killed)"])[-1].strip()


def write_results(plan: Plan, collected: Collected) -> str:
    """results.json, failed.json, table.md and sweep.png in the output directory; returns the table."""
    table = markdown(collected)
    write_atomic(plan.output / "results.json", json.dumps(collected.rows, indent=1) + "\n")
    write_atomic(plan.output / "failed.json", json.dumps(
        [{"task": t.index, **{k: v for k, v in asdict(t).items() if k != "index"}, "reason": why}
         for t, why in collected.failed], indent=1) + "\n")
    write_atomic(plan.output / "table.md", table)
    if collected.rows:
        plot(collected.rows, plan.output / "sweep.png")
    return table


COLUMNS = (
    ("window", "window", str), ("policy", "policy", str), ("eta", "eta", "{:g}".format),
    ("queue", "queue", str), ("slack", "slack", "{:g}".format), ("budget/h", "migrations_per_hour_setting", str),
    ("nodes", "nodes", str),
    ("AJCT (s)", "ajct_s", "{:,.0f}".format), ("mean wait (s)", "mean_wait_s", "{:,.0f}".format),
    ("AFR", "afr", "{:.4f}".format), ("time SIF <= 2/N", "sif_bound_frac", "{:.2%}".format),
    ("AGU", "agu", "{:.4f}".format), ("migrations", "migrations", "{:,}".format),
)


#: the burst cap's column, after the budget's, in a sweep with a burst cap other than the default
BURST_COLUMN = ("burst/5 min", "migrations_burst_setting", str)
#: in a sweep with seeds, after the slack's
SEED_COLUMN = ("seed", "seed", str)
#: in a sweep that perturbs ties, after the seed's (or the slack's)
PERTURB_COLUMN = ("perturb", "perturb", str)
#: on mixed clusters (more than one node group), at the end
GROUP_COLUMNS = (("partial", "mean_partial_nodes", "{:.2f}".format),
                 ("partial per group", "mean_partial_by_group",
                  lambda by: ", ".join(f"{label} {value:.2f}" for label, value in by.items())))


def markdown(collected: Collected) -> str:
    columns = list(COLUMNS)
    if any(row.get("migrations_burst_setting", BURST_DEFAULT) != BURST_DEFAULT for row in collected.rows):
        columns.insert(6, BURST_COLUMN)
    if any(row.get("perturb") is not None for row in collected.rows):
        columns.insert(5, PERTURB_COLUMN)
    if any(row.get("seed") is not None for row in collected.rows):
        columns.insert(5, SEED_COLUMN)
    if any(len(row.get("groups") or ()) > 1 for row in collected.rows):
        # the bound is two partial nodes beyond Phi* per node group (docs/concepts.md)
        columns = [("time SIF <= 2K/N", *c[1:]) if c[1] == "sif_bound_frac" else c for c in columns]
        columns += GROUP_COLUMNS
    lines = ["| " + " | ".join(title for title, _, _ in columns) + " |",
             "|" + "|".join("---" if k in ("window", "policy", "queue") else "---:" for _, k, _ in columns) + "|"]
    for row in sorted(collected.rows, key=lambda r: (r["task"], r["policy"])):
        lines.append("| " + " | ".join(_cell(row.get(key), fmt) for _, key, fmt in columns) + " |")
    if collected.failed:
        lines.append("")
    for task, why in collected.failed:
        lines.append(f"failed: task {task.index} ({task.label()}): {why}")
    return "\n".join(lines) + "\n"


def _cell(value: Any, fmt: Callable[[Any], str]) -> str:
    return "-" if value is None else fmt(value)


def plot(rows: Iterable[Mapping[str, Any]], path: Path) -> None:
    """AJCT per configuration, one panel per window."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    by_window: dict[str, list[Mapping[str, Any]]] = {}
    for row in rows:
        by_window.setdefault(row["window"], []).append(row)
    fig, axes = plt.subplots(len(by_window), 1, figsize=(10, 2.8 * len(by_window)), squeeze=False)
    for ax, (window, group) in zip(axes[:, 0], by_window.items()):
        labels = [f"{r['policy']}\n{r['queue']} eta={r['eta']:g} b={r['migrations_per_hour_setting']}"
                  + ("" if r.get("migrations_burst_setting", BURST_DEFAULT) == BURST_DEFAULT
                     else f" b5={r['migrations_burst_setting']}")
                  + f" s={r.get('slack', 0):g}" for r in group]
        ax.bar(range(len(group)), [r["ajct_s"] for r in group])
        ax.set_xticks(range(len(group)), labels, fontsize=7)
        ax.set_ylabel("AJCT (s)")
        ax.set_title(window, fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m compass_slurm.sim.sweep collect PLAN``: what the collect job runs."""
    args = list(sys.argv[1:] if argv is None else argv)
    try:
        if len(args) == 2 and args[0] == "collect":
            plan = Plan.load(args[1])
            collected = collect(plan)
            print(write_results(plan, collected), end="")
            return report_failures(plan, collected)
    except SweepError as err:
        print(f"compass: error: {err}", file=sys.stderr)
        return 2
    print("usage: python -m compass_slurm.sim.sweep collect PLAN", file=sys.stderr)
    return 2


def report_failures(plan: Plan, collected: Collected) -> int:
    """One line on stderr per failed task; 1 when any failed (the rest are merged all the same)."""
    for task, why in collected.failed:
        print(f"compass: task {task.index} failed ({task.label()}): {why}", file=sys.stderr)
    if collected.failed:
        print(f"compass: {len(collected.failed)} of {len(plan.tasks)} tasks failed; the others are merged "
              f"in {plan.output}", file=sys.stderr)
    return 1 if collected.failed else 0


if __name__ == "__main__":
    sys.exit(main())
