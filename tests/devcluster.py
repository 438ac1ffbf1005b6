"""The dev cluster (scripts/dev-cluster) for the test sessions that need a real Slurm.

Shared by tests/integration and tests/faults (each puts tests/ on sys.path) and by
benchmarks/soak.py. COMPASS_DEV_DIR and COMPASS_DEV_PORT in the environment pick
the cluster, so that two can run side by side. The integration suite runs on every
Slurm release in COMPASS_TEST_SLURM (comma-separated; default DEFAULT_RELEASES),
one cluster after another on the same port and directory. A fixture asks for
nodes x GPUs (``session_cluster``) or a layout file (``session_layout_cluster``,
e.g. LAYOUTS / "mixed.toml"; compass_slurm/layout.py says what a layout holds);
either with ``backup_controller=True`` gets a second slurmctld as backup, and
``controllers``, ``in_control`` and ``beside`` tell the controllers apart.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import pytest

DEV_CLUSTER = Path(__file__).resolve().parents[1] / "scripts" / "dev-cluster"
#: the layouts the live tests use: mixed.toml (a100/h100/v100 under three leaf switches), shared.toml (MIG-type
#: and shard nodes), blocks.toml (topology/block, Slurm 23.11+)
LAYOUTS = Path(__file__).resolve().parent / "data" / "layouts"
RELEASES = ("22.05", "23.11", "24.11", "25.11", "26.05")
#: what the default run (CI) covers: every release
DEFAULT_RELEASES = RELEASES
#: scripts/dev-cluster's exit code when the archive a release's chroot comes from cannot be reached
UNREACHABLE = 3


def releases_under_test() -> list[str]:
    """The releases the integration suite runs on: $COMPASS_TEST_SLURM, else DEFAULT_RELEASES."""
    wanted = [r.strip() for r in os.environ.get("COMPASS_TEST_SLURM", "").split(",") if r.strip()]
    unknown = set(wanted) - set(RELEASES)
    if unknown:
        raise pytest.UsageError(f"COMPASS_TEST_SLURM: unknown releases {sorted(unknown)}; known are {', '.join(RELEASES)}")
    return wanted or list(DEFAULT_RELEASES)


def dev(*args: str) -> subprocess.CompletedProcess[str]:
    """scripts/dev-cluster; it honours COMPASS_DEV_DIR and COMPASS_DEV_PORT from our environment."""
    return subprocess.run([str(DEV_CLUSTER), *args], capture_output=True, text=True, timeout=600)


class Preparing:
    """`scripts/dev-cluster prepare` in the background at low priority: first-time chroot and pyslurm builds
    proceed while the tests of other releases run; a session of one of these releases waits for it."""

    process: subprocess.Popen[bytes] | None = None
    releases: frozenset[str] = frozenset()
    log: Path | None = None

    @classmethod
    def start(cls, releases: set[str], pyslurm: bool) -> None:
        if cls.process is not None or not (releases or pyslurm):
            return
        cls.releases = frozenset(releases)
        cls.log = Path(tempfile.mkstemp(prefix="compass-dev-cluster-prepare-", suffix=".log")[1])
        with open(cls.log, "wb") as out:
            cls.process = subprocess.Popen([str(DEV_CLUSTER), "prepare", *sorted(releases), *(["--pyslurm"] * pyslurm)],
                                           stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                           start_new_session=True, preexec_fn=lambda: os.nice(19))

    @classmethod
    def wait(cls, release: str) -> None:
        if cls.process is None or release not in cls.releases:
            return
        if cls.process.poll() is None:  # now the tests wait for it: full priority for it and its children
            os.setpriority(os.PRIO_PGRP, cls.process.pid, 0)
        if cls.process.wait() != 0:
            raise RuntimeError(f"scripts/dev-cluster prepare failed: {cls.log.read_text()[-2000:]}")
        cls.log.unlink(missing_ok=True)


@dataclass(frozen=True)
class Layout:
    """What a fixture needs running in COMPASS_DEV_DIR (``job_submit_lua``: the project's hook installed;
    ``backup_controller``: a second slurmctld as backup).

    ``nodes`` x ``gpus``, or a layout file (``of_file``; nodes and gpus are then 0): that file's content counts,
    so the same path with other content is another layout.
    """

    nodes: int
    gpus: int
    release: str = "22.05"
    job_submit_lua: bool = False
    layout_file: Path | None = None
    layout_text: str | None = field(default=None, repr=False)
    backup_controller: bool = False

    @classmethod
    def of_file(cls, path: str | os.PathLike, release: str = "22.05", job_submit_lua: bool = False,
                backup_controller: bool = False) -> Layout:
        path = Path(path).resolve()
        return cls(0, 0, release, job_submit_lua, path, path.read_text(encoding="utf-8"), backup_controller)

    def start_args(self) -> list[str]:
        """`scripts/dev-cluster start`'s arguments for this layout."""
        shape = (["--layout", str(self.layout_file)] if self.layout_file is not None
                 else ["--nodes", str(self.nodes), "--gpus-per-node", str(self.gpus)])
        return ["--slurm", self.release, *shape, *(["--job-submit-lua"] * self.job_submit_lua),
                *(["--backup-controller"] * self.backup_controller)]


