"""One daemon cycle, reading and parsing Slurm's output included, on a 4,096-node, 20,000-job cluster.

    .venv/bin/python benchmarks/bench_daemon.py [--nodes 4096] [--jobs 20000] [--policy compass] [--repeat 5]
                                                [--read json|lines|narrow] [--history compass|first-fit]
                                                [--migrations-per-hour 12|per-node]
                                                [--migrations-burst N|P%|unlimited] [--recalculate-priorities]
                                                [--in-memory] [--no-spawn] [--db FILE] [--json]

Builds a synthetic Slurm state (8-GPU nodes, a GFS-like mix of 1/2/4/8-GPU and
2-node jobs, ~97% of GPUs busy where the ``--history`` policy placed them, the
rest of the jobs pending and managed; time limits of 1 h to 3 days, so the daemon's
backfill plans reservations with them) and renders it as Slurm 22.05 prints it:
``sinfo --json`` and ``squeue --json`` (every field of a recorded dev-cluster
document, indented like Slurm's), ``scontrol show partition|reservation
--oneliner``; with ``--read lines`` the jobs are read as the CLI backend does before
24.11: ``scontrol show job --details --oneliner``, every field 22.05 prints, run times
and the scheduler's last look moving on with the clock; with ``--read narrow`` as it
does from 24.11 on: the narrow ``squeue --Format`` lines of the same jobs, and ``squeue
--json --jobs=..`` of the jobs whose line changed (each job's JSON text rendered
beforehand, so answering costs the daemon nothing Slurm would not). The daemon runs
on the real CLI backend whose runner prints those texts from a process (``cat`` of a file
written before the cycle) read with the backend's own ``run_process``, so a cycle includes
taking Slurm's output in and parsing it. By default the cycle is a site's: the scontrol
changes start processes as the daemon's do (one ``cat`` of the lines per ``scontrol`` reading
them from its standard input, or one ``true`` per change for a daemon that runs one scontrol
per change), and the decisions are logged to a SQLite file (``--db FILE``, else a temporary
one). ``--in-memory`` hands the texts over without a process and logs nothing, and ``--no-spawn``
runs no process for a change: the ways before 2026-12-03. The runner
keeps the scontrol changes the daemon asks for, and between two cycles the synthetic state goes through them as slurmctld
would (``carry_out``): a requeued job runs on the nodes it was re-pinned to, a pinned
pending job starts there. Then 1% of the running jobs end (their GPUs free in the node
read) and as many new ones queue, and the daemon's clock moves on one interval (with ``--recalculate-priorities`` every
pending job's priority changes too, as when slurmctld recalculates them every
PriorityCalcPeriod: every pending job's record or line is new to the memo). Reports the cold cycle (adopt every
running job: a daemon restart, once) and the median steady cycle, the part of it spent
in the cycle's one read of Slurm (``read_state``), and for every cycle the jobs placed,
migrated and requeued, the requeues of the first minute, and the errors (a mismatch:
a job not running where the daemon decided). Targets (issue 12): steady <= 0.5 s at
4,096 nodes / 20,000 jobs, <= 1 s at 16,384 / 100,000, and at most 5 processes for changes per
steady cycle. ``--json`` prints one object instead: ``steady_s``, ``read_s``, ``cold_s``,
``processes_per_cycle`` (processes started for changes in the median steady cycle),
``changes_per_cycle`` (its scontrol command lines), ``read``, and ``steady_cycles``: each steady cycle's
seconds and changes in turn (the cycles are the same for any code that decides the same, so two codes'
runs compare cycle by cycle, where their medians may be other cycles).
"""

from __future__ import annotations

import argparse
import json
import logging
import random
import shutil
import statistics
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, fields, replace
from pathlib import Path

from compass_slurm.config import Config
from compass_slurm.engine.model import Job, Node
from compass_slurm.engine.policies.base import make_policy
from compass_slurm.service.daemon import Daemon
from compass_slurm.slurm.cli_backend import CliBackend, run_process

try:  # the batch of changes on one scontrol's standard input (older code runs scontrol once per change)
    from compass_slurm.slurm.cli_backend import run_batch
