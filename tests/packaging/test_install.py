"""scripts/install as the admin guide has it, on the distributions a controller runs: Debian 12 (this host, its
own /usr/bin/python3), Debian 13 and Ubuntu 24.04 (the dev cluster's chroots, seen through an overlay so the
cluster's copy is never written). Each runs the guide's install commands into a temporary prefix, bin, unit
and config directory, checks what they made, then installs a newer checkout over it: the upgrade in place.

Ubuntu 24.04's chroot has no python3: its first run here is the installer's apt path (python3-venv), and what
that installed is kept as an overlay layer (/var/cache/compass-slurm/packaging) for later runs; a changed chroot
makes the layer anew. pip in a chroot reaches PyPI itself: the host's local index holds only its own Python's
wheels, and what PyPI sends here is marked not to be cached, so each run downloads (about 30 s a run).
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import time
import warnings
from collections.abc import Iterator
from contextlib import closing
from pathlib import Path

import pytest

from compass_slurm.service.store import SCHEMA_VERSION

pytestmark = pytest.mark.packaging

REPO = Path(__file__).resolve().parents[2]
CHROOTS = Path(os.environ.get("COMPASS_CHROOT_CACHE") or "/var/cache/compass-slurm/chroots")
CACHE = Path(os.environ.get("COMPASS_PACKAGING_CACHE") or "/var/cache/compass-slurm/packaging")
#: the chroot of each distribution, and the Slurm release scripts/dev-cluster builds it for
SUITES = {"trixie": "24.11", "noble": "23.11"}
NOT_SOURCE = shutil.ignore_patterns(".git", ".venv", "build", "dist", "run", "*.egg-info", "__pycache__",
                                    ".pytest_cache", ".hypothesis")
#: where a chroot gets the host's CA bundle, for pip
HOST_CA = "/etc/compass-host-ca.crt"
PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


def guide_commands() -> list[str]:
    """The commands of the install guide's block (docs/install.md, "Install"), in order."""
    text = (REPO / "docs" / "install.md").read_text()
    start = text.index("\n## Install\n")
    section = text[start:text.index("\n## ", start + 1)]
    block = re.search(r"```sh\n(.*?)```", section, re.S)
    assert block, "docs/install.md's Install section has no sh block"
    return [line.split("#")[0].strip() for line in block.group(1).splitlines() if line.split("#")[0].strip()]


class Machine:
    """Where the install runs: this host, or a chroot through an overlay. ``inside`` maps a path as the
    machine sees it to the host's."""

    name = "debian12"

    def __init__(self, work: Path) -> None:
        self.work = work

    def inside(self, path: str) -> Path:
        return Path(path)

    def run(self, argv: list[str], env: dict[str, str] | None = None,
            timeout: float = 900) -> subprocess.CompletedProcess[str]:
        return subprocess.run(argv, capture_output=True, text=True, timeout=timeout, cwd=self.work,
                              env={**os.environ, **(env or {})})

    def base(self) -> str:
        """The directory that stands for / in the install's options."""
        return str(self.work / "root")


