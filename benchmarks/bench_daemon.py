"""One daemon cycle, reading and parsing Slurm's output included, on a 4,096-node, 20,000-job cluster.

    .venv/bin/python benchmarks/bench_daemon.py [--nodes 4096] [--jobs 20000] [--policy compass] [--repeat 5]
                                                [--read json|narrow]

Builds a synthetic Slurm state (8-GPU nodes, a GFS-like mix of 1/2/4/8-GPU and
2-node jobs, ~97% of GPUs busy where the ``--history`` policy placed them, the
rest of the jobs pending and managed; time limits of 1 h to 3 days, so the daemon's
backfill plans reservations with them) and renders it as Slurm 22.05 prints it:
``sinfo --json`` and ``squeue --json`` (every field of a recorded dev-cluster
document, indented like Slurm's), ``scontrol show partition|reservation
--oneliner``; with ``--read narrow`` the jobs are read as the CLI backend does
from 24.11 on: the narrow ``squeue --Format`` lines of the same jobs, and ``squeue
--json --jobs=..`` of the jobs whose line changed (each job's JSON text rendered
beforehand, so answering costs the daemon nothing Slurm would not). The daemon runs
on the real CLI backend whose runner answers with those texts (scontrol commands are accepted, not run; no decision log), so a
cycle includes reading and parsing Slurm's output. Reports the cold cycle (adopt
every running job: a daemon restart, once) and the median steady cycle (each time
1% of the running jobs ended and as many new ones queued), and of the steady
cycle the part spent in the cycle's one read of Slurm (``read_state``). Targets (issue 12): steady <= 0.5 s at
4,096 nodes / 20,000 jobs, <= 1 s at 16,384 / 100,000.
"""

from __future__ import annotations

import argparse
import json
import logging
import random
import statistics
import time
from dataclasses import replace
from pathlib import Path

from compass_slurm.config import Config
from compass_slurm.engine.model import Job, Node
from compass_slurm.engine.policies.base import make_policy
from compass_slurm.service.daemon import Daemon
from compass_slurm.slurm.cli_backend import CliBackend
from compass_slurm.slurm.hostlist import compress
from compass_slurm.slurm.state import SlurmJob, SlurmNode, SlurmPartition, SlurmState

RECORDED = Path(__file__).resolve().parents[1] / "tests" / "data" / "slurm" / "mixed-16x8"
TARGETS_S = {(4096, 20_000): 0.5, (16384, 100_000): 1.0}
GPUS = 8
#: (GPUs in all, nodes, weight): mostly 1-GPU jobs, some FF sizes, whole nodes and 2-node jobs
MIX = ((1, 1, 60), (2, 1, 10), (4, 1, 8), (3, 1, 1), (8, 1, 15), (16, 2, 6))
MARKERS = ("", "compass", "compass:migratable")
#: time limits (the backfill's run-time estimates), as sites set them
LIMITS_S = (3600, 4 * 3600, 24 * 3600, 72 * 3600)