except ImportError:
    run_batch = None
from compass_slurm.slurm.hostlist import compress, expand
from compass_slurm.slurm.state import SlurmJob, SlurmNode, SlurmPartition, SlurmState

RECORDED = Path(__file__).resolve().parents[1] / "tests" / "data" / "slurm" / "mixed-16x8"
TARGETS_S = {(4096, 20_000): 0.5, (16384, 100_000): 1.0}
#: the most processes a steady cycle may start for its changes
PROCESSES_TARGET = 5
GPUS = 8
#: (GPUs in all, nodes, weight): mostly 1-GPU jobs, some FF sizes, whole nodes and 2-node jobs
MIX = ((1, 1, 60), (2, 1, 10), (4, 1, 8), (3, 1, 1), (8, 1, 15), (16, 2, 6))
MARKERS = ("", "compass", "compass:migratable")
#: time limits (the backfill's run-time estimates), as sites set them
LIMITS_S = (3600, 4 * 3600, 24 * 3600, 72 * 3600)
LINES = "scontrol show job --details --oneliner"
#: a requeue-held job's pending reason, with priority 0, as Slurm 22.05 shows it until it is released (read as held:
#: compass_slurm/slurm/values.py; tests/data/slurm/narrow-8x8/squeue.json shows 22.05.8's held jobs at priority 0)
REQUEUE_HELD = "job_requeued_in_held_state"
#: the priority a released job gets back (churn's new jobs have 5,000)
RELEASED_PRIORITY = 5_000


def build(nodes: int, jobs: int, busy: float, history: str, seed: int, now: float | None = None) -> SlurmState:
    """Running jobs where policy ``history`` put them (the cluster the daemon has been running), the rest pending;
    started before ``now`` (default: the time)."""
    now = time.time() if now is None else now
    rng = random.Random(seed)
    limits = random.Random(f"limits:{seed}")  # its own draws: the same layout as without limits
    names = [f"gpu{i:04d}" for i in range(1, nodes + 1)]
    policy = make_policy(history, [Node(n, GPUS) for n in names])
    target = busy * nodes * GPUS
    used, out = 0, []
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
    return SlurmState(node_objs, tuple(out), (SlurmPartition("gpu", tuple(names)),), (), "22.05.8", now)


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
    freed = Counter()
    for job in running:
        if job.id in ended:
            freed.update(job.gpus_alloc)
    nodes = tuple(n if not freed[n.name] else replace(n, state="mixed" if n.gpus_used > freed[n.name] else "idle",
                                                        gpus_used=n.gpus_used - freed[n.name]) for n in state.nodes)
    # the node read shows the ended jobs' GPUs free, as Slurm does
    return replace(state, nodes=nodes, jobs=tuple(j for j in state.jobs if j.id not in ended) + new)


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
                     "submit_time": j.submit_time, "required_nodes": compress(j.required_nodes),
                     "excluded_nodes": "",
                     "time_limit": None if j.time_limit_s is None else j.time_limit_s // 60,
                     "start_time": j.start_time})
    squeue["jobs"] = jobs
    partitions = "\n".join(f"PartitionName={p.name} AllowGroups=ALL Default=YES Nodes={compress(p.nodes)} State=UP"
                           f" TotalNodes={len(p.nodes)}" for p in state.partitions) + "\n"
    return {"sinfo --json": json.dumps(sinfo, indent=2), "squeue --json": json.dumps(squeue, indent=2),
            "scontrol show partition --oneliner": partitions,
            "scontrol show reservation --oneliner": "No reservations in the system\n",
            "scontrol show topology": "",
            "scontrol --version": "slurm-wlm 22.05.8\n"}, jobs


def narrow_command() -> str:
    from compass_slurm.slurm import parse_narrow  # imported only for --read narrow: --read json runs on older code

    return " ".join(parse_narrow.argv((24, 11)))


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
              0, 0, "(null)", job["job_id"], "(null)", job["job_id"], job["comment"] or "(null)", job["job_id"]]
    return "|".join(map(str, fields)) + "|"


