"""compass as a site installs it: a wheel, installed non-editably into a fresh venv, run as root and as a user.

The editable install of scripts/bootstrap finds every module in the source tree,
so it cannot notice a subpackage the wheel leaves out; this does. The user runs
(``runuser -u nobody``) need an interpreter that user may execute, so the venv is
made from Debian's /usr/bin/python3 when there is one; where no such run is
possible (not root, no runuser), those tests are skipped and say why.
"""

from __future__ import annotations

import os
import shutil
import sqlite3
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/: devcluster.py
from devcluster import session_cluster  # noqa: E402

pytestmark = pytest.mark.packaging

REPO = Path(__file__).resolve().parents[2]
#: what a build must not see: local state of this checkout
NOT_SOURCE = shutil.ignore_patterns(".git", ".venv", "build", "dist", "run", "*.egg-info", "__pycache__",
                                    ".pytest_cache", ".hypothesis")
USER = "nobody"


@dataclass(frozen=True)
class Installed:
    root: Path
    compass: Path
    python: Path

    def run(self, *args: str, user: str | None = None, env: dict[str, str] | None = None,
            timeout: float = 120) -> subprocess.CompletedProcess[str]:
        argv = [str(self.compass), *args]
        if user is not None:
            argv = ["runuser", "-u", user, "--", "env", *(f"{k}={v}" for k, v in (env or {}).items()), *argv]
            env = None
        full = {**os.environ, "HOME": str(self.root), **(env or {})}
        return subprocess.run(argv, capture_output=True, text=True, timeout=timeout, env=full, cwd=self.root)

    def example(self) -> str:
        done = subprocess.run([str(self.python), "-c", "import compass_slurm, pathlib; print(pathlib.Path("
                               "compass_slurm.__file__).parent / 'data' / 'example-events.jsonl')"],
                              capture_output=True, text=True, check=True, cwd=self.root)
        return done.stdout.strip()


def _interpreter() -> str:
    """Debian's python3 (any user may run it) when it is new enough, else the one running the tests."""
    system = Path("/usr/bin/python3")
    if system.exists():
        done = subprocess.run([str(system), "-c", "import sys, venv, ensurepip; print(sys.version_info >= (3, 11))"],
                              capture_output=True, text=True)
        if done.stdout.strip() == "True":
            return str(system)
    return sys.executable


@pytest.fixture(scope="module")
def installed() -> Iterator[Installed]:
    root = Path(tempfile.mkdtemp(prefix="compass-wheel-"))
    root.chmod(0o755)  # the user runs read the venv too
    try:
        source = root / "source"
        shutil.copytree(REPO, source, ignore=NOT_SOURCE)
        wheel = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(root / "dist"),
                                str(source)], capture_output=True, text=True, timeout=600)
        assert wheel.returncode == 0, wheel.stderr
        [built] = (root / "dist").glob("compass_slurm-*.whl")
        venv = root / "venv"
        subprocess.run([_interpreter(), "-m", "venv", str(venv)], check=True, capture_output=True, timeout=300)
        install = subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "install", "-q", str(built)],
                                 capture_output=True, text=True, timeout=900)
        assert install.returncode == 0, install.stderr
        shutil.rmtree(source)  # nothing may come from the source tree any more
        yield Installed(root, venv / "bin" / "compass", venv / "bin" / "python")
    finally:
        shutil.rmtree(root, ignore_errors=True)


def _user_may_run(installed: Installed) -> None:
    if os.geteuid() != 0 or shutil.which("runuser") is None:
        pytest.skip("runs as another user need root and runuser")
    probe = subprocess.run(["runuser", "-u", USER, "--", str(installed.python), "-c", "import compass_slurm"],
                           capture_output=True, text=True)
    if probe.returncode != 0:
        pytest.skip(f"user {USER} cannot run the venv's interpreter here: {probe.stderr.strip()[-200:]}")


