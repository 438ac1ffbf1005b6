"""``compass simulate``: replay a trace (or a synthetic workload) through every policy and compare.

Stdout carries the result only: a table, or with --json one JSON array (one
object per policy). Progress and notes go to stderr.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import NamedTuple

import click

from ..config import Config
from ..engine.disciplines import SIM_RESTART_S
from ..engine.model import MAX_NODE_GPUS, MAX_NODES
from .common import CONTEXT_SETTINGS, InternalError, UserError, console, emit_json, json_option
from .options import FiniteFloatRange, refuse_empty

#: Jobs in a synthetic workload when --limit does not say.
SYNTHETIC_JOBS = 2000
DEFAULT_SYNTHETIC = "venus"
#: the daemon's own defaults (compass_slurm.config.Config), so a simulation measures what a site deploys
DEFAULT_QUEUE = Config.queue
DEFAULT_BUDGET = Config.migrations_per_hour
DEFAULT_BURST = Config.migrations_burst


@click.command(context_settings=CONTEXT_SETTINGS)
@click.option("--trace", "trace_path", type=click.Path(dir_okay=False), help="CSV trace or sacct --parsable2 dump.")
@click.option("--synthetic", metavar="NAME",
              help=f"Seeded synthetic workload: venus, gfs or philly [default: {DEFAULT_SYNTHETIC}].")
@click.option("--policy", "policies", metavar="A,B,...", help="Policies to compare [default: every registered one].")
@click.option("--eta", type=float, default=0.90, show_default=True,
              help="Size the cluster as N(eta) (ignored with --nodes). Given with --layout: every group of the "
                   "layout is scaled by one factor to N(eta) GPUs' worth.")
@click.option("--nodes", type=click.IntRange(1, MAX_NODES), help="Node count instead of N(eta).")
@click.option("--gpus-per-node", "node_spec", default="8", show_default=True, metavar="G|G:COUNT,...",
              help="GPUs per node, or a mix of node sizes and counts such as 8:60,4:4.")
@click.option("--layout", "layout_path", metavar="FILE.toml",
              help="The nodes of a cluster layout (the TOML file scripts/dev-cluster takes): names, GPUs, GPU type, "
                   "features; as written, or scaled with an explicit --eta. Excludes --nodes and --gpus-per-node.")
@click.option("--typed", metavar="FRACTION",
              help="With --layout: this share of the jobs (drawn with --seed) asks for a GPU type, drawn among the "
                   "layout's types with a node big enough, in proportion to their GPUs. A trace's gpu_type and "
                   "constraint columns count whatever this says [default: 0].")
@click.option("--migration-delay", type=FiniteFloatRange(min=0), default=SIM_RESTART_S, show_default=True,
              help="Seconds a job pauses per migration.")
@click.option("--seed", type=click.IntRange(min=0), default=0, show_default=True,
              help="Seed of the synthetic workload.")
@click.option("--perturb", metavar="SEED",
              help="Break the ties of same-instant arrivals and of same-instant completions in a random order drawn "
                   "with SEED (a whole number) instead of trace and start order [default: no perturbation].")
@click.option("--queue", "queue", metavar="fifo|backfill",
              help="Queue discipline: strict fifo, or EASY backfill as Slurm's sched/backfill [default: backfill].")
@click.option("--backfill", is_flag=True, help="Same as --queue backfill.")
@click.option("--estimate-factor", metavar="F", default="1",
              help="Run-time estimates are F x the real duration (users' time limits are longer) [default: 1].")
@click.option("--migratable", metavar="FRACTION",
              help="Share of jobs that may be migrated, drawn with --seed [default: the trace's 'migratable' "
                   "column, else all].")
@click.option("--migrations-per-hour", metavar="N|unlimited|per-node",
              help="Migration budget over a sliding hour, as the daemon's; per-node: one per node, at least 12 "
                   f"[default: {DEFAULT_BUDGET}].")
@click.option("--migrations-burst", metavar="N|P%|unlimited",
              help="Most migrations in any 5 minutes, as the daemon's burst cap; P%: that share of the hourly "
                   f"budget, rounded up [default: {DEFAULT_BURST}].")
@click.option("--managed", metavar="FRACTION", default="1",
              help="Share of jobs submitted through the wrapper; the rest are placed as Slurm places them "
                   "and adopted pinned [default: 1].")
@click.option("--cycle-interval", type=FiniteFloatRange(min=0), default=0.0, metavar="S",
              help="Act on departures every S seconds, as the daemon's cycle does (0: at once) [default: 0].")
@click.option("--watch", type=FiniteFloatRange(min=0), default=Config.watch, metavar="S",
              help="With --cycle-interval: the daemon's look every S seconds notices a departure and cycles at once "
                   f"(0: no look) [default: {Config.watch:g}, the daemon's].")
@click.option("--slack", type=FiniteFloatRange(min=0), default=Config.slack, metavar="S",
              help="Backfill: 1-GPU jobs may delay a one-node whole-node job at the front up to S x its estimate "
                   f"past its first reservation (0: EASY's rule) [default: {Config.slack:g}, the daemon's].")
@click.option("--limit", type=click.IntRange(min=1),
              help=f"At most this many jobs, the first in the window (synthetic: {SYNTHETIC_JOBS} unless given).")
@click.option("--window", metavar="START:END", help="Only jobs submitted in this span of trace time, e.g. 2d:9d.")
@click.option("--cluster", metavar="NAME", help="Only rows whose 'cluster' column is NAME (e.g. ITP's cluster04).")
@click.option("--skip-bad", is_flag=True, help="Skip malformed rows (and count them) instead of stopping.")
@click.option("--check", is_flag=True, help="Debug: assert the engine's invariants after every event (slow).")
@click.option("--output", type=click.Path(file_okay=False),
              help="Write timelines, each job's times (jobs-POLICY.csv), summary.json and comparison.png here.")
@click.option("--sweep", "sweep_file", metavar="SWEEP.toml",
              help="Run a grid of (window, policy, eta, queue, budget) and merge the results (see docs).")
@click.option("--sbatch", is_flag=True, help="With --sweep: one Slurm array task per run, then a collect job.")
@json_option
def command(trace_path, synthetic, policies, eta, nodes, node_spec, layout_path, typed, migration_delay, seed, perturb,
            queue,
            backfill,
            estimate_factor, migratable, migrations_per_hour, migrations_burst, managed, cycle_interval, watch, slack,
            limit, window, cluster, skip_bad, check, output, sweep_file, sbatch, as_json) -> None:
    """Replay a GPU job trace through the placement policies and compare AFR, AJCT and AGU."""
    if sweep_file is not None or sbatch:
        _alone_with_sweep(click.get_current_context())
        _sweep(sweep_file, sbatch, as_json)
        return
    from ..engine.model import EngineError
    from ..engine.rate_limit import per_burst, per_hour
    from ..sim import sizing, synthetic as synth, workloads
    from ..sim.loop import InvariantError, SimConfig

    opts = _settings(click.get_current_context().params)
    layout = opts.layout
    try:
        span = workloads.parse_window(window) if window else None
        if trace_path is not None:
            trace = workloads.load(trace_path, skip_bad=skip_bad, cluster=cluster)
            source = trace_path
        else:
            name = synthetic or DEFAULT_SYNTHETIC
            trace = synth.generate(name, limit or SYNTHETIC_JOBS, seed)
            source = f"synthetic:{name}"
        records = workloads.select(trace.records, span, limit)
        if not records:
            raise UserError(f"{source}: no jobs to simulate", hint=_empty_hint(trace, window, cluster))
        skipped_jobs: list[str] = []
        groups, node_gpus = opts.node_groups
        jobs, rules = workloads.to_jobs(records, node_gpus, migratable=opts.migratable, managed=opts.managed,
                                        seed=seed)
        if layout is not None:
            scale = _given("eta")
            jobs, cluster_nodes, skipped_jobs, layout_note = _on_layout(layout, jobs, records, eta if scale else None,
                                                                        opts.typed, seed)
            if not jobs:
                raise UserError(f"{source}: no job can run on the layout: all {len(skipped_jobs)} were skipped",
                                hint=f"first: {skipped_jobs[0]}")
        else:
            if groups is None:
                groups = [(node_gpus, nodes or sizing.cluster_size(jobs, eta, node_gpus))]
            cluster_nodes = sizing.make_nodes(groups)
            jobs, skipped_jobs = _constrained(jobs, records, cluster_nodes, seed)
            layout_note = ""
    except (workloads.TraceError, ValueError) as err:
        raise UserError(str(err)) from None
    configs = [
        SimConfig(p, cluster_nodes, migration_delay, opts.queue, check, keep_timeline=output is not None,
                  estimate_factor=opts.estimate_factor, migrations_per_hour=opts.budget, migrations_burst=opts.burst,
                  cycle_interval=cycle_interval, watch=watch, slack=slack, perturb=opts.perturb)
        for p in opts.policies
    ]
    try:
        results = _run(jobs, configs, show_progress=not as_json)
    except InvariantError as err:
        raise InternalError(f"invariant broken: {err}") from None
    except EngineError as err:  # the input was checked before the run: the engine refusing its own calls is a bug
        raise InternalError(f"the engine refused a step of the simulation: {err}") from None
    except ValueError as err:  # the workload as a whole (empty, or a job no node set can hold)
        raise UserError(str(err)) from None
    shape = "layout" if layout is not None else node_spec if ":" in node_spec else node_gpus
    hourly = per_hour(opts.budget, len(cluster_nodes))
    rows = [
        {
            "policy": r.policy,
            "nodes": len(cluster_nodes),
            "gpus_per_node": shape,
            **r.metrics.as_dict(),
            "events": r.events,
            "events_per_s": r.events / r.wall_s if r.wall_s else None,
            "wall_s": r.wall_s,
            "trace": source,
            "eta": (eta if _given("eta") else None) if layout is not None else None if nodes or ":" in node_spec else eta,
            "layout": layout_path,
            "layout_scaled": layout_note or None,
            "typed": opts.typed,
            "skipped_jobs": len(skipped_jobs),
            "migration_delay_s": migration_delay,
            "queue": opts.queue,
            "estimate_factor": opts.estimate_factor,
            "cycle_interval_s": cycle_interval,
            "watch_s": watch if cycle_interval else None,
            "slack": slack,
            "migrations_per_hour": hourly,
            "migrations_per_hour_setting": opts.budget,
            "migrations_burst": per_burst(opts.burst, hourly),
            "migrations_burst_setting": opts.burst,
            "migratable": opts.migratable,
            "managed": opts.managed,
            "seed": seed,
            "perturb": opts.perturb,
            "skipped_rows": len(trace.skipped),
            "instance_mapping": dict(sorted(rules.items())),
        }
        for r in results
    ]
    if output:
        _write_output(Path(output), rows, results, jobs, cluster_nodes)
    if as_json:
        emit_json(rows)
    else:
        _table(rows, trace.skipped, skipped_jobs)


class _Settings(NamedTuple):
    """The options' values as the run uses them, read and checked before anything runs."""

    queue: str
    perturb: int | None
    estimate_factor: float
    migratable: float | None
    managed: float
    typed: float | None
    layout: object  # a Layout, or None
    budget: int | str
    burst: int | str
    policies: list[str]
    node_groups: tuple[list[tuple[int, int]] | None, int]