class Running:
    """What this process last started or found in COMPASS_DEV_DIR. Fixtures of different layouts share that
    one directory, and a session-scoped one outlives the tests that use it (the fault tests' cluster lives
    until the session ends), so a fixture re-lays the cluster out when another one changed it meanwhile."""

    layout: Layout | None = None
    env: dict[str, str] = {}
    started = False  # by this process: stopped when the last fixture of its layout is done


def use_cluster(layout: Layout) -> dict[str, str]:
    """This layout running, its environment (SLURM_CONF, PATH, ...) set in os.environ; returns that environment.

    Costs nothing when this process last left this layout running; else a cluster found running with it is
    reused (and left running), any other is replaced: `scripts/dev-cluster start` does either, and says which.
    """
    if Running.layout != layout:
        Preparing.wait(layout.release)
        done = dev("start", *layout.start_args())
        if done.returncode == UNREACHABLE:  # a mirror down is no failure of ours: skipped, the reason shown
            pytest.skip(f"Slurm {layout.release}: {done.stderr.strip().splitlines()[-1]}")
        if done.returncode != 0:
            raise RuntimeError(f"scripts/dev-cluster start failed: {done.stderr or done.stdout}")
        found = done.stdout.startswith("dev-cluster: already running")
        env = {}
        for line in dev("env").stdout.splitlines():
            key, _, value = line.removeprefix("export ").partition("=")
            env[key] = shlex.split(value)[0]
        for key in Running.env.keys() - env.keys():  # COMPASS_HOOK_CONFIG: exported with the hook only
            os.environ.pop(key, None)
        Running.layout, Running.env, Running.started = layout, env, not found
    os.environ.update(Running.env)
    return Running.env


@contextmanager
def session_cluster(nodes: int, gpus: int, release: str = "22.05", job_submit_lua: bool = False,
                    backup_controller: bool = False) -> Iterator[dict[str, str]]:
    """A running cluster of ``nodes`` x ``gpus``, its environment (SLURM_CONF, ...) set in os.environ meanwhile.

    One already running with the layout is reused and left running; one started by this process is
    stopped at the end, unless another fixture has re-laid it out since. A fixture whose tests may run
    while another fixture of this process is active calls use_cluster(layout) before each test.
    Skips only where Slurm cannot run: not Linux, or not root, or the archive a release's chroot is built from
    cannot be reached (no failure of ours; the reason is in pytest's summary).
    """
    with _session(Layout(nodes, gpus, release, job_submit_lua, backup_controller=backup_controller)) as env:
        yield env


@contextmanager
def session_layout_cluster(path: str | os.PathLike, release: str = "22.05", job_submit_lua: bool = False,
                           backup_controller: bool = False) -> Iterator[dict[str, str]]:
    """session_cluster for a layout file (`scripts/dev-cluster start --layout FILE`); use_cluster takes
    Layout.of_file(path, release, job_submit_lua, backup_controller) for it."""
    with _session(Layout.of_file(path, release, job_submit_lua, backup_controller)) as env:
        yield env


@contextmanager
def _session(layout: Layout) -> Iterator[dict[str, str]]:
    if not sys.platform.startswith("linux"):
        pytest.skip("the dev cluster needs Linux")
    if os.geteuid() != 0:
        pytest.skip("the dev cluster needs root (slurmd and munged run as root)")
    saved = {k: os.environ.get(k) for k in ("SLURM_CONF", "COMPASS_DEV_DIR", "PATH", "COMPASS_HOOK_CONFIG")}
    env = use_cluster(layout)
    try:
        yield env
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        if Running.layout == layout and Running.started:
            dev("stop")
            Running.layout, Running.env, Running.started = None, {}, False


# -- a backup-controller cluster (Layout.backup_controller) -----------------------------------

#: in a new UTS namespace: the hostname ($1), then exec the command (so its pid is the command's)
_NAMED = 'hostname "$1" || exit; shift; exec "$@"'