class Chroot(Machine):
    """The dev cluster's chroot of ``suite`` under an overlay: lower the chroot (and the cached layer of an
    earlier run's apt installs), upper this run's; /proc mounted in it."""

    def __init__(self, work: Path, suite: str) -> None:
        super().__init__(work)
        self.name = suite
        self.suite = suite
        self.chroot = CHROOTS / suite
        self.cache = CACHE / suite
        self.layer = self.cache / "layer"
        self.upper = work / "upper"
        self.merged = work / "merged"
        self.mounts: list[Path] = []
        self.new_layer = not self._layer_fits()
        #: set by the test at its end: only a run that passed leaves its layer for later ones
        self.passed = False

    def _stamp(self) -> str:
        return (self.chroot / ".compass-chroot.json").read_text()

    def _layer_fits(self) -> bool:
        try:
            return self.layer.is_dir() and (self.cache / "stamp").read_text() == self._stamp()
        except OSError:
            return False

    def mount(self) -> None:
        for d in (self.upper, self.work / "overlay-work", self.merged):
            d.mkdir()
        lower = f"{self.layer}:{self.chroot}" if not self.new_layer else str(self.chroot)
        self._mount(self.merged, ["-t", "overlay", "overlay", "-o",
                                  f"lowerdir={lower},upperdir={self.upper},workdir={self.work / 'overlay-work'}"])
        self._mount(self.merged / "proc", ["-t", "proc", "proc"])
        # pip trusts what the host's pip trusts (its configuration's cert: a proxy's CA may be in it alone)
        host_ca = os.environ.get("PIP_CERT") or "/etc/ssl/certs/ca-certificates.crt"
        if Path(host_ca).is_file():
            shutil.copyfile(host_ca, self.merged / HOST_CA.lstrip("/"))

    def _mount(self, target: Path, args: list[str]) -> None:
        subprocess.run(["mount", *args, str(target)], check=True, capture_output=True, text=True)
        self.mounts.append(target)

    def unmount(self) -> None:
        for target in reversed(self.mounts):
            for _ in range(50):  # a process of the test's may still be leaving the chroot: busy for a moment
                done = subprocess.run(["umount", str(target)], capture_output=True, text=True)
                if done.returncode == 0:
                    break
                time.sleep(0.2)
            else:  # detached now, gone once its last user is: nothing of the host's is below it
                warnings.warn(f"{target} busy for 10 s ({done.stderr.strip()}): detached lazily")
                subprocess.run(["umount", "--lazy", str(target)], check=True, capture_output=True)
        self.mounts.clear()

    def keep_layer(self) -> None:
        """What this run's installs added to the chroot (apt's python3-venv), less this test's own files, as
        the layer later runs start from."""
        for own in ("srv/compass-test", "root/.cache", HOST_CA.lstrip("/")):
            target = self.merged / own
            target.unlink() if target.is_file() else shutil.rmtree(target, ignore_errors=True)
        self.unmount()
        self.cache.mkdir(parents=True, exist_ok=True)
        shutil.rmtree(self.layer, ignore_errors=True)
        self.upper.rename(self.layer)
        (self.cache / "stamp").write_text(self._stamp())

    def inside(self, path: str) -> Path:
        return self.merged / path.lstrip("/")

    def run(self, argv: list[str], env: dict[str, str] | None = None,
            timeout: float = 900) -> subprocess.CompletedProcess[str]:
        # a clean environment: nothing of the host's (its pip configuration names files the chroot has not)
        clean = {"PATH": PATH, "HOME": "/root", "LANG": "C.UTF-8", "PIP_DISABLE_PIP_VERSION_CHECK": "1",
                 "PIP_DEFAULT_TIMEOUT": "180", **(env or {})}
        if (self.merged / HOST_CA.lstrip("/")).is_file():
            clean["PIP_CERT"] = HOST_CA
        return subprocess.run(["chroot", str(self.merged), "/usr/bin/env", "-i",
                               *(f"{k}={v}" for k, v in clean.items()), *argv],
                              capture_output=True, text=True, timeout=timeout)

    def base(self) -> str:
        return "/srv/compass-test"


def _chroot_ready(suite: str) -> None:
    """The dev cluster's chroot of ``suite`` built (scripts/dev-cluster prepare, once), else skip."""
    if os.geteuid() != 0 or shutil.which("chroot") is None:
        pytest.skip("a chroot needs root")
    if not (CHROOTS / suite / ".compass-chroot.json").exists():
        done = subprocess.run([sys.executable, str(REPO / "scripts" / "dev-cluster"), "prepare", SUITES[suite]],
                              capture_output=True, text=True, timeout=1800)
        if done.returncode != 0 or not (CHROOTS / suite / ".compass-chroot.json").exists():
            pytest.skip(f"no {suite} chroot: {done.stderr.strip()[-300:]}")