def _settings(params: dict) -> _Settings:
    """Every option value the command reads itself, checked (a bad one: UserError naming it). A sweep checks each
    task's command line with this too, so that none of them fails on a value after the others have run."""
    from ..engine.policies.base import policy_names
    from ..engine.rate_limit import parse_burst, parse_setting
    from ..sim.synthetic import MAX_JOBS

    if params["trace_path"] is not None and params["synthetic"]:
        raise UserError("give --trace or --synthetic, not both")
    if params["trace_path"] == "":
        raise UserError("--trace '' names no file", hint="give a trace file, or leave --trace out for a synthetic "
                                                         "workload")
    for name, flag in _TEXT_OPTIONS:
        refuse_empty(flag, params[name])
    if params["cluster"] is not None and params["trace_path"] is None:
        raise UserError(f"--cluster {params['cluster']} selects the rows of a trace; a synthetic workload has no "
                        "clusters", hint="give --trace FILE with it, or leave --cluster out")
    if params["trace_path"] is None and (params["limit"] or 0) > MAX_JOBS:
        raise UserError(f"--limit {params['limit']:,}: a synthetic workload has at most {MAX_JOBS:,} jobs")
    typed = None if params["typed"] is None else _fraction("--typed", params["typed"])
    layout = _layout(params["layout_path"], params["nodes"], typed)
    migratable = params["migratable"]
    return _Settings(
        queue=_queue(params["queue"], params["backfill"]),
        perturb=_whole("--perturb", params["perturb"]),
        estimate_factor=_number("--estimate-factor", params["estimate_factor"], positive=True),
        migratable=None if migratable is None else _fraction("--migratable", migratable),
        managed=_fraction("--managed", params["managed"]),
        typed=typed,
        layout=layout,
        budget=_rate("--migrations-per-hour", params["migrations_per_hour"], DEFAULT_BUDGET, parse_setting),
        burst=_rate("--migrations-burst", params["migrations_burst"], DEFAULT_BURST, parse_burst),
        policies=_policies(params["policies"], policy_names()),
        node_groups=(_node_groups(params["node_spec"], params["nodes"]) if layout is None
                     else (None, max(g.gpus for g in layout.groups))))