def build(nodes: int, jobs: int, busy: float, history: str, seed: int) -> SlurmState:
    """Running jobs where policy ``history`` put them (the cluster the daemon has been running), the rest pending."""
    rng = random.Random(seed)
    limits = random.Random(f"limits:{seed}")  # its own draws: the same layout as without limits
    names = [f"gpu{i:04d}" for i in range(1, nodes + 1)]
    policy = make_policy(history, [Node(n, GPUS) for n in names])
    target = busy * nodes * GPUS
    used, out = 0, []
    now = time.time()
    sizes, weights = [m[:2] for m in MIX], [m[2] for m in MIX]
    for k in range(jobs):
        gpus, count = rng.choices(sizes, weights)[0]
        job_id, user, comment = str(1000 + k), f"u{k % 50}", rng.choice(MARKERS)
        per = gpus // count
        limit = limits.choice(LIMITS_S)
        if used + gpus <= target:
            job = Job(job_id, count, per, distinct_nodes=count > 1 and per < GPUS)
            decision = policy.place(job)
            if decision is not None:
                policy.compact()
                used += gpus
                alloc = decision.gpus_per_node()
                out.append(SlurmJob(job_id, user, "RUNNING", "gpu", nodes=tuple(alloc), gpus_alloc=alloc,
                                    num_nodes=count, gpus_per_node=per, comment=comment, time_limit_s=limit,
                                    start_time=int(now - limits.uniform(0, limit))))
                continue
        out.append(SlurmJob(job_id, user, "PENDING", "gpu", num_nodes=count,
                            gpus_per_node=per if count > 1 else None, gpus_per_job=None if count > 1 else gpus,
                            comment=comment or "compass", reason="BeginTime", priority=rng.randint(1, 10_000),
                            submit_time=k, time_limit_s=limit))
    # Compact moved some instances after their job was placed: report where they are now.
    where = {v.name: v for v in policy.view()}
    out = [_moved(j, where) if j.running else j for j in out]
    node_objs = tuple(SlurmNode(n, "mixed" if where[n].used else "idle", frozenset(), ("gpu",), GPUS,
                                where[n].used, None, 128, 0, 1_024_000, 0) for n in names)
    return SlurmState(node_objs, tuple(out), (SlurmPartition("gpu", tuple(names)),), (), "22.05.8", time.time())


def _moved(job: SlurmJob, where: dict) -> SlurmJob:
    alloc: dict[str, int] = {}
    for view in where.values():
        for placed in view.instances:
            if placed.job == job.id:
                alloc[view.name] = alloc.get(view.name, 0) + placed.gpus
    return replace(job, nodes=tuple(alloc), gpus_alloc=alloc)


def churn(state: SlurmState, share: float, seed: int) -> SlurmState:
    """``share`` of the running jobs ended; as many new managed 1-GPU jobs queued."""
    rng = random.Random(seed)
    running = [j for j in state.jobs if j.running]
    ended = {j.id for j in rng.sample(running, int(len(running) * share))}
    base = max(int(j.id) for j in state.jobs) + 1
    new = tuple(SlurmJob(str(base + i), "u0", "PENDING", "gpu", gpus_per_job=rng.choice((1, 2, 4, 8)),
                         comment="compass", reason="BeginTime", priority=5_000,
                         time_limit_s=random.Random(f"limits:{seed}:{i}").choice(LIMITS_S))
                for i in range(len(ended)))
    return replace(state, jobs=tuple(j for j in state.jobs if j.id not in ended) + new)


def render(state: SlurmState) -> dict[str, str]:
    """What Slurm 22.05 prints for ``state``, by command line."""
    return _render(state)[0]


def _render(state: SlurmState) -> tuple[dict[str, str], list[dict]]:
    """``render``'s texts, and squeue --json's job entries."""
    sinfo = json.loads((RECORDED / "sinfo.json").read_text())
    squeue = json.loads((RECORDED / "squeue.json").read_text())
    node_template, job_template = sinfo["nodes"][0], squeue["jobs"][0]
    sinfo["nodes"] = [{**node_template, "name": n.name, "hostname": n.name, "state": n.state, "state_flags": [],
                       "partitions": list(n.partitions), "gres": f"gpu:{n.gpus}",
                       "gres_used": f"gpu:{n.gpus_used}(IDX:0-{n.gpus_used - 1})" if n.gpus_used else "gpu:0",
                       "cpus": n.cpus, "alloc_cpus": n.cpus_alloc, "real_memory": n.memory_mb,
                       "alloc_memory": n.memory_alloc_mb, "reason": n.reason} for n in state.nodes]
    jobs = []
    for j in state.jobs:
        nodes = sorted(j.gpus_alloc)
        jobs.append({**job_template, "job_id": int(j.id), "user_name": j.user, "job_state": j.state,
                     "partition": j.partition, "nodes": compress(nodes) if nodes else "",
                     "gres_detail": [f"gpu:{j.gpus_alloc[n]}(IDX:0-{j.gpus_alloc[n] - 1})" for n in nodes],
                     "node_count": j.num_nodes, "tasks": j.tasks, "cpus": j.cpus,
                     "tres_per_node": f"gres:gpu:{j.gpus_per_node}" if j.gpus_per_node else "",
                     "tres_per_job": f"gres:gpu:{j.gpus_per_job}" if j.gpus_per_job else "",
                     "comment": j.comment, "state_reason": j.reason or "None", "priority": j.priority,
                     "submit_time": j.submit_time, "required_nodes": "", "excluded_nodes": "",
                     "time_limit": None if j.time_limit_s is None else j.time_limit_s // 60,
                     "start_time": j.start_time})
    squeue["jobs"] = jobs
    partitions = "\n".join(f"PartitionName={p.name} AllowGroups=ALL Default=YES Nodes={compress(p.nodes)} State=UP"
                           f" TotalNodes={len(p.nodes)}" for p in state.partitions) + "\n"
    return {"sinfo --json": json.dumps(sinfo, indent=2), "squeue --json": json.dumps(squeue, indent=2),
            "scontrol show partition --oneliner": partitions,
            "scontrol show reservation --oneliner": "No reservations in the system\n",
            "scontrol --version": "slurm-wlm 22.05.8\n"}, jobs


