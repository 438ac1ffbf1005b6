"""Cycles are at least min_cycle_spacing apart, whatever wakes them: a burst of the control socket's
``submitted`` from a user's process costs at most the cycles that spacing allows (its pokes coalesce); while news
comes faster than cycles the spacing doubles up to the interval, and news of one job at most brings it back."""

from __future__ import annotations

import os
import shutil
import tempfile
import threading
import time
from dataclasses import replace
from pathlib import Path

import pytest

from compass_slurm.config import Config, load_config
from compass_slurm.service.control import ControlServer
from compass_slurm.service.control_client import request
from compass_slurm.service.daemon import LOOK_SPACING_PER_S, Daemon
from compass_slurm.slurm.snapshot import SnapshotBackend
from compass_slurm.slurm.state import Look, SlurmJob

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
    """Counts the looks (and, with ``_running``, notes each cycle's start); before each read or look, ``arriving``
    managed jobs are submitted, which it shows pending with every one submitted before."""

    def __init__(self, state) -> None:
        super().__init__(state, out=None)
        #: when each cycle began, as the loop spaces them (``_running``)
        self.starts: list[float] = []
        self.looks = 0
        self.arriving = 0
        self.submitted: list[SlurmJob] = []

    def _submit(self) -> None:
        first = len(self.submitted) + 1000
        self.submitted += [pending(str(first + k), gpus=1) for k in range(self.arriving)]

    def read_state(self):
        self._submit()
        state = super().read_state()
        return replace(state, jobs=state.jobs + tuple(self.submitted))

    def look(self):
        self.looks += 1
        self._submit()
        return Look(frozenset(["7", *(job.id for job in self.submitted)]), frozenset())


def _running(daemon: Daemon, interval: float) -> threading.Thread:
    """The daemon's loop in a thread, each cycle's start noted in its backend's ``starts`` (not its read's time: how
    far into its cycle a read comes varies by more than the slack a spacing test can allow on a loaded host)."""
    cycle = daemon.cycle

    def noted():
        daemon.backend.starts.append(time.monotonic())
        return cycle()

    daemon.cycle = noted
    loop = threading.Thread(target=daemon.run, args=(interval,), daemon=True)
    loop.start()
    return loop


def _gaps(starts: list[float]) -> list[float]:
    return [b - a for a, b in zip(starts, starts[1:])]


def _spaced(gaps: list[float], expected: list[float]) -> bool:
    """Whether the gaps between cycle starts are the spacings expected: never less (but for a millisecond between
    the loop's clock reading and ours), and more only by a cycle and a look (a loaded host)."""
    return len(gaps) >= len(expected) and all(e - 0.001 <= g < e + 0.15 for g, e in zip(gaps, expected))


def test_a_burst_of_pokes_from_a_user_costs_only_the_cycles_the_spacing_allows():
    spacing = 0.5
    backend = Counting(cluster(nodes(2), [pending("7", gpus=1)]))
    daemon = Daemon(Config(anchors="", watch=0.0, min_cycle_spacing=spacing), backend, None)
    rundir = Path(tempfile.mkdtemp(prefix="compass-spacing-"))
    rundir.chmod(0o755)  # another uid's client can reach the socket
    try:
        with ControlServer(rundir / "compass.sock", daemon.handlers()) as server:
            loop = _running(daemon, 3600.0)
            took = _burst(server.path)
            time.sleep(spacing * 1.5)  # the cycle the last pokes asked for
            daemon.shutdown()
            loop.join(10)
    finally:
        shutil.rmtree(rundir, ignore_errors=True)
    gaps = _gaps(backend.starts)
    assert len(backend.starts) >= 2, "the pokes woke a cycle"
    assert min(gaps) >= spacing * 0.99, gaps
    # the first cycle, then at most one per spacing while the burst lasted, and the one its last pokes asked for
    assert len(backend.starts) <= 2 + took / spacing + 1, (len(backend.starts), took)


@pytest.mark.parametrize("env, expected", [({}, 1.0), ({"COMPASS_MIN_CYCLE_SPACING": "0.25"}, 0.25)])
def test_the_spacing_is_a_setting(tmp_path, env, expected):
    (tmp_path / "config.toml").write_text("")
    assert load_config(tmp_path / "config.toml", environ=env).min_cycle_spacing == expected