def _given(name: str) -> bool:
    """Whether option ``name`` was on the command line (not its default)."""
    from click.core import ParameterSource

    return click.get_current_context().get_parameter_source(name) is not ParameterSource.DEFAULT


def _layout(path: str | None, nodes: int | None, typed: float | None):
    """The --layout file read, or None; what it excludes is one clear error."""
    from ..layout import LayoutError, load_layout

    if path is None:
        if typed is not None:
            raise UserError("--typed needs --layout: the GPU types come from the layout's nodes")
        return None
    if nodes is not None:
        raise UserError("--layout cannot be combined with --nodes", hint="the layout gives the nodes; --eta scales it")
    if _given("node_spec"):
        raise UserError("--layout cannot be combined with --gpus-per-node", hint="the layout gives every node's GPUs")
    try:
        layout = load_layout(path)
    except LayoutError as err:
        raise UserError(str(err)) from None
    if not any(g.gpus for g in layout.groups):
        raise UserError(f"{path}: the layout has no node with GPUs to simulate")
    return layout


def _on_layout(layout, jobs, records, eta: float | None, typed: float | None, seed: int):
    """(jobs that can run, with their eligible nodes; the nodes; why the others cannot; how the layout was scaled)."""
    from ..sim import mixed

    cluster = mixed.from_layout(layout)
    if eta is not None:  # which jobs name no type decides the size: they must fit anywhere
        untyped, _ = mixed.restrict(jobs, records, cluster, typed, seed)
        cluster = mixed.from_layout(layout, untyped, eta)
    kept, skipped = mixed.restrict(jobs, records, cluster, typed, seed)
    return kept, cluster.nodes, skipped, mixed.scale_note(cluster) if eta is not None else ""