def _duration(seconds: int) -> str:
    days, rest = divmod(seconds, 86400)
    clock = f"{rest // 3600:02d}:{rest // 60 % 60:02d}:{rest % 60:02d}"
    return f"{days}-{clock}" if days else clock


def text_line(job: dict, now: float) -> str:
    """scontrol show job --details --oneliner's line for one of squeue --json's job entries, as 22.05 prints it
    (a batch job of ``--mem-per-cpu``, with the time ``now``)."""
    running = job["job_state"] == "RUNNING"
    alloc = [entry.split("(")[0].split(":")[1] for entry in job["gres_detail"]]
    nodes = expand(job["nodes"]) if job["nodes"] else []
    limit = job["time_limit"]
    user = f"{job['user_name']}({job['user_id']})"
    comment = f"Comment={job['comment']}  " if job["comment"] else ""
    details = ""
    if running:
        details = f" JOB_GRES=gpu:{sum(map(int, alloc))} " + " ".join(
            f"  Nodes={node} CPU_IDs=0 Mem={job['memory_per_cpu']} GRES=gpu:{n}(IDX:0-{int(n) - 1})"
            for node, n in zip(nodes, alloc))
    tres = " ".join(f"{key}={job[field]}" for key, field in (("TresPerJob", "tres_per_job"),
                                                               ("TresPerNode", "tres_per_node")) if job[field])
    return (f"JobId={job['job_id']} JobName=wrap UserId={user} GroupId={user} MCS_label=N/A "
            f"Priority={job['priority']} Nice=0 Account=(null) QOS=(null) JobState={job['job_state']} "
            f"Reason={job['state_reason']} Dependency=(null) Requeue=1 Restarts=0 BatchFlag=1 Reboot=0 ExitCode=0:0 "
            f"DerivedExitCode=0:0 RunTime={_duration(int(now) - job['start_time'] if running else 0)} "
            f"TimeLimit={'UNLIMITED' if limit is None else _duration(limit * 60)} TimeMin=N/A "
            f"SubmitTime={_when(job['submit_time'])} EligibleTime={_when(job['eligible_time'])} "
            f"AccrueTime={_when(job['submit_time'])} StartTime={_when(job['start_time']) if running else 'Unknown'} "
            f"EndTime={_when(job['start_time'] + limit * 60) if running and limit else 'Unknown'} Deadline=N/A "
            f"SuspendTime=None SecsPreSuspend=0 LastSchedEval={_when(job['start_time'] if running else int(now))} "
            f"Scheduler=Main Partition={job['partition']} AllocNode:Sid=login1:2325 "
            f"ReqNodeList={job['required_nodes'] or '(null)'} ExcNodeList={job['excluded_nodes'] or '(null)'} "
            f"NodeList={job['nodes'] or '(null)'}{f' BatchHost={nodes[0]}' if running else ''} "
            f"NumNodes={job['node_count']} NumCPUs={job['cpus']} NumTasks={job['tasks']} CPUs/Task=1 "
            f"ReqB:S:C:T=0:0:*:* TRES=cpu={job['cpus']},mem={job['memory_per_cpu']}M,node={job['node_count']},"
            f"billing={job['cpus']} Socks/Node=* NtasksPerN:B:S:C=0:0:*:* CoreSpec=*{details} MinCPUsNode=1 "
            f"MinMemoryCPU={job['memory_per_cpu']}M MinTmpDiskNode=0 Features=(null) DelayBoot=00:00:00 "
            f"OverSubscribe=OK Contiguous=0 Licenses=(null) Network=(null) Command=(null) "
            f"WorkDir=/home/{job['user_name']} {comment}"
            f"StdErr=/dev/null StdIn=/dev/null StdOut=/dev/null Power= {tres} ")


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
    """A runner for CliBackend: Slurm's output for reads, success for every scontrol change (kept in ``changes``).

    A read's text comes from a process, as Slurm's does: written to a file beforehand, it is printed by
    ``cat`` and read with the backend's own ``run_process``, so the daemon pays for taking it in (unless
    ``folder`` is None: then the text is handed over in memory, as before 2026-12-03). With ``spawn``,
    every change run alone runs ``true`` the same way, and a batch of them (``batch``) one ``cat`` of its
    lines on standard input: the daemon's cost of starting its scontrol processes (counted in ``processes``).
    """

    def __init__(self, texts: dict[str, str], narrow: Narrow | None = None, folder: Path | None = None,
                 spawn: bool = False) -> None:
        self.folder = folder
        self.paths: dict[str, str] = {}
        self.texts = texts
        self.narrow = narrow
        self.spawn = spawn
        self.changes: list[list[str]] = []
        self.asked: Counter[str] = Counter()  #: reads by command line
        self.processes = 0  #: processes started for changes

    @property
    def texts(self) -> dict[str, str]:
        return self._texts

    @texts.setter
    def texts(self, texts: dict[str, str]) -> None:
        self._texts = texts
        if self.folder is not None:  # written now, before the cycle is timed, as Slurm prints it
            self.paths = {key: self._write(f"read{at}", text) for at, (key, text) in enumerate(texts.items())}

    def _write(self, name: str, text: str) -> str:
        path = self.folder / name  # type: ignore[operator]
        path.write_text(text)
        return str(path)

    def _answer(self, text: str, path: str | None, timeout: float) -> tuple[int, str, str]:
        """``text`` as from Slurm; ``path``: where it was written beforehand, if it was."""
        if self.folder is None:
            return 0, text, ""
        return run_process(["cat", path or self._write("answer", text)], timeout)

    def __call__(self, argv: list[str], timeout: float) -> tuple[int, str, str]:
        key = " ".join(argv)
        self.asked[key] += 1
        if key in self.texts:
            return self._answer(self.texts[key], self.paths.get(key), timeout)
        if self.narrow is not None and argv[:2] == ["squeue", "--json"] and argv[2].startswith("--jobs="):
            return self._answer(self.narrow.jobs_json(argv[2].removeprefix("--jobs=").split(",")), None, timeout)
        if argv[0] == "squeue":  # a requeued job's state, asked while migrating
            return 0, "PENDING\n", ""
        if argv[0] == "scontrol":
            self.changes.append(argv)
            if self.spawn:
                self.processes += 1
                return run_process(["true"], timeout)
        return 0, "", ""

    def batch(self, argv: list[str], text: str, timeout: float) -> tuple[int | None, str]:
        """A batch of changes: each line kept as a change; with ``spawn``, one process reads them all."""
        self.changes += ([*argv, *line.split(" ")] for line in text.splitlines())
        if self.spawn:
            self.processes += 1
            run_batch(["cat"], text, timeout)
        return 0, ""

    def take(self) -> list[list[str]]:
        changes, self.changes = self.changes, []
        return changes