def beside(hostname: str) -> list[str]:
    """The argv prefix that runs a command "beside" a controller: in a UTS namespace of its own named ``hostname``
    (``socket.gethostname()`` there says it), exec'd, so the process started is the command itself. Needs root."""
    return ["unshare", "--uts", "sh", "-c", _NAMED, "sh", hostname]


def controllers() -> dict[str, bool]:
    """`scontrol ping`: each controller's hostname -> UP, the primary (SlurmctldHost[0]) first.

    Its "primary" and "backup" are the configured roles, not who is in control: ask in_control for that."""
    out = subprocess.run(["scontrol", "ping"], capture_output=True, text=True, timeout=60).stdout
    found = {}
    for line in out.splitlines():  # Slurmctld(primary) at compass-ctl1 is UP
        words = line.split()
        if len(words) >= 5 and words[0].startswith("Slurmctld(") and words[1] == "at" and words[3] == "is":
            found[words[2]] = words[4] == "UP"
    return found


def in_control(timeout: float = 10.0) -> str | None:
    """The controller that serves clients now, None while none does.

    The primary, when up: it takes control back from the backup as it starts. Else the backup once it has taken
    over: a standby backup answers only pings, and a client's other requests wait for it (here, ``timeout``)."""
    states = list(controllers().items())
    if states and states[0][1]:
        return states[0][0]
    backup = next((name for name, up in states[1:] if up), None)
    if backup is None:
        return None
    try:
        answered = subprocess.run(["squeue", "--noheader", "--format=%i"], capture_output=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return None
    return backup if answered.returncode == 0 else None


def wait_in_control(name: str, timeout: float) -> float:
    """Seconds until ``name`` serves clients; AssertionError after ``timeout``."""
    began = time.monotonic()
    while (seen := in_control()) != name:
        if time.monotonic() - began > timeout:
            raise AssertionError(f"{name} not in control after {timeout:.0f} s (in control: {seen})")
        time.sleep(0.5)
    return time.monotonic() - began


def config_value(name: str) -> str:
    """A setting as `scontrol show config` prints it (``SlurmctldTimeout``: "10 sec")."""
    out = subprocess.run(["scontrol", "show", "config"], capture_output=True, text=True, timeout=60).stdout
    return next(line.partition("=")[2].strip() for line in out.splitlines() if line.split("=")[0].strip() == name)


#: one line of sdiag's "Remote Procedure Call statistics by message type"
_SDIAG_RPC = re.compile(r"^\s*(\S+)\s+\(\s*\d+\)\s+count:(\d+)\s+ave_time:(\d+)\s+total_time:(\d+)", re.MULTILINE)


def sdiag_by_type(sdiag: str) -> dict[str, tuple[int, int]]:
    """``sdiag``'s output: each message type's RPC count and total microseconds (not the by-user section)."""
    by_type = sdiag.split("by message type", 1)[1].split("by user", 1)[0]
    return {m[1]: (int(m[2]), int(m[4])) for m in _SDIAG_RPC.finditer(by_type)}


def rpc_counts(sdiag: str, kinds: tuple[str, ...]) -> dict[str, int]:
    """How many RPCs of each of ``kinds`` (``REQUEST_UPDATE_JOB``, ...) ``sdiag``'s output says slurmctld served."""
    counts = sdiag_by_type(sdiag)
    return {kind: counts.get(kind, (0, 0))[0] for kind in kinds}


def rpcs_served(kinds: tuple[str, ...]) -> dict[str, int]:
    """RPCs of each of ``kinds`` since ``sdiag --reset``, by the release's own sdiag (dev-cluster wraps it)."""
    return rpc_counts(subprocess.run(["sdiag"], capture_output=True, text=True, check=True).stdout, kinds)


def slurmctld_timeout() -> int:
    """SlurmctldTimeout, in seconds: how long the backup waits for a silent primary before it takes over."""
    return int(config_value("SlurmctldTimeout").split()[0])


def wait_state_saved(timeout: float = 60.0) -> None:
    """Until slurmctld has saved its job state after now (it batches saves over a few seconds): what a controller
    killed then had heard of, the backup, taking over from StateSaveLocation, knows too."""
    job_state = Path(config_value("StateSaveLocation")) / "job_state"
    since = time.time()
    deadline = time.monotonic() + timeout
    while not (job_state.exists() and job_state.stat().st_mtime > since):
        if time.monotonic() > deadline:
            raise AssertionError(f"{job_state} not saved within {timeout:.0f} s")
        time.sleep(0.2)