def _constrained(jobs, records, nodes, seed: int):
    """Without a layout, jobs whose trace names a GPU type or constraint: no node has one, so they are skipped."""
    from ..sim import mixed

    if not any(r.gpu_type or r.constraint for r in records):
        return jobs, []
    return mixed.restrict(jobs, records, mixed.SimCluster(tuple(nodes), {n.name: frozenset() for n in nodes}),
                          None, seed)


def _queue(queue: str | None, backfill: bool) -> str:
    from ..engine.disciplines import QUEUES

    if queue is None:
        return DEFAULT_QUEUE
    if queue not in QUEUES:
        raise UserError(f"unknown --queue {queue!r}: choose {' or '.join(QUEUES)}")
    if backfill and queue != "backfill":
        raise UserError(f"--backfill contradicts --queue {queue}")
    return queue


def _whole(option: str, text: str | None) -> int | None:
    if text is None:
        return None
    try:
        return int(text)
    except ValueError:
        # one line naming it (issue 32): the seed's form needs no hint beyond the message
        raise UserError(f"bad {option} {text!r}: not a whole number such as 1") from None


def _number(option: str, text: str, *, positive: bool = False) -> float:
    try:
        value = float(text)
    except ValueError:
        raise UserError(f"{option} {text!r} is not a number") from None
    if value != value or value in (float("inf"), float("-inf")) or (positive and value <= 0):
        raise UserError(f"{option} {text!r} must be a finite number{' > 0' if positive else ''}")
    return value


def _fraction(option: str, text: str) -> float:
    value = _number(option, text)
    if not 0 <= value <= 1:
        raise UserError(f"{option} {text!r} is outside [0, 1]: give a fraction such as 0.5")
    return value