def carry_out(state: SlurmState, changes: list[list[str]], now: float) -> tuple[SlurmState, int, int]:
    """``state`` once slurmctld has run ``changes`` and scheduled, before the daemon's next read.

    ``requeuehold`` ends a job's run (pending and held, shown as 22.05 shows it: reason
    ``job_requeued_in_held_state``, priority 0, so that the daemon's read sees the hold and releases it),
    ``release`` lifts the hold, an update with ``ReqNodeList=.. StartTime=now`` pins it; a lease
    (``StartTime=now+S``) keeps it waiting. A pinned job starts on its nodes when each has its GPUs free
    (Slurm's scheduler, triggered by the update and again by backfill every 30 s, runs before the daemon's
    next read), else it waits. Returns the state, the jobs started and the pinned jobs still waiting.
    """
    jobs = {j.id: j for j in state.jobs}
    pinned: dict[str, None] = {}  # in the order asked
    for argv in changes:
        verb, rest = argv[1], argv[2:]
        if verb == "requeuehold":  # (one job, or a comma list)
            for job_id in rest[0].split(","):
                jobs[job_id] = replace(jobs[job_id], state="PENDING", nodes=(), gpus_alloc={}, start_time=0, held=True,
                                       reason=REQUEUE_HELD, priority=0)
        elif verb == "release":
            for job_id in rest[0].split(","):
                if jobs[job_id].held:  # Slurm gives the job a priority again; its reason is the scheduler's next
                    jobs[job_id] = replace(jobs[job_id], held=False, reason="", priority=RELEASED_PRIORITY)
        elif verb == "update":
            fields = dict(arg.partition("=")[::2] for arg in rest)
            if fields.get("StartTime") == "now":
                job_id = fields["JobId"]
                jobs[job_id] = replace(jobs[job_id], required_nodes=tuple(expand(fields["ReqNodeList"])),
                                       num_nodes=int(fields["NumNodes"]), gpus_per_job=None,
                                       gpus_per_node=int(fields["TresPerNode"].rsplit(":", 1)[1]))
                pinned[job_id] = None
    free = {n.name: n.gpus for n in state.nodes}
    for job in jobs.values():
        for node, gpus in job.gpus_alloc.items():
            free[node] -= gpus
    started = 0
    for job_id in pinned:
        job = jobs[job_id]
        if job.held or not job.pending or any(free[n] < job.gpus_per_node for n in job.required_nodes):
            continue
        alloc = dict.fromkeys(job.required_nodes, job.gpus_per_node)
        for node in alloc:
            free[node] -= job.gpus_per_node
        jobs[job_id] = replace(job, state="RUNNING", nodes=tuple(alloc), gpus_alloc=alloc, start_time=int(now),
                               reason="")
        started += 1
    nodes = tuple(replace(n, state="mixed" if free[n.name] < n.gpus else "idle", gpus_used=n.gpus - free[n.name])
                  for n in state.nodes)
    return replace(state, nodes=nodes, jobs=tuple(jobs.values())), started, len(pinned) - started