def narrow_command() -> str:
    from compass_slurm.slurm import parse_narrow  # imported only for --read narrow: --read json runs on older code

    return " ".join(parse_narrow.argv(exclusive=False))


def _when(t: int) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(t)) if t else "N/A"


def narrow_line(job: dict) -> str:
    """The narrow read's line for one of squeue --json's job entries, as 24.11 prints it."""
    limit = job["time_limit"]
    limit = "UNLIMITED" if limit is None else f"{limit // 1440}-{limit // 60 % 24:02d}:{limit % 60:02d}:00"
    fields = [job["job_id"], job["job_state"], job["user_name"], job["user_id"], job["partition"], job["nodes"],
              job["node_count"], job["cpus"], job["tasks"], job["tres_per_node"] or "N/A",
              job["tres_per_job"] or "N/A", job["tres_per_task"] or "N/A", f"{job['memory_per_cpu']}M", "N/A", "OK",
              job["required_nodes"], job["excluded_nodes"], job["state_reason"], "(null)", job["priority"], limit,
              _when(job["start_time"]), _when(job["submit_time"]), _when(job["eligible_time"]), job["job_id"], "N/A",
              job["comment"] or "(null)", job["job_id"]]
    return "|".join(map(str, fields)) + "|"


class Narrow:
    """Renders the narrow read's commands for one state: its lines, and squeue --json of any of its jobs."""

    def __init__(self) -> None:
        self.head, self.tail = "", ""
        self.texts: dict[str, str] = {}  # job id -> its JSON entry's text, kept while the entry is unchanged
        self.entries: dict[str, dict] = {}

    def render(self, texts: dict[str, str], jobs: list[dict]) -> dict[str, str]:
        doc = json.loads(texts["squeue --json"][:2000].split('"jobs"')[0] + '"jobs": []}')
        self.head, self.tail = json.dumps(doc, indent=2)[:-2].rsplit("[", 1)[0] + "[\n", "\n  ]\n}"
        entries = {str(job["job_id"]): job for job in jobs}
        self.texts = {i: self.texts[i] if self.entries.get(i) == job else json.dumps(job, indent=2)
                      for i, job in entries.items()}
        self.entries = entries
        return {**texts, narrow_command(): "\n".join(map(narrow_line, jobs)) + "\n"}

    def jobs_json(self, ids: list[str]) -> str:
        return self.head + ",\n".join(self.texts[i] for i in ids if i in self.texts) + self.tail


class Recorded:
    """A runner for CliBackend: Slurm's output for reads, success for every scontrol change."""

    def __init__(self, texts: dict[str, str], narrow: Narrow | None = None) -> None:
        self.texts = texts
        self.narrow = narrow

    def __call__(self, argv: list[str], timeout: float) -> tuple[int, str, str]:
        key = " ".join(argv)
        if key in self.texts:
            return 0, self.texts[key], ""
        if self.narrow is not None and argv[:2] == ["squeue", "--json"] and argv[2].startswith("--jobs="):
            return 0, self.narrow.jobs_json(argv[2].removeprefix("--jobs=").split(",")), ""
        if argv[0] == "squeue":  # a requeued job's state, asked while migrating
            return 0, "PENDING\n", ""
        return 0, "", ""