def _rate(option: str, text: str | None, default: int | str, parse) -> int | str:
    """A rate limit option as ``parse`` (engine/rate_limit.py's parser of it) reads it; ``default`` if not given."""
    if text is None:
        return default
    try:
        return parse(text)
    except ValueError as err:
        raise UserError(f"{option} {text!r} is {err}") from None


def _policies(text: str | None, known: list[str]) -> list[str]:
    if not text:
        return known
    chosen = [p.strip() for p in text.split(",") if p.strip()]
    unknown = [p for p in chosen if p not in known]
    if unknown or not chosen:
        raise UserError(f"unknown policy {', '.join(unknown) or repr(text)}", hint=f"choose from: {', '.join(known)}")
    return list(dict.fromkeys(chosen))


def _node_groups(spec: str, nodes: int | None) -> tuple[list[tuple[int, int]] | None, int]:
    """(explicit node groups or None when N is still to be chosen, G used to map GPU counts)."""
    from ..sim.sizing import parse_mix

    if ":" in spec:
        if nodes is not None:
            raise UserError("--nodes cannot be combined with a node mix", hint="the mix 8:60,4:4 already counts nodes")
        try:
            groups = parse_mix(spec)
        except ValueError as err:
            raise UserError(str(err)) from None
        return groups, max(g for g, _ in groups)
    try:
        gpus = int(spec)
    except ValueError:
        raise UserError(f"bad --gpus-per-node {spec!r}", hint="give a number like 8 or a mix like 8:60,4:4") from None
    if not 1 <= gpus <= MAX_NODE_GPUS:
        raise UserError(f"bad --gpus-per-node {spec!r}: must be 1 to {MAX_NODE_GPUS}")
    return None, gpus


def _empty_hint(trace, window, cluster) -> str | None:
    if trace.skipped:
        return f"all {len(trace.skipped)} rows were malformed; first: {trace.skipped[0]}"
    if window or cluster:
        return "no job matched --window / --cluster"
    return "the trace holds no job rows"


def _run(jobs, configs, show_progress: bool):
    from ..sim.runner import run_policies

    err = console(stderr=True)
    if not (show_progress and err.is_terminal):
        return run_policies(jobs, configs)
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    total = 2 * len(jobs)
    with Progress(TextColumn("{task.description:<16}"), BarColumn(), TextColumn("{task.percentage:>5.1f}%"),
                  TimeElapsedColumn(), console=err, transient=True) as bar:
        tasks = {c.policy: bar.add_task(c.policy, total=total) for c in configs}
        return run_policies(jobs, configs, lambda policy, done: bar.update(tasks[policy], completed=done))


#: the columns of ``--output``'s jobs-<policy>.csv: one row per job, times in seconds from the trace's start
JOB_COLUMNS = ("job", "class", "instances", "gpus_per_instance", "migratable", "submit_s", "start_s", "end_s",
               "wait_s")


def _write_output(out: Path, rows: list[dict], results, jobs, cluster_nodes) -> None:
    import csv

    from ..sim.metrics import Timeline, wait_class
    from ..sim.plot import plot_comparison

    nodes, gpus, largest = len(cluster_nodes), sum(n.gpus for n in cluster_nodes), max(n.gpus for n in cluster_nodes)
    try:
        out.mkdir(parents=True, exist_ok=True)
        for r in results:
            with open(out / f"timeline-{r.policy}.csv", "w", newline="") as fh:
                writer = csv.writer(fh)
                writer.writerow((*Timeline.COLUMNS, "sif"))
                for row in r.timeline.rows():
                    writer.writerow((*row[:-1], int(row[-1]), (row[4] - row[5]) / nodes))
            with open(out / f"jobs-{r.policy}.csv", "w", newline="") as fh:  # where each job's wait went
                writer = csv.writer(fh)
                writer.writerow(JOB_COLUMNS)
                for sj in jobs:
                    job, start = sj.job, r.started[sj.job.id]
                    writer.writerow((job.id, wait_class(job.gpus, largest), job.instances, job.gpus,
                                     int(job.migratable), sj.submit, start, r.ended[job.id], start - sj.submit))
        (out / "summary.json").write_text(json.dumps(rows, indent=2) + "\n")
        plot_comparison(results, nodes, gpus, out / "comparison.png")
    except OSError as err:
        raise UserError(f"cannot write to {out}: {err}") from None