SPACING, INTERVAL = 0.1, 0.8


def _started(watch: float, arriving: int) -> tuple[Daemon, Counting, threading.Thread]:
    """A daemon at SPACING and INTERVAL, running; each of its looks finds ``arriving`` new jobs."""
    backend = Counting(cluster(nodes(2), [pending("7", gpus=1)]))
    backend.arriving = arriving
    daemon = Daemon(Config(anchors="", watch=watch, min_cycle_spacing=SPACING), backend, None)
    return daemon, backend, _running(daemon, INTERVAL)


def _stopped(daemon: Daemon, loop: threading.Thread) -> None:
    daemon.shutdown()
    loop.join(10)


def test_a_stream_of_news_doubles_the_spacing_up_to_the_interval_and_no_look_falls_inside_it():
    daemon, backend, loop = _started(watch=0.05, arriving=2)
    time.sleep(3.0)
    _stopped(daemon, loop)
    gaps = _gaps(backend.starts)
    assert _spaced(gaps, [0.1, 0.2, 0.4] + [INTERVAL] * (len(gaps) - 3)), gaps
    # one look at the end of each spacing shorter than the interval, none inside it; at the interval the cycle
    # reads every job itself, and what it finds new keeps the spacing
    assert backend.looks == 3 and len(gaps) >= 5, (backend.looks, gaps)
    assert daemon.spacing == INTERVAL and daemon.arrived in (None, 2)


def test_a_quiet_spacing_brings_it_back_so_a_lone_job_starts_a_cycle_at_once():
    daemon, backend, loop = _started(watch=0.05, arriving=2)
    time.sleep(1.5)  # the stream has pushed the spacing to the interval
    backend.arriving = 0
    time.sleep(2 * INTERVAL)  # a quiet spacing, then the interval's own cycles
    assert daemon.spacing == SPACING
    quiet = len(backend.starts)
    while len(backend.starts) == quiet:  # an interval's cycle has just begun
        time.sleep(0.005)
    daemon.poke()  # a lone job: served once the spacing ends, not at the next interval
    time.sleep(INTERVAL / 2)
    _stopped(daemon, loop)
    assert _spaced(_gaps(backend.starts[quiet:quiet + 2]), [SPACING]), _gaps(backend.starts[quiet:])


def test_one_job_after_another_keeps_the_least_spacing():
    daemon, backend, loop = _started(watch=0.05, arriving=1)  # each look finds the next job: a user waiting on each
    time.sleep(1.0)
    _stopped(daemon, loop)
    assert daemon.spacing == SPACING
    assert _spaced(_gaps(backend.starts), [SPACING] * 5), _gaps(backend.starts)


def test_without_looks_the_pokes_alone_set_the_spacing():
    daemon, backend, loop = _started(watch=0.0, arriving=0)
    deadline = time.monotonic() + 1.0
    while time.monotonic() < deadline:  # a poke every 10 ms for a second
        daemon.poke()
        time.sleep(0.01)
    _stopped(daemon, loop)
    assert backend.looks == 0
    assert _spaced(_gaps(backend.starts), [0.1, 0.2, 0.4]), _gaps(backend.starts)


class SlowLooks(Counting):
    """A look that takes LOOK_S (slurmctld packing every job of a big quiet cluster) and finds nothing."""

    def look(self):
        time.sleep(LOOK_S)
        return super().look()


LOOK_S = 0.02


def test_a_look_that_takes_long_spaces_the_next_ones():
    """At LOOK_SPACING_PER_S looks take at most 1/20 of the time: 20 ms looks come about 0.4 s apart, not every
    watch = 0.05 s; a look that would fall in the last stretch before the interval's cycle is not made."""
    backend = SlowLooks(cluster(nodes(2), [pending("7", gpus=1)]))
    daemon = Daemon(Config(anchors="", watch=0.05, min_cycle_spacing=SPACING), backend, None)
    loop = _running(daemon, 2.0)
    time.sleep(3.0)
    _stopped(daemon, loop)
    assert daemon._watch >= LOOK_SPACING_PER_S * LOOK_S
    # the first cycle's spacing, then a look per 0.4 s or more until the next cycle, 2 s on: at most 5 in each
    # interval, against 38 at watch alone
    assert 2 <= backend.looks <= 10, backend.looks