@pytest.fixture(params=["debian12", *SUITES])
def machine(request) -> Iterator[Machine]:
    work = Path(tempfile.mkdtemp(prefix=f"compass-install-{request.param}-"))
    try:
        if request.param == "debian12":
            if not Path("/usr/bin/python3").exists():
                pytest.skip("no /usr/bin/python3: not a Debian host")
            yield Machine(work)
            return
        _chroot_ready(request.param)
        chroot = Chroot(work, request.param)
        try:
            chroot.mount()
            yield chroot
            if chroot.new_layer and chroot.passed:
                chroot.keep_layer()
        finally:
            chroot.unmount()
    finally:
        leftover = [line for line in Path("/proc/self/mountinfo").read_text().splitlines() if str(work) in line]
        if not leftover:  # never delete through a mount
            shutil.rmtree(work, ignore_errors=True)


def copy_source(machine: Machine, where: str, version: str | None = None) -> str:
    """This checkout at ``where`` on the machine; with ``version``, made a newer release of it."""
    target = machine.inside(where)
    shutil.copytree(REPO, target, ignore=NOT_SOURCE)
    if version is not None:
        init = target / "compass_slurm" / "__init__.py"
        init.write_text(re.sub(r'__version__ = "[^"]+"', f'__version__ = "{version}"', init.read_text()))
    return where


def unit_settings(path: Path) -> dict[str, list[str]]:
    settings: dict[str, list[str]] = {}
    for line in path.read_text().splitlines():
        if "=" in line and not line.startswith("#"):
            key, value = line.split("=", 1)
            settings.setdefault(key, []).append(value)
    return settings


def package_version() -> str:
    return re.search(r'__version__ = "([^"]+)"', (REPO / "compass_slurm" / "__init__.py").read_text()).group(1)