def _commands(installed: Installed, user: str | None) -> None:
    env = {"COMPASS_CONFIG": "/dev/null", "MPLCONFIGDIR": str(installed.root / "mpl")}
    replay = installed.run("replay", installed.example(), "--nodes", "8", user=user, env=env)
    assert replay.returncode == 0, replay.stderr
    assert '"events":' in replay.stdout
    policies = installed.run("policies", user=user, env=env)
    assert policies.returncode == 0 and "compass" in policies.stdout, policies.stderr
    simulate = installed.run("simulate", "--synthetic", "venus", "--limit", "200", "--json", user=user, env=env)
    assert simulate.returncode == 0, simulate.stderr
    assert '"policy": "compass"' in simulate.stdout or '"policy":"compass"' in simulate.stdout
    doctor = installed.run("doctor", user=user, env={**env, "PATH": "/usr/bin:/bin"})  # no daemon here: exit 1
    assert doctor.returncode in (0, 1) and "Traceback" not in doctor.stdout + doctor.stderr, doctor.stderr
    assert "PASS installation:" in doctor.stdout, doctor.stdout
    assert "site-packages/compass_slurm" in doctor.stdout


def test_the_installed_wheel_runs_every_command(installed: Installed) -> None:
    _commands(installed, user=None)


def test_the_installed_wheel_runs_as_a_user(installed: Installed) -> None:
    _user_may_run(installed)
    _commands(installed, user=USER)


def _dead_controller(conf: Path, where: Path) -> Path:
    """The cluster's slurm.conf with the controller on a port nothing listens on (within the dev cluster's range)."""
    lines = conf.read_text().splitlines()
    port = next(int(line.split("=", 1)[1]) for line in lines if line.startswith("SlurmctldPort="))
    dead = where / "dead-slurm.conf"
    dead.write_text("\n".join(f"SlurmctldPort={port + 249}" if line.startswith("SlurmctldPort=") else line
                               for line in lines) + "\n")
    dead.chmod(0o644)
    return dead


@pytest.mark.slurm
def test_a_user_sees_the_cluster_but_not_a_0750_decision_log(installed: Installed) -> None:
    """docs/security.md puts the log in a 0750 directory: a user's status still shows the cluster, the
    log's commands say in one line why they cannot read it, and nothing prints a traceback."""
    _user_may_run(installed)
    with session_cluster(8, 8) as cluster:
        state = installed.root / "state"
        state.mkdir(mode=0o750)
        db = state / "compass.db"
        sqlite3.connect(db).close()
        env = {"COMPASS_CONFIG": "/dev/null", "COMPASS_DB": f"sqlite:///{db}", "SLURM_CONF": cluster["SLURM_CONF"]}
        status = installed.run("status", user=USER, env=env)
        assert status.returncode == 0, status.stderr
        assert status.stdout.startswith("Slurm ") and "nodes 8" in status.stdout
        assert f"decisions: not shown (cannot open the decision log {db}: permission denied)" in \
            " ".join(status.stdout.split())
        for args in (["decisions"], ["explain", "12"], ["report"]):
            done = installed.run(*args, user=USER, env=env)
            assert done.returncode == 2, args
            assert done.stderr.splitlines() == [
                f"compass: error: cannot open the decision log {db}: permission denied",
                "hint: the decision log is readable only by the daemon's account and group (docs/security.md): "
                "run the command with sudo, join that group, or point --db / COMPASS_DB at a copy"], args
        unreachable = installed.run("status", user=USER, env={**env, "SLURM_CONF": str(_dead_controller(
            Path(cluster["SLURM_CONF"]), installed.root))})
        assert unreachable.returncode == 2 and len(unreachable.stderr.splitlines()) == 2, unreachable.stderr
        assert unreachable.stderr.startswith("compass: error: ") and "hint: " in unreachable.stderr
        daemon = installed.run("daemon", user=USER, env={**env, "COMPASS_SOCKET": str(state / "run" / "c.sock")})
        # the daemon's own log (INFO: which backend it reads with) may come first; the error is one line + hint
        errors = [line for line in daemon.stderr.splitlines() if " INFO " not in line]
        assert daemon.returncode == 2 and errors == [
            f"compass: error: cannot prepare the socket directory {state / 'run'}: Permission denied",
            "hint: set `socket` in the config or COMPASS_SOCKET"]
        for done in (status, unreachable, daemon):
            assert "Traceback" not in done.stdout + done.stderr