def timed(daemon: Daemon) -> tuple[float, int]:
    """CPU seconds of one cycle (the machine is shared: wall time would count the others) and its decisions."""
    started = time.process_time()
    report = daemon.cycle()
    assert report.skipped is None, report.skipped
    return time.process_time() - started, len(report.decisions)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=4096)
    parser.add_argument("--jobs", type=int, default=20_000)
    parser.add_argument("--busy", type=float, default=0.97, help="share of GPUs running jobs")
    parser.add_argument("--policy", default="compass")
    parser.add_argument("--history", default="compass",
                        help="policy that placed the running jobs (first-fit: a cluster new to the daemon)")
    parser.add_argument("--repeat", type=int, default=5, help="steady cycles to time (the median is reported)")
    parser.add_argument("--read", choices=("json", "narrow"), default="json",
                        help="jobs by squeue --json, or by the narrow read (the CLI backend's from Slurm 24.11)")
    parser.add_argument("--migrations-per-hour", help="the daemon's migration budget (default: the config's)")
    args = parser.parse_args()

    state = build(args.nodes, args.jobs, args.busy, args.history, seed=1)
    narrow = Narrow() if args.read == "narrow" else None

    def texts(state: SlurmState) -> dict[str, str]:
        return render(state) if narrow is None else narrow.render(*_render(state))

    runner = Recorded(texts(state), narrow)
    reads = {"sinfo --json", narrow_command() if narrow else "squeue --json", "scontrol show partition --oneliner",
             "scontrol show reservation --oneliner"}
    size_mb = sum(len(text) for key, text in runner.texts.items() if key in reads) / 1e6
    # The runner never carries out the migrations the daemon asks for, so it reports mismatches: expected here.
    logging.getLogger("compass.daemon").setLevel(logging.CRITICAL)
    backend = CliBackend(runner=runner, **({"narrow": True} if narrow else {}))
    reads_s: list[float] = []
    read_state = backend.read_state

    def timed_read() -> SlurmState:
        started = time.process_time()
        try:
            return read_state()
        finally:
            reads_s.append(time.process_time() - started)

    backend.read_state = timed_read  # type: ignore[method-assign]  # the cycle's own read, timed
    # A clock that advances one second per cycle, so no run re-plans a decision for being old
    # (Slurm never starts the jobs here) however long the machine takes: every run does the same work.
    budget = {} if args.migrations_per_hour is None else {"migrations_per_hour": (
        int(args.migrations_per_hour) if args.migrations_per_hour.isdigit() else args.migrations_per_hour)}
    config = Config(policy=args.policy, anchors="", **budget)
    now = [time.time()]
    daemon = Daemon(config, backend, None, clock=lambda: now[0])
    cold, cold_n = timed(daemon)
    steady_runs = []
    reads_s.clear()
    for i in range(args.repeat):
        now[0] += 1.0
        runner.texts = texts(churn(state, 0.01, seed=2 + i))
        steady_runs.append(timed(daemon))
    steady, steady_n = sorted(steady_runs)[len(steady_runs) // 2]
    read = statistics.median(reads_s)
    running = sum(1 for j in state.jobs if j.running)
    target = TARGETS_S.get((args.nodes, args.jobs))
    verdict = "" if target is None else f" | target <= {target} s: {'met' if steady <= target else 'MISSED'}"
    print(f"| daemon cycle, {args.nodes:,} nodes, {len(state.jobs):,} jobs ({running:,} running), {args.policy}, "
          f"history {args.history}, jobs read by {args.read}, migrations_per_hour {config.migrations_per_hour}, "
          f"Slurm output {size_mb:.1f} MB read per cycle "
          f"| cold (restart, adopts all) {cold:.3f} s ({cold_n} placed) "
          f"| steady median of {args.repeat} {steady:.3f} s ({steady_n} placed) "
          f"| of which reading and parsing {read:.3f} s{verdict} | CPU time |")


if __name__ == "__main__":
    main()