@dataclass
class Cycle:
    """One timed cycle: CPU seconds (the machine is shared: wall time would count the others) and what it did."""

    seconds: float
    processes: int  #: processes started for its changes
    changes: int  #: its scontrol command lines
    placed: int  #: pending jobs pinned to their nodes
    migrated: int  #: moved jobs carried to Slurm (a requeue, or a re-point of a job not started yet)
    requeues: int  #: running jobs requeued onto new nodes
    errors: Counter[str]  #: the cycle's errors by kind (a mismatch: a job Slurm did not start as decided)


def timed(daemon: Daemon, runner: Recorded, dump: list[str] | None = None) -> Cycle:
    """One cycle; its decisions, migrations, scontrol lines and errors appended to ``dump`` as text lines."""
    spawned = runner.processes
    started = time.process_time()
    report = daemon.cycle()
    seconds = time.process_time() - started
    assert report.skipped is None, report.skipped
    if dump is not None:
        dump.append(f"# cycle {report.cycle}")
        dump += (repr({f.name: getattr(r, f.name) for f in fields(r) if f.name not in ("time", "id")})
                 for r in (*report.decisions, *report.migrations))
        dump += (" ".join(argv) for argv in runner.changes)
        dump += (f"error {e.kind} {e.message}" for e in report.errors)
    migrated = sum(1 for d in report.decisions if d.action == "migrated")
    requeues = sum(len(argv[2].split(",")) for argv in runner.changes if argv[1] == "requeuehold")
    return Cycle(seconds, runner.processes - spawned, len(runner.changes), len(report.decisions) - migrated, migrated,
                 requeues, Counter(e.kind for e in report.errors))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=4096)
    parser.add_argument("--jobs", type=int, default=20_000)
    parser.add_argument("--busy", type=float, default=0.97, help="share of GPUs running jobs")
    parser.add_argument("--policy", default=Config().policy, help="placement policy (default: the daemon's, %(default)s)")
    parser.add_argument("--history", default="compass",
                        help="policy that placed the running jobs (first-fit: a cluster new to the daemon)")
    parser.add_argument("--repeat", type=int, default=5, help="steady cycles to time (the median is reported)")
    parser.add_argument("--slack", type=float, default=Config.slack,
                        help="the queue's slack (default: the daemon's, %(default)s; 0 before 2026-12-03)")
    parser.add_argument("--read", choices=("json", "lines", "narrow"), default="json",
                        help="jobs by squeue --json, by line (scontrol show job: the CLI backend's before Slurm 24.11) "
                             "or by the narrow read (the CLI backend's from 24.11)")
    parser.add_argument("--recalculate-priorities", action="store_true",
                        help="every pending job's priority changes before every cycle (as when slurmctld's "
                             "PriorityCalcPeriod, 5 min by default, has passed: the worst case for a memo by job)")
    parser.add_argument("--migrations-per-hour", help="the daemon's migration budget (default: the config's)")
    parser.add_argument("--migrations-burst", help="the daemon's cap on migrations in any 5 minutes "
                                                   "(default: the config's)")
    parser.add_argument("--dump", type=Path, help="write every cycle's decisions and scontrol command lines here "
                                                  "(to diff two codes' runs of the same inputs)")
    parser.add_argument("--clock", type=float, help="Unix seconds the daemon's clock starts at (default: now; give "
                                                    "one to compare two runs: the jobs' start times follow it)")
    parser.add_argument("--in-memory", action="store_true",
                        help="hand Slurm's output to the backend in memory, not from a process, and log no decisions "
                             "(as before 2026-12-03)")
    parser.add_argument("--no-spawn", action="store_true",
                        help="start no process for the scontrol changes (as before 2026-12-03)")
    parser.add_argument("--spawn-changes", action="store_true", help=argparse.SUPPRESS)  # the default now
    parser.add_argument("--db", type=Path, help="log decisions to this SQLite file, as the daemon does (default: "
                                                "a temporary one; none with --in-memory)")
    parser.add_argument("--json", action="store_true", help="print one JSON object of the figures")
    parser.add_argument("--profile", type=Path, help="write a cProfile of the steady cycles (not the cold one) here")
    args = parser.parse_args()

    now = [time.time() if args.clock is None else args.clock]
    state = build(args.nodes, args.jobs, args.busy, args.history, seed=1, now=now[0])
    narrow = Narrow() if args.read == "narrow" else None

    def texts(state: SlurmState) -> dict[str, str]:
        if args.read == "lines":
            texts, jobs = _render(state)
            return {**texts, LINES: "".join(text_line(job, now[0]) + "\n" for job in jobs)}
        return render(state) if narrow is None else narrow.render(*_render(state))

    folder = None if args.in_memory else Path(tempfile.mkdtemp(prefix="bench_daemon."))
    runner = Recorded(texts(state), narrow, folder, spawn=not args.no_spawn)
    jobs_read = {"json": "squeue --json", "lines": LINES}.get(args.read) or narrow_command()
    reads = {"sinfo --json", jobs_read, "scontrol show partition --oneliner", "scontrol show reservation --oneliner"}
    size_mb = sum(len(text) for key, text in runner.texts.items() if key in reads) / 1e6
    # Errors are counted from the cycles' reports, not logged.
    logging.getLogger("compass.daemon").setLevel(logging.CRITICAL)
    # only the read asked for is named: --read json runs on code before the other reads
    backend = CliBackend(runner=runner, **({args.read: True} if args.read != "json" else {}))
    backend.batch_runner = runner.batch  # (unused by code that runs scontrol once per change)
    reads_s: list[float] = []
    read_state = backend.read_state

    def timed_read() -> SlurmState:
        started = time.process_time()
        try:
            return read_state()
        finally:
            reads_s.append(time.process_time() - started)

    backend.read_state = timed_read  # type: ignore[method-assign]  # the cycle's own read, timed
    # The daemon's clock advances one interval per cycle, as when it runs (the migration budget is per sliding hour).
    budget = {}
    for name, parser_of in (("migrations_per_hour", "parse_setting"), ("migrations_burst", "parse_burst")):
        given = getattr(args, name)
        if given is not None:  # only when given: runs on code before the setting
            from compass_slurm.engine import rate_limit

            try:
                budget[name] = getattr(rate_limit, parser_of)(given)
            except ValueError as err:
                parser.error(f"--{name.replace('_', '-')} {given!r} is {err}")
    config = Config(policy=args.policy, anchors="", slack=args.slack, **budget)
    log_file = args.db or (None if folder is None else folder / "decisions.db")
    db = None if log_file is None else f"sqlite:///{log_file.resolve()}"
    daemon = Daemon(config, backend, db, clock=lambda: now[0])
    dump: list[str] = []
    cycles = [timed(daemon, runner, dump)]
    reads_s.clear()
    running = sum(1 for j in state.jobs if j.running)
    started = waiting = 0
    profile = None
    if args.profile is not None:
        import cProfile

        profile = cProfile.Profile()
    for i in range(args.repeat):
        state, begun, left = carry_out(state, runner.take(), now[0])
        started, waiting = started + begun, waiting + left
        state = churn(state, 0.01, seed=2 + i)
        if args.recalculate_priorities:
            state = replace(state, jobs=tuple(replace(j, priority=j.priority + 1) if j.pending else j
                                              for j in state.jobs))
        now[0] += config.interval
        runner.texts = texts(state)
        if profile is not None:
            profile.enable()
        cycles.append(timed(daemon, runner, dump))
        if profile is not None:
            profile.disable()
    if profile is not None:
        profile.dump_stats(args.profile)
    daemon.close()
    if folder is not None:
        shutil.rmtree(folder)
    if args.dump is not None:
        args.dump.write_text("".join(line + "\n" for line in dump))
    cold, steady = cycles[0], sorted(cycles[1:], key=lambda c: c.seconds)[args.repeat // 2]
    read = statistics.median(reads_s)
    if args.json:
        print(json.dumps({"steady_s": round(steady.seconds, 4), "read_s": round(read, 4), "cold_s": round(cold.seconds, 4),
                          "processes_per_cycle": steady.processes, "changes_per_cycle": steady.changes,
                          "read": args.read, "nodes": args.nodes, "jobs": args.jobs, "spawn": not args.no_spawn,
                          "db": db is not None, "in_memory": folder is None,
                          "steady_cycles": [[round(c.seconds, 4), c.changes] for c in cycles[1:]]}))
        return
    target = TARGETS_S.get((args.nodes, args.jobs))
    verdict = "" if target is None else f" | target <= {target} s: {'met' if steady.seconds <= target else 'MISSED'}"
    if target is not None:
        verdict += f", <= {PROCESSES_TARGET} processes: {'met' if steady.processes <= PROCESSES_TARGET else 'MISSED'}"
    print(f"| daemon cycle, {args.nodes:,} nodes, {args.jobs:,} jobs ({running:,} running), {args.policy}, "
          f"history {args.history}, jobs read by {args.read}, slack {config.slack:g}, "
          f"migrations_per_hour {config.migrations_per_hour}, "
          + ("every pending job's priority changed before each cycle, " if args.recalculate_priorities else "")
          + f"migrations_burst {getattr(config, 'migrations_burst', 'unlimited')}, "
          f"Slurm output {size_mb:.1f} MB read per cycle {'in memory' if folder is None else 'from a process'}"
          + ("" if args.no_spawn else f", {steady.processes} processes for {steady.changes} scontrol changes")
          + (", decisions logged to SQLite" if db is not None else "") + " "
          f"| cold (restart, adopts all) {cold.seconds:.3f} s ({cold.placed} placed, {cold.migrated} migrated) "
          f"| steady median of {args.repeat} {steady.seconds:.3f} s ({steady.placed} placed, {steady.migrated} migrated) "
          f"| of which reading and parsing {read:.3f} s{verdict} | CPU time |")
    errors = sum((c.errors for c in cycles), Counter())
    minute = cycles[:int(60 / config.interval)]  # cycles 0, 5, .. 55 s: the takeover's first minute
    print(f"cycles every {config.interval:g} s: "
          + ", ".join(f"{c.seconds:.3f} s: {c.placed} placed/{c.migrated} migrated/{c.requeues} requeued"
                      for c in cycles)
          + f"; requeues in the first {len(minute) * config.interval:g} s {sum(c.requeues for c in minute)}"
          + f"; Slurm started {started} pinned jobs, {waiting} waited; errors {dict(errors) or 'none'}"
          + (f"; all of squeue --json read {runner.asked['squeue --json']} times" if args.read != "json" else ""))


if __name__ == "__main__":
    main()