def _table(rows: list[dict], skipped, skipped_jobs: list[str]) -> None:
    from rich.table import Table

    first = rows[0]
    shape = f"of {first['layout']}" if first["layout"] else f"x {first['gpus_per_node']} GPUs"
    table = Table(title=f"{first['trace']}: {first['jobs']} jobs on {first['nodes']} nodes {shape}")
    columns = [
        ("policy", "policy", str),
        ("AFR", "afr", "{:.4f}".format),
        ("max SIF", "max_sif", "{:.4f}".format),
        (f"SIF<={2 * max(1, len(first['groups']))}/N", "sif_bound_frac", "{:.1%}".format),
        ("WCC", "wcc_frac", "{:.1%}".format),
        ("AJCT s", "ajct_s", "{:,.0f}".format),
        ("AGU", "agu", "{:.4f}".format),
        ("mean wait s", "mean_wait_s", "{:,.0f}".format),
        ("p99 wait s", "p99_wait_s", "{:,.0f}".format),
        ("wait s: 1 / 2-4 / 5-7 / whole-node", "mean_wait_by_class_s", _class_waits),
        ("partial nodes", "mean_partial_nodes", "{:.2f}".format),
        ("migrations", "migrations", "{:,}".format),
        ("restart GPU-h", "restart_gpu_h", "{:,.1f}".format),
        ("migrations per whole-node job", "migrations_per_whole_node_job", lambda v: "-" if v is None else f"{v:.2f}"),
        ("wall s", "wall_s", "{:.1f}".format),
    ]
    for title, _, _ in columns:
        table.add_column(title, justify="left" if title == "policy" else "right")
    for row in rows:
        table.add_row(*(fmt(row[key]) for _, key, fmt in columns))
    out = console()
    if not out.is_terminal:
        out.width = 200  # a pipe or file gets the whole table, not an 80-column squeeze
    out.print(table)
    window = "the time the queue was non-empty" if first["averaged_over"] == "queued" else "the whole run"
    budget, setting = first["migrations_per_hour"], first["migrations_per_hour_setting"]
    migratable = "as in the trace" if first["migratable"] is None else f"{first['migratable']:g}"
    notes = [
        f"AFR, AGU, SIF<={2 * max(1, len(first['groups']))}/N and WCC averaged over {window}",
        f"queue {first['queue']}, estimates x{first['estimate_factor']:g}, "
        f"{'unlimited' if budget is None else budget} migrations per hour"
        f"{f' ({setting})' if setting == 'per-node' else ''}{_burst_note(first)}, migratable {migratable}, "
        f"managed {first['managed']:g}",
    ]
    if first["perturb"] is not None:
        notes.append(f"same-instant ties broken in a random order (--perturb {first['perturb']})")
    mapping = {k: v for k, v in first["instance_mapping"].items() if k not in ("single", "whole_nodes")}
    if mapping:
        notes.append("GPU counts reshaped: " + ", ".join(f"{v} by {k}" for k, v in mapping.items()))
    if skipped:
        notes.append(f"{len(skipped)} malformed row(s) skipped, first: {skipped[0]}")
    if skipped_jobs:
        notes.append(f"{len(skipped_jobs)} job(s) no eligible nodes could hold skipped, first: {skipped_jobs[0]}")
    if first["layout"]:
        typed = f", typed {first['typed']:g}" if first["typed"] else ""
        scaled = f", scaled to eta {first['eta']:g}: {first['layout_scaled']}" if first["layout_scaled"] else ""
        notes.append(f"layout {first['layout']}{scaled}{typed}")
    if len(first["groups"]) > 1:
        for row in rows:
            notes.append(f"{row['policy']}: mean partial nodes per group: " + ", ".join(
                f"{label} {value:.2f} of {first['groups'][label]}" for label, value in row["mean_partial_by_group"].items()))
    for note in notes:
        console(stderr=True).print(note)


def _class_waits(by_class: dict[str, float | None]) -> str:
    """Mean waits of the job classes (metrics.CLASSES order), "-" for a class without jobs."""
    return " / ".join("-" if w is None else f"{w:,.0f}" for w in by_class.values())