def test_install_as_the_admin_guide_says_then_upgrade_in_place(machine: Machine) -> None:
    commands = guide_commands()
    install, version_cmd, sbatch_help = commands[:3]
    assert install.startswith("scripts/install ") and version_cmd == "compass --version" and \
        sbatch_help == "compass-sbatch --help", commands
    assert commands[3:] == ["systemctl enable --now compass-daemon compass-report.timer", "compass doctor"]
    base = machine.base()
    prefix, bin_dir, unit_dir, config_dir = (f"{base}/{d}" for d in ("opt/compass", "bin", "units", "etc/compass"))
    places = ["--prefix", prefix, "--bin-dir", bin_dir, "--unit-dir", unit_dir, "--config-dir", config_dir]
    source = copy_source(machine, f"{base}/src")

    first = machine.run([f"{source}/{shlex.split(install)[0]}", *shlex.split(install)[1:], *places])
    assert first.returncode == 0, first.stderr[-3000:]
    if isinstance(machine, Chroot) and machine.new_layer and machine.suite == "noble":
        assert "installing python3 python3-venv with apt" in first.stderr, first.stderr  # minbase has no python3
    assert "externally-managed" not in first.stderr.lower()

    # the venv is the distribution's python's, whatever python3 comes first on PATH
    pyvenv = machine.inside(f"{prefix}/venv/pyvenv.cfg").read_text()
    assert re.search(r"^home = /usr/bin$", pyvenv, re.M), pyvenv
    version = machine.run([f"{bin_dir}/compass", "--version"])
    assert (version.returncode, version.stdout.strip()) == (0, f"compass {package_version()}"), version.stderr
    if "mysql,postgresql" in install:  # the extras' drivers, for a server log
        drivers = machine.run([f"{prefix}/venv/bin/python", "-c", "import pymysql, psycopg"])
        assert drivers.returncode == 0, drivers.stderr
    sbatch = machine.run([f"{bin_dir}/compass-sbatch", "--help"], env={"COMPASS_SBATCH": "/bin/true"})
    assert sbatch.returncode == 0 and sbatch.stdout.startswith("compass-sbatch [--migratable]"), sbatch.stderr
    config = f"{config_dir}/config.toml"
    doctor = machine.run([f"{bin_dir}/compass", "doctor"], env={"COMPASS_CONFIG": config})
    assert doctor.returncode in (0, 1) and "PASS installation:" in doctor.stdout, doctor.stdout + doctor.stderr
    assert "Traceback" not in doctor.stdout + doctor.stderr

    daemon = unit_settings(machine.inside(f"{unit_dir}/compass-daemon.service"))
    report = unit_settings(machine.inside(f"{unit_dir}/compass-report.service"))
    assert daemon["ExecStart"] == [f"{prefix}/venv/bin/compass daemon --config {config}"]
    assert report["ExecStart"][0].startswith(f"{prefix}/venv/bin/compass report ")
    assert report["Environment"] == [f"COMPASS_CONFIG={config}"]
    assert os.access(machine.inside(f"{prefix}/venv/bin/compass"), os.X_OK)
    for unit in (daemon, report):
        assert unit["StateDirectoryMode"] == ["0750"] and unit["ProtectSystem"] == ["strict"]
        for doc in unit["Documentation"]:
            assert machine.inside(doc.removeprefix("file://")).is_file(), doc
    assert daemon["RuntimeDirectoryMode"] == ["0755"]  # every user's wrapper reaches the socket
    assert machine.inside(f"{unit_dir}/compass-report.timer").is_file()
    cron = machine.inside(f"{prefix}/share/compass_slurm/cron.d/compass-report").read_text()  # as the units
    assert f"COMPASS_CONFIG={config}\n" in cron and f" root {prefix}/venv/bin/compass report " in cron, cron
    if shutil.which("systemd-analyze") and not isinstance(machine, Chroot):
        verify = machine.run(["systemd-analyze", "verify", *(f"{unit_dir}/{u}" for u in (
            "compass-daemon.service", "compass-report.service", "compass-report.timer"))])
        assert verify.returncode == 0, verify.stderr
    assert machine.inside(config).read_text() == (REPO / "etc" / "config.toml").read_text()

    # the site's own config, and a decision log of the schema before (1), as 0.1.0's daemon left them
    state = f"{base}/var/lib/compass"
    machine.inside(state).mkdir(parents=True)
    log = machine.inside(f"{state}/compass.db")
    site = machine.inside(config).read_text().replace('db = "sqlite:////var/lib/compass/compass.db"',
                                                      f'db = "sqlite:///{state}/compass.db"') + "# ours\n"
    assert site != machine.inside(config).read_text()
    machine.inside(config).write_text(site)
    made = machine.run([f"{prefix}/venv/bin/python", "-c", "import sys; from compass_slurm.service.store import "
                        "Store, ErrorRecord; s = Store.open(sys.argv[1]); s.record_error(ErrorRecord('x', 'kept'));"
                        " s.close()", f"sqlite:///{state}/compass.db"])
    assert made.returncode == 0, made.stderr
    with closing(sqlite3.connect(log)) as conn, conn:  # closed, or the overlay stays busy
        conn.execute("ALTER TABLE decisions DROP COLUMN from_nodes")
        conn.execute("DROP TABLE leader")
        conn.execute("UPDATE schema_version SET version = 1")
    marker = machine.inside(f"{prefix}/venv/kept-by-the-upgrade")
    marker.write_text("")

    newer = copy_source(machine, f"{base}/src-newer", version=f"{package_version()}.post1")
    second = machine.run([f"{newer}/{shlex.split(install)[0]}", *shlex.split(install)[1:], *places])
    assert second.returncode == 0, second.stderr[-3000:]
    assert f"upgrading {prefix}/venv" in second.stderr and marker.exists()  # in place, not made anew
    assert f"schema version {SCHEMA_VERSION}, upgraded" in second.stderr, second.stderr
    version = machine.run([f"{bin_dir}/compass", "--version"])
    assert version.stdout.strip() == f"compass {package_version()}.post1", version.stderr
    assert machine.inside(config).read_text() == site  # kept
    assert machine.inside(f"{config}.example").read_text() == (REPO / "etc" / "config.toml").read_text()
    with closing(sqlite3.connect(log)) as conn:
        assert conn.execute("SELECT version FROM schema_version").fetchall() == [(SCHEMA_VERSION,)]
        assert conn.execute("SELECT message FROM errors").fetchall() == [("kept",)]
        assert "from_nodes" in {row[1] for row in conn.execute("PRAGMA table_info(decisions)")}
    decisions = machine.run([f"{bin_dir}/compass", "decisions", "--json"], env={"COMPASS_CONFIG": config})
    assert decisions.returncode == 0 and json.loads(decisions.stdout) == [], decisions.stderr
    if isinstance(machine, Chroot):
        machine.passed = True
