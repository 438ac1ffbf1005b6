"""Issue 9's starvation scenario on two 16-node dev clusters side by side: the daemon's and plain Slurm's.

128 1-GPU fill jobs of 20-120 s fill the cluster, then one ``-N4 --gpus-per-node=8``
job, then a stream of two 1-GPU jobs of 30-60 s per second for five minutes. One
cluster runs them through the wrapper with the compass daemon, the other with plain
sbatch and Slurm's own backfill; both at the same time, on the same schedule.
``scale`` compresses time (the CI version); Slurm time limits are the durations plus
5 s in whole minutes, so they stay at least 1.

Shared by tests/scenarios (compressed) and benchmarks/starvation.py (full).
"""

from __future__ import annotations

import math
import random
import sys
import threading
from dataclasses import dataclass
from pathlib import Path
from statistics import mean

sys.path.insert(0, str(Path(__file__).resolve().parent / "faults"))  # harness.py: the daemon as a process
from harness import DaemonProcess  # noqa: E402
from live_workload import Cluster, LiveJob, Run, cancel_all, replay  # noqa: E402

NODES, GPUS = 16, 8
FILL_S = (20, 120)
BIG_NODES, BIG_S = 4, 60
STREAM_S = (30, 60)
STREAM_PER_S = 2
STREAM_FOR_S = 300
#: the big job comes after the fill jobs' submissions, the stream right after it
BIG_AT, STREAM_AT = 8.0, 10.0
LEASE = 60
#: Slurm kills a job at its limit: the margin covers the job script's own start and end
LIMIT_MARGIN_S = 5


def workload(seed: int = 1, scale: float = 1.0, migratable: float = 0.0) -> list[LiveJob]:
    """The scenario's jobs; ``migratable`` is the seeded share of 1-GPU jobs submitted with --migratable.

    ``scale`` compresses time: durations and gaps between submissions shrink by it, so the load is the same.
    """
    rng = random.Random(seed)

    def seconds(low: int, high: int) -> int:
        return max(1, round(rng.uniform(low, high) / scale))

    def limit(duration: int) -> int:
        return math.ceil((duration + LIMIT_MARGIN_S) / 60)

    jobs = []
    for i in range(NODES * GPUS):
        d = seconds(*FILL_S)
        jobs.append(LiveJob(f"fill{i}", 0.0, d, 1, time_limit_min=limit(d), migratable=rng.random() < migratable))
    big = max(1, round(BIG_S / scale))
    jobs.append(LiveJob("big", BIG_AT / scale, big, GPUS, nodes=BIG_NODES, time_limit_min=limit(big)))
    for i in range(STREAM_FOR_S * STREAM_PER_S):
        d = seconds(*STREAM_S)
        jobs.append(LiveJob(f"stream{i}", (STREAM_AT + i / STREAM_PER_S) / scale, d, 1, time_limit_min=limit(d),
                            migratable=rng.random() < migratable))
    return jobs


@dataclass
class Result:
    daemon: Run
    plain: Run
    decisions: dict[str, int]

    def figures(self) -> dict[str, dict[str, float | int]]:
        return {"daemon": summary(self.daemon), "plain": summary(self.plain)}


def summary(run: Run) -> dict[str, float | int]:
    out = run.outcomes
    stream = [o.wait for n, o in out.items() if n.startswith("stream") and o.wait is not None]
    ones = [o.wait for n, o in out.items() if n != "big" and o.wait is not None]
    start = min((o.job.submit for n, o in out.items() if n.startswith("stream")), default=0.0)
    during = [s for s in run.samples if s[0] >= start]
    return {
        "big_wait_s": out["big"].wait if "big" in out and out["big"].wait is not None else math.nan,
        "stream_mean_wait_s": mean(stream) if stream else math.nan,
        "one_gpu_mean_wait_s": mean(ones) if ones else math.nan,
        "ajct_s": mean(o.jct for o in out.values() if o.jct is not None),
        "max_partial": max((s[1] for s in during), default=0),
        "mean_partial": mean(s[1] for s in during) if during else math.nan,
        "unfinished": len(run.unfinished),
        "fallbacks": sum(o.fallback for o in out.values()),
        "restarts": sum(max(0, o.starts - 1) for o in out.values()),
    }


def side_by_side(daemon_cluster: Cluster, plain_cluster: Cluster, jobs: list[LiveJob], workdir: Path,
                 migrations_per_hour: int = 12, way: str = "wrapper", finish_timeout: float = 600) -> Result:
    """The same jobs on both clusters at once: to the daemon ``way`` (wrapper or marked), and with plain sbatch."""
    for c in (daemon_cluster, plain_cluster):
        cancel_all(c)
        c.idle()
    daemon = DaemonProcess(workdir / "daemon", lease=LEASE, interval=1.0,
                           extra_env={"SLURM_CONF": daemon_cluster.env["SLURM_CONF"],
                                      "COMPASS_MIGRATIONS_PER_HOUR": str(migrations_per_hour),
                                      # Python start-ups of many wrappers at once on 2 cores: no fallbacks
                                      "COMPASS_WRAPPER_TIMEOUT": "5"}).start()
    runs: dict[str, Run] = {}
    errors: list[BaseException] = []

    def go(kind: str, cluster: Cluster, how: str, env) -> None:
        try:
            runs[kind] = replay(cluster, jobs, workdir / kind / "markers", way=how, env=env, lease=LEASE,
                                finish_timeout=finish_timeout)
        except BaseException as err:  # reported by the caller's thread
            errors.append(err)

    try:
        threads = [threading.Thread(target=go, args=("daemon", daemon_cluster, way, dict(daemon.env))),
                   threading.Thread(target=go, args=("plain", plain_cluster, "plain", None))]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        daemon.stop()
        for c in (daemon_cluster, plain_cluster):
            cancel_all(c)
    if errors:
        raise errors[0]
    return Result(runs["daemon"], runs["plain"], decision_rules(daemon.db))


def decision_rules(db: Path) -> dict[str, int]:
    """How many placements each rule made (the decision log's reason)."""
    from compass_slurm.service.store import Store

    counts: dict[str, int] = {}
    with Store.open(f"sqlite:///{db}", create=False) as store:
        for d in store.decisions():
            counts[d.rule] = counts.get(d.rule, 0) + 1
    return counts