def _burst_note(row: dict) -> str:
    """", at most B in any 5 minutes (10%)" when the run capped bursts; nothing under the default."""
    burst, setting = row["migrations_burst"], row["migrations_burst_setting"]
    if burst is None:
        return ""
    return f", at most {burst} in any 5 minutes" + (f" ({setting})" if setting != burst else "")


#: the options whose text the command reads as it is (an empty one would pass for the option left out)
_TEXT_OPTIONS = (("synthetic", "--synthetic"), ("policies", "--policy"), ("layout_path", "--layout"),
                 ("window", "--window"), ("cluster", "--cluster"), ("output", "--output"))
#: the options a sweep reads itself
_SWEEP_OPTIONS = frozenset({"sweep_file", "sbatch", "as_json"})


def _alone_with_sweep(ctx: click.Context) -> None:
    """A sweep's runs take their options from its file: another option given beside --sweep would be ignored."""
    from click.core import ParameterSource

    given = [p.opts[0] for p in ctx.command.params
             if p.name not in _SWEEP_OPTIONS and ctx.get_parameter_source(p.name) is ParameterSource.COMMANDLINE]
    if given:
        raise UserError(f"{', '.join(given)} with --sweep: a sweep's runs take their options from its file",
                        hint="put them in the sweep file (a window's trace, window, limit and cluster; any other in "
                             "options = [...])")
    if ctx.params["sweep_file"] == "":
        raise UserError("--sweep '' names no file", hint="give a sweep file (docs/simulator.md \"Sweeps\")")


def _sweep(path: str | None, sbatch: bool, as_json: bool) -> None:
    """--sweep: the grid in local processes (with a progress bar), or as a Slurm array job with --sbatch."""
    import sys

    from ..engine.policies.base import policy_names
    from ..sim import sweep
    from ..slurm.cli_backend import run_process
    from ..slurm.errors import SlurmError

    if path is None:
        raise UserError("--sbatch needs --sweep SWEEP.toml")
    try:
        plan = sweep.load(path, policy_names())
        _check_tasks(path, plan)
        if sbatch:
            array_id, collect_id = sweep.submit(plan, run_process)
            click.echo(f"submitted array job {array_id} ({len(plan.tasks)} tasks) and collect job {collect_id}; "
                       f"results in {plan.output}")
            return
    except (sweep.SweepError, SlurmError) as err:
        raise UserError(str(err)) from None
    err = console(stderr=True)
    if err.is_terminal:
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeElapsedColumn

        with Progress(BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(), console=err, transient=True) as bar:
            task = bar.add_task("sweep", total=len(plan.tasks))
            sweep.run_local(plan, simulate_in_process, on_done=lambda _: bar.advance(task))
    else:
        sweep.run_local(plan, simulate_in_process)
    collected = sweep.collect(plan)
    table = sweep.write_results(plan, collected)
    if as_json:
        emit_json(collected.rows)
    else:
        click.echo(table, nl=False)
    code = sweep.report_failures(plan, collected)
    if code:
        sys.exit(code)


def _check_tasks(path: str, plan) -> None:
    """An option of 'options' this command would refuse in a task (unknown, or a bad value) fails the sweep now, in
    one line, before any task runs. The rest of a task's command line the sweep built from keys it has checked."""
    for task in plan.tasks:
        try:
            with command.make_context("compass simulate", list(task.argv)) as ctx:
                _settings(ctx.params)
        except click.UsageError as exc:
            raise UserError(f"{path}: 'options': {exc.format_message()}") from None
        except UserError as exc:
            raise UserError(f"{path}: 'options': {exc.format_message()}", hint=exc.hint) from None


def simulate_in_process(argv: tuple[str, ...]) -> tuple[int, str, str]:
    """``compass simulate ARGV`` in this process: (exit code, stdout, stderr), as the command line would give."""
    import io
    from contextlib import redirect_stderr, redirect_stdout

    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        try:
            command.main(list(argv), prog_name="compass simulate", standalone_mode=False)
            code = 0
        except click.ClickException as exc:
            exc.show()
            code = exc.exit_code
        except Exception as exc:  # one task's crash fails that task, not the sweep
            click.echo(f"compass: error: {type(exc).__name__}: {exc}", err=True)
            code = 1
    return code, out.getvalue(), err.getvalue()
