"""What a run is judged by (spec section 5, issue 3): AFR, AJCT, AGU and friends.

The engine samples the cluster after each instant at which events happened; a
sample holds until the next one, so every time average weights a sample by
that gap. AFR (mean SIF), AGU (mean share of GPUs in use), the share of time
with SIF <= 2/N and the share of time WCC holds are averaged over the time the
waiting queue is non-empty, as in the paper. A run whose queue never fills has
no such time; its averages are then taken over the whole run and
``averaged_over`` says ``"all"`` instead of ``"queued"``. ``max_sif`` is over the whole run.
Waits and completion times are per job: wait = start - submit, completion time =
end - submit (so it includes migration pauses); p99 uses numpy's linear
interpolation. Waits per class key jobs by GPUs per instance: ``"1"``, ``"2-4"``,
``"5-7"`` and ``"whole-node"`` (instances of a whole node of the largest size, one
node or many); a class without jobs is null. Bounded slowdown is the mean over jobs
of max(1, completion time / max(run time, 10 s)), run time = end - start.
``migrations_per_hour_max`` is the most migrations in any hour-long sliding window,
``migrations_burst_max`` in any 5-minute one (the burst cap's window, engine/rate_limit.py);
``mean_partial_nodes`` the time-average count of partial nodes (same window as AFR), and
``mean_partial_by_group`` the same per node group (one capacity, one GPU type; ``groups``
names them with their node counts). The price of moving (issue 32): ``restart_gpu_h`` is the GPU-hours
lost to restarts (per migration event, the delay times the moved job's GPUs: a gang restarts together),
``migrations_per_whole_node_job`` the migrations per whole-node job started (KAI's "over-eviction"
measure; null without one), ``cluster_gpus`` the GPUs that AGU is a share of. The bound behind ``sif_bound_frac`` is two partial
nodes beyond Phi* per group: 2K/N on K groups, the paper's 2/N on one (docs/concepts.md).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field

from ..engine.rate_limit import BURST_WINDOW, HOUR
from .workloads import SimJob


@dataclass
class Timeline:
    """Column-wise samples: after the events at ``time[k]``, the state until ``time[k + 1]``."""

    time: list[float] = field(default_factory=list)
    queued: list[int] = field(default_factory=list)
    running: list[int] = field(default_factory=list)
    gpus_used: list[int] = field(default_factory=list)
    partial: list[int] = field(default_factory=list)
    phi_star: list[int] = field(default_factory=list)
    wcc: list[bool] = field(default_factory=list)
    #: partial nodes per node group (ClusterState.groups order); not a CSV column
    group_partial: list[tuple[int, ...]] = field(default_factory=list)

    COLUMNS = ("time", "queued", "running", "gpus_used", "partial", "phi_star", "wcc")

    def __len__(self) -> int:
        return len(self.time)

    def rows(self):
        return zip(*(getattr(self, c) for c in self.COLUMNS))


@dataclass(frozen=True)
class Metrics:
    jobs: int
    afr: float
    ajct_s: float
    agu: float
    max_sif: float
    sif_bound_frac: float
    wcc_frac: float
    mean_wait_s: float
    p99_wait_s: float
    makespan_s: float
    queued_s: float
    averaged_over: str
    migrations: int
    migration_gpu_s: float
    mean_wait_by_class_s: dict[str, float | None]
    p99_wait_by_class_s: dict[str, float | None]
    bounded_slowdown: float
    migrations_per_hour_max: int
    migrations_burst_max: int
    mean_partial_nodes: float
    #: node group label -> its time-average partial nodes; and -> its node count
    mean_partial_by_group: dict[str, float] = field(default_factory=dict)
    groups: dict[str, int] = field(default_factory=dict)
    restart_gpu_h: float = 0.0
    migrations_per_whole_node_job: float | None = None
    cluster_gpus: int = 0

    def as_dict(self) -> dict[str, object]:
        return asdict(self)


#: Wait classes by GPUs per instance (the whole-node class is filled by size == largest node).
CLASSES = ("1", "2-4", "5-7", "whole-node")
BSLD_THRESHOLD_S = 10.0


def wait_class(gpus: int, node_gpus: int) -> str:
    if gpus >= node_gpus:
        return "whole-node"
    return "1" if gpus == 1 else "2-4" if gpus <= 4 else "5-7"


def summarize(
    timeline: Timeline,
    jobs: Sequence[SimJob],
    started: Mapping[str, float],
    ended: Mapping[str, float],
    nodes: int,
    gpus: int,
    node_gpus: int,
    migration_times: Sequence[float] = (),
    migration_gpu_s: float = 0.0,
    groups: Mapping[str, int] | None = None,
) -> Metrics:
    """Metrics of a finished run on ``nodes`` nodes with ``gpus`` GPUs in all (``node_gpus`` the largest node);
    ``groups``: the node groups' labels and sizes, in the order of the timeline's ``group_partial``."""
    import numpy as np

    if not len(timeline) or not ended:
        raise ValueError("nothing was simulated")
    t = np.asarray(timeline.time, dtype=float)
    dt = np.diff(t, append=t[-1])
    sif = (np.asarray(timeline.partial) - np.asarray(timeline.phi_star)) / nodes
    queued = np.asarray(timeline.queued) > 0
    window = "queued" if dt[queued].sum() > 0 else "all"
    weight = dt * queued if window == "queued" else dt
    span = weight.sum()

    def average(values) -> float:
        # a run that lasts no time at all (every job 0 s) averages its one instant
        return float(np.dot(values, weight) / span) if span > 0 else float(np.mean(values))

    done = [sj for sj in jobs if sj.job.id in ended]
    submit = np.asarray([sj.submit for sj in done], dtype=float)
    start = np.asarray([started[sj.job.id] for sj in done], dtype=float)
    end = np.asarray([ended[sj.job.id] for sj in done], dtype=float)
    wait, completion = start - submit, end - submit
    classes = np.asarray([wait_class(sj.job.gpus, node_gpus) for sj in done])
    mean_by, p99_by = {}, {}
    for name in CLASSES:
        w = wait[classes == name]
        mean_by[name] = float(w.mean()) if len(w) else None
        p99_by[name] = float(np.percentile(w, 99)) if len(w) else None
    whole_node_jobs = int((classes == "whole-node").sum())
    bsld = np.maximum(1.0, completion / np.maximum(end - start, BSLD_THRESHOLD_S))
    by_group: dict[str, float] = {}
    if groups and len(timeline.group_partial) == len(timeline):
        per_group = np.asarray(timeline.group_partial, dtype=float).reshape(len(timeline), len(groups))
        by_group = {label: average(per_group[:, k]) for k, label in enumerate(groups)}
    return Metrics(
        jobs=len(done),
        afr=average(sif),
        ajct_s=float(completion.mean()),
        agu=average(np.asarray(timeline.gpus_used) / gpus),
        max_sif=float(sif.max()),
        sif_bound_frac=average(sif <= 2 * max(1, len(groups or ())) / nodes + 1e-12),
        wcc_frac=average(np.asarray(timeline.wcc, dtype=float)),
        mean_wait_s=float(wait.mean()),
        p99_wait_s=float(np.percentile(wait, 99)),
        makespan_s=float(t[-1] - t[0]),
        queued_s=float(dt[queued].sum()),
        averaged_over=window,
        migrations=len(migration_times),
        migration_gpu_s=migration_gpu_s,
        mean_wait_by_class_s=mean_by,
        p99_wait_by_class_s=p99_by,
        bounded_slowdown=float(bsld.mean()),
        migrations_per_hour_max=window_max(migration_times),
        migrations_burst_max=window_max(migration_times, BURST_WINDOW),
        mean_partial_nodes=average(np.asarray(timeline.partial, dtype=float)),
        mean_partial_by_group=by_group,
        groups=dict(groups or {}),
        restart_gpu_h=migration_gpu_s / HOUR,
        migrations_per_whole_node_job=len(migration_times) / whole_node_jobs if whole_node_jobs else None,
        cluster_gpus=gpus,
    )


def window_max(times: Sequence[float], span: float = HOUR) -> int:
    """The most of ``times`` (sorted) in any half-open window (t - span, t], as the rate limit counts them."""
    best, lo = 0, 0
    for hi, t in enumerate(times):
        while times[lo] <= t - span:
            lo += 1
        best = max(best, hi - lo + 1)
    return best
