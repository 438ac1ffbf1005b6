"""Cycles are at least min_cycle_spacing apart, whatever wakes them: a burst of the control socket's
``submitted`` from a user's process costs at most the cycles that spacing allows (its pokes coalesce)."""

from __future__ import annotations

import os
import shutil
import tempfile
import threading
import time
from pathlib import Path

import pytest

from compass_slurm.config import Config, load_config
from compass_slurm.service.control import ControlServer
from compass_slurm.service.control_client import request
from compass_slurm.service.daemon import Daemon
from compass_slurm.slurm.snapshot import SnapshotBackend

from tests.service.test_daemon_unit import cluster, nodes, pending

NOBODY = 65534


def _burst(path: Path) -> float:
    """1,000 ``submitted`` in a row from a forked child, as uid 65534 when we are root; how long they took."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: leaves without running pytest's teardown
        code = 1
        try:
            os.close(read)
            if os.geteuid() == 0:
                os.setgid(NOBODY)
                os.setuid(NOBODY)
            start = time.monotonic()
            replies = [request(path, {"op": "submitted", "job": str(n + 1)}, timeout=5) for n in range(1000)]
            refused = [r for r in replies if not r["ok"]]
            os.write(write, (repr(refused[:1]) if refused else str(time.monotonic() - start)).encode())
            code = 1 if refused else 0
        except BaseException as err:
            os.write(write, repr(err).encode())
        finally:
            os._exit(code)
    os.close(write)
    with os.fdopen(read, "rb") as pipe:
        data = pipe.read()
    _, status = os.waitpid(pid, 0)
    assert status == 0, f"the burst's child failed: {data.decode()}"
    return float(data)


class Counting(SnapshotBackend):
    def __init__(self, state) -> None:
        super().__init__(state, out=None)
        self.reads: list[float] = []

    def read_state(self):
        self.reads.append(time.monotonic())
        return super().read_state()


def test_a_burst_of_pokes_from_a_user_costs_only_the_cycles_the_spacing_allows():
    spacing = 0.5
    backend = Counting(cluster(nodes(2), [pending("7", gpus=1)]))
    daemon = Daemon(Config(anchors="", watch=0.0, min_cycle_spacing=spacing), backend, None)
    rundir = Path(tempfile.mkdtemp(prefix="compass-spacing-"))
    rundir.chmod(0o755)  # another uid's client can reach the socket
    try:
        with ControlServer(rundir / "compass.sock", daemon.handlers()) as server:
            loop = threading.Thread(target=daemon.run, args=(3600.0,), daemon=True)
            loop.start()
            took = _burst(server.path)
            time.sleep(spacing * 1.5)  # the cycle the last pokes asked for
            daemon.shutdown()
            loop.join(10)
    finally:
        shutil.rmtree(rundir, ignore_errors=True)
    gaps = [b - a for a, b in zip(backend.reads, backend.reads[1:])]
    assert len(backend.reads) >= 2, "the pokes woke a cycle"
    assert min(gaps) >= spacing * 0.99, gaps
    # the first cycle, then at most one per spacing while the burst lasted, and the one its last pokes asked for
    assert len(backend.reads) <= 2 + took / spacing + 1, (len(backend.reads), took)


@pytest.mark.parametrize("env, expected", [({}, 1.0), ({"COMPASS_MIN_CYCLE_SPACING": "0.25"}, 0.25)])
def test_the_spacing_is_a_setting(tmp_path, env, expected):
    (tmp_path / "config.toml").write_text("")
    assert load_config(tmp_path / "config.toml", environ=env).min_cycle_spacing == expected
