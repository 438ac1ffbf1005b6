"""What slurmctld pays for compass: its RPC time and CPU under a steady GPU job stream, with plain Slurm, then with
the job_submit/lua hook and the daemon, then with the sbatch wrapper and the daemon, on the 64-node dev cluster.

    .venv/bin/python benchmarks/slurmctld_load.py [--release 22.05] [--rate 2] [--minutes 10] [--seed 1]
                                                  [--phases plain,hook,wrapper] [--json]

Phases one after the other on a dev cluster of 64 nodes x 8 GPUs that the script lays out itself
(tests/devcluster.py; COMPASS_DEV_DIR and COMPASS_DEV_PORT pick it): ``plain``, without JobSubmitPlugins and
without a daemon; ``hook``, with the project's hook and a daemon at the site's defaults (5-s cycles, the look every
0.5 s, the spacing of cycles from 1 s); ``wrapper``, without JobSubmitPlugins, every job through
scripts/compass-sbatch (which tells the daemon of each job) and a daemon without the look (``watch = 0``). Each
phase submits the same seeded stream, ``--rate`` jobs a second for ``--minutes`` (1, 2, 4 or 8 GPUs, sleeping
30-60 s, as tests/starvation_scenario.py's stream), after ``sdiag --reset``; at its end it reads ``sdiag``,
slurmctld's CPU time (/proc) and the daemon's cycles and looks (its ping). It reports per phase the RPC counts and
times by type, slurmctld's CPU seconds, the mean submit RPC time, and sbatch's wall-time p50/p99; and for each
daemon's phase the share of its RPC time taken by the RPC types the plain phase never saw (the daemon's reads, its
look, its updates: the stream sends the same in every phase), against the targets: the daemon at most 10 % of
slurmctld's RPC time, the hook at most +10 % on the submit RPC's mean time.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from statistics import quantiles

TESTS = Path(__file__).resolve().parents[1] / "tests"
sys.path[:0] = [str(TESTS), str(TESTS / "faults")]
from devcluster import Layout, dev, sdiag_by_type, use_cluster  # noqa: E402
from harness import WRAPPER, DaemonProcess, cancel, wrapper_env  # noqa: E402

NODES, GPUS = 64, 8
SIZES = (1, 1, 1, 1, 2, 2, 4, 8)
SLEEP_S = (30, 60)
SUBMIT = "REQUEST_SUBMIT_BATCH_JOB"
PHASES = ("plain", "hook", "wrapper")


@dataclass
class Rpc:
    count: int
    total_us: int

    @property
    def mean_us(self) -> float:
        return self.total_us / self.count if self.count else 0.0


@dataclass
class Phase:
    name: str
    jobs: int
    seconds: float
    ctld_cpu_s: float
    rpcs: dict[str, Rpc] = field(default_factory=dict)
    sbatch_s: list[float] = field(default_factory=list, repr=False)
    #: the daemon's cycles and looks in the phase (none without a daemon)
    cycles: int = 0
    looks: int = 0

    @property
    def rpc_total_us(self) -> int:
        return sum(r.total_us for r in self.rpcs.values())

    def beyond(self, plain: Phase) -> int:
        """RPC time of the types the plain phase never saw: what the hook's and the daemon's side added (the
        daemon's reads, its look, its updates; the stream itself sends the same in both phases)."""
        return sum(r.total_us for name, r in self.rpcs.items() if name not in plain.rpcs)

    def sbatch_p(self, q: int) -> float:
        cuts = quantiles(self.sbatch_s, n=100, method="inclusive") if len(self.sbatch_s) > 1 else self.sbatch_s * 99
        return cuts[q - 1]

    def as_json(self) -> dict:
        out = asdict(self)
        out.pop("sbatch_s")
        out["rpcs"] = {k: {"count": v.count, "total_us": v.total_us, "mean_us": round(v.mean_us, 1)}
                       for k, v in sorted(self.rpcs.items(), key=lambda kv: -kv[1].total_us)}
        out.update(rpc_total_us=self.rpc_total_us,
                   sbatch_p50_s=round(self.sbatch_p(50), 4), sbatch_p99_s=round(self.sbatch_p(99), 4))
        return out


def sdiag_rpcs() -> dict[str, Rpc]:
    """`sdiag`'s RPC statistics by message type."""
    text = subprocess.run(["sdiag"], capture_output=True, text=True, check=True).stdout
    return {name: Rpc(count, total_us) for name, (count, total_us) in sdiag_by_type(text).items()}


def ctld_cpu_s() -> float:
    """slurmctld's user + system CPU seconds so far."""
    pid = int((Path(os.environ["COMPASS_DEV_DIR"]) / "pid" / "slurmctld.pid").read_text())
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def stream(seed: int, rate: float, minutes: float) -> list[tuple[float, int, int]]:
    """(when, GPUs, seconds) of each job: one every 1/rate s."""
    rng = random.Random(seed)
    return [(i / rate, rng.choice(SIZES), rng.randint(*SLEEP_S)) for i in range(int(rate * minutes * 60))]


def submit_all(jobs: list[tuple[float, int, int]], tag: str, sbatch: list[str],
               env: dict[str, str] | None = None) -> tuple[list[str], list[float]]:
    """Submit each job at its time with ``sbatch`` (a thread each, so one slow sbatch delays no other); ids and wall
    times."""
    ids: list[str] = []
    walls: list[float] = []
    lock = threading.Lock()
    began = time.monotonic()

    def one(k: int, gpus: int, seconds: int) -> None:
        t0 = time.monotonic()
        done = subprocess.run([*sbatch, "--parsable", "--output=/dev/null", f"--job-name={tag}{k}", f"--gpus={gpus}",
                               "--nodes=1", "--time=2", "--wrap", f"sleep {seconds}"],
                              capture_output=True, text=True, env=env)
        with lock:
            walls.append(time.monotonic() - t0)
            if done.returncode == 0:
                ids.append(done.stdout.strip().split(";")[0])
            else:
                print(f"sbatch failed: {done.stderr.strip()}", file=sys.stderr)

    threads = []
    for k, (at, gpus, seconds) in enumerate(jobs):
        time.sleep(max(0.0, began + at - time.monotonic()))
        thread = threading.Thread(target=one, args=(k, gpus, seconds))
        thread.start()
        threads.append(thread)
    for thread in threads:
        thread.join()
    return ids, walls


def start_daemon(name: str, env: dict[str, str], workdir: Path) -> DaemonProcess | None:
    """The phase's daemon at the site's defaults: with the look beside the hook, without it beside the wrapper
    (which tells the daemon of every job it submits); none for plain Slurm."""
    if name == "plain":
        return None
    settings = {"COMPASS_HOOK_CONFIG": env["COMPASS_HOOK_CONFIG"]} if name == "hook" else {"COMPASS_WATCH": "0"}
    daemon = DaemonProcess(workdir / f"daemon-{name}", interval=5.0, lease=60, extra_env=settings)
    daemon.start().wait_cycles(2)
    return daemon


def run_phase(name: str, jobs: list[tuple[float, int, int]], release: str, workdir: Path) -> Phase:
    env = use_cluster(Layout(NODES, GPUS, release, job_submit_lua=name == "hook"))
    daemon = start_daemon(name, env, workdir)
    sbatch, sbatch_env = ["sbatch"], None
    if name == "wrapper":
        sbatch, sbatch_env = [sys.executable, str(WRAPPER)], wrapper_env(daemon)
    try:
        subprocess.run(["sdiag", "--reset"], capture_output=True, check=True)
        cpu, began = ctld_cpu_s(), time.monotonic()
        counts = (daemon.ping(), daemon.looks()) if daemon else (0, 0)
        ids, walls = submit_all(jobs, f"load-{name}-", sbatch, sbatch_env)
        phase = Phase(name, len(ids), round(time.monotonic() - began, 1), round(ctld_cpu_s() - cpu, 2),
                      sdiag_rpcs(), walls)
        if daemon is not None:
            phase.cycles, phase.looks = daemon.ping() - counts[0], daemon.looks() - counts[1]
    finally:
        if daemon is not None:
            daemon.stop()
        if name == "hook":
            Path(env["COMPASS_HOOK_CONFIG"]).unlink(missing_ok=True)
    cancel(ids)
    return phase


def report(phases: list[Phase], args: argparse.Namespace) -> str:
    """The phases side by side; each daemon's phase against the first (plain Slurm)."""
    plain = phases[0]
    out = [f"# slurmctld's load: {args.rate:g} GPU jobs/s for {args.minutes:g} min, {NODES} nodes x {GPUS} GPUs, "
           f"Slurm {args.release}, seed {args.seed}", "",
           "| phase | jobs | slurmctld CPU s | RPC time s | beyond plain's RPC types s | submit RPC mean ms "
           "| sbatch p50 s | sbatch p99 s | daemon cycles | looks |",
           "|---|---|---|---|---|---|---|---|---|---|"]
    for p in phases:
        submit = p.rpcs.get(SUBMIT, Rpc(0, 0))
        out.append(f"| {p.name} | {p.jobs} | {p.ctld_cpu_s:.1f} | {p.rpc_total_us / 1e6:.2f} | "
                   f"{p.beyond(plain) / 1e6:.2f} | {submit.mean_us / 1e3:.2f} | {p.sbatch_p(50):.3f} | "
                   f"{p.sbatch_p(99):.3f} | {p.cycles} | {p.looks} |")
    plain_submit = plain.rpcs.get(SUBMIT, Rpc(0, 0)).mean_us
    for ours in phases[1:]:
        share = ours.beyond(plain) / ours.rpc_total_us if ours.rpc_total_us else 0.0
        submit = ours.rpcs.get(SUBMIT, Rpc(0, 0)).mean_us / plain_submit - 1 if plain_submit else 0.0
        out += ["", f"- {ours.name}: the daemon's RPCs {share:.1%} of slurmctld's RPC time (target at most 10%); "
                f"submit RPC mean {submit:+.1%} over plain Slurm (target at most +10%)", "",
                f"RPCs by type (count, total ms), the {ours.name} phase:", ""]
        for name, rpc in sorted(ours.rpcs.items(), key=lambda kv: -kv[1].total_us)[:15]:
            mark = " (daemon)" if name not in plain.rpcs else ""
            before = plain.rpcs.get(name, Rpc(0, 0))
            out.append(f"- {name}{mark}: {rpc.count} ({before.count} plain), {rpc.total_us / 1e3:.0f} ms "
                       f"({before.total_us / 1e3:.0f} plain)")
    return "\n".join(out)


def phase_list(text: str) -> list[str]:
    """--phases: names from PHASES, plain first (the others are measured against it)."""
    names = [name.strip() for name in text.split(",") if name.strip()]
    unknown = [name for name in names if name not in PHASES]
    if unknown or not names or names[0] != "plain" or len(set(names)) != len(names):
        raise argparse.ArgumentTypeError(f"{text!r}: name plain first, then any of hook, wrapper, each once")
    return names


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--release", default="22.05", help="Slurm release of the dev cluster (default 22.05)")
    parser.add_argument("--rate", type=float, default=2.0, help="jobs submitted per second (default 2)")
    parser.add_argument("--minutes", type=float, default=10.0, help="length of each phase (default 10)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--phases", type=phase_list, default=list(PHASES),
                        help="the phases to run, plain first (default plain,hook,wrapper)")
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of markdown")
    parser.add_argument("--workdir", type=Path, default=Path("/tmp/compass-slurmctld-load"))
    args = parser.parse_args()
    if args.rate <= 0 or args.minutes <= 0:
        parser.error("--rate and --minutes must be above 0")
    jobs = stream(args.seed, args.rate, args.minutes)
    load = os.getloadavg()[0]
    phases = [run_phase(name, jobs, args.release, args.workdir) for name in args.phases]
    dev("stop")
    conditions = f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, load average {load:.1f} at the start"
    if args.json:
        plain = phases[0]
        print(json.dumps({"conditions": vars(args) | {"workdir": str(args.workdir), "nodes": NODES, "gpus": GPUS,
                                                      "when": conditions},
                          "phases": [p.as_json() for p in phases],
                          "daemon_rpc_share": {p.name: round(p.beyond(plain) / max(1, p.rpc_total_us), 4)
                                               for p in phases[1:]}}, indent=2))
    else:
        print(report(phases, args) + f"\n\n{conditions}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
