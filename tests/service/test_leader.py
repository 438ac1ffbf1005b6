"""One active daemon (service/leader.py) on a real log, SQLite, MariaDB and PostgreSQL: one leader at a time, a
standby that takes over only when the lease stood still for a whole lease on its own clock, fencing before
the lease ends, and the daemon that stands by changing no job."""

from __future__ import annotations

import random
from dataclasses import replace
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import pytest
from test_daemon_unit import Clock, cluster, nodes, pending

from compass_slurm.config import Config
from compass_slurm.service.daemon import Daemon
from compass_slurm.service.leader import LONE_LEASE_S, Leadership
from compass_slurm.service.store import Store, StoreError
from compass_slurm.slurm.snapshot import SnapshotBackend

LEASE = 10.0


class Ticks:
    """A monotonic clock the test moves."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def log(log_url: str) -> Iterator[str]:
    Store.open(log_url).close()  # the tables, as a daemon makes them
    yield log_url


def daemon_on(log: str, clock: Ticks, host: str, pid: int, **kw) -> Leadership:
    return Leadership(log, LEASE, clock=clock, host=host, pid=pid, alive=kw.pop("alive", lambda pid: True), **kw)


def test_the_first_daemon_leads_and_a_second_stands_by_and_notes_it_is_there(log):
    clock = Ticks()
    a, b = daemon_on(log, clock, "ctl1", 11), daemon_on(log, clock, "ctl2", 22)
    assert a.step() and a.leads and a.may_act()
    assert not b.step() and not b.leads and not b.may_act() and b.role == "standby"
    assert b.leader().host == "ctl1" and b.leader().pid == 11 and b.leader().token == 1
    a.step()  # the renewal sees the standby: the short lease applies from now on
    with Store.open(log) as store:
        row = store.leader()
    assert (row.holder, row.beat, row.alone, row.standby) == (a.holder, 1, False, b.holder)


def test_a_standby_takes_over_only_after_a_whole_lease_of_no_renewal_and_the_leader_has_fenced_itself(log):
    clock = Ticks()
    a, b = daemon_on(log, clock, "ctl1", 11), daemon_on(log, clock, "ctl2", 22)
    a.step(), b.step(), a.step()  # a leads, b is there, a's renewal knows it
    b.step()
    clock.now += LEASE - 1  # a stops renewing (hung, or cut off from the log)
    assert not b.step() and not b.leads
    assert not a.may_act(renew=False)  # past lease - guard: a stopped changing jobs already
    clock.now += 2
    assert b.step() and b.leads and b.may_act()
    assert b.leader().token == 2
    a.step()  # a comes back: its renewal fails (the token moved on), it stands by
    assert not a.leads and a.leader().host == "ctl2"


def test_a_leader_that_dies_before_its_first_renewal_is_taken_over_within_a_lease(log):
    """A claim's row says alone, so a standby waited a lone lease (600 s) for a new leader that died before it first
    renewed (seen live: right after a log outage, a kill -9 took 10 minutes to fail over). A claim never renewed is
    waited for a lease, and its leader fences on that lease until it renews."""
    clock = Ticks()
    a, b, c = (daemon_on(log, clock, f"ctl{i}", i) for i in (1, 2, 3))
    a.step(), b.step(), c.step(), a.step(), b.step(), c.step()
    clock.now += LEASE + 1  # a is gone
    assert b.step() and b.leads
    with Store.open(log) as store:
        assert (store.leader().alone, store.leader().beat) == (True, 0)
    c.step()  # b dies before it renews: c sees its claim's version, and waits a lease from there
    clock.now += LEASE - 1
    assert not c.step() and not c.leads
    assert not b.may_act(renew=False)  # b, cut off, stopped before that
    clock.now += 2
    assert c.step() and c.leads and c.leader().token == 3


def test_a_new_leaders_own_note_as_a_standby_leaves_it_alone(log):
    """The row still held the new leader's note from when it stood by: it renewed as not alone for three leases, so a
    log outage stopped it after a lease, not the lone lease, and a stop kept its pins for a standby that is not
    there."""
    clock = Ticks()
    a, b = daemon_on(log, clock, "ctl1", 11), daemon_on(log, clock, "ctl2", 22)
    a.step(), b.step(), a.step(), b.step()
    clock.now += LEASE + 1  # a is gone
    assert b.step() and b.leads
    clock.now += LEASE / 2
    b.step()
    assert b.alone_now()
def test_a_leader_taken_over_does_not_take_the_lead_straight_back(log):
    """A leader whose renewal fails because another claimed the lead starts its wait from that claim, as a
    standby: it took the lead back in the same step (seen live after a SIGSTOP of the leader)."""
    clock = Ticks()
    a, b = daemon_on(log, clock, "ctl1", 11), daemon_on(log, clock, "ctl2", 22)
    a.step(), b.step(), a.step(), b.step()
    clock.now += LEASE + 1  # a hangs
    assert b.step() and b.leads
    clock.now += LEASE / 2
    assert a.step() and not a.leads  # its renewal fails: it stands by
    for _ in range(4):
        clock.now += LEASE / 2
        b.step()
        a.step()
        assert b.leads and not a.leads


def test_a_leader_renewing_every_cycle_keeps_the_lead_against_a_standby(log):
    clock = Ticks()
    a, b = daemon_on(log, clock, "ctl1", 11), daemon_on(log, clock, "ctl2", 22)
    a.step()
    for _ in range(20):
        clock.now += LEASE / 2
        b.step()
        a.step()
        assert a.leads and not b.leads and a.may_act()


def test_past_half_its_lease_the_leader_renews_before_acting(log):
    clock = Ticks()
    a = daemon_on(log, clock, "ctl1", 11)
    a.step()
    clock.now += LEASE * 0.6
    assert a.may_act()  # renewed on the way
    with Store.open(log) as store:
        assert store.leader().beat == 1
    assert a.renewed_at == clock.now


def test_a_lone_leader_keeps_its_lead_through_a_log_outage_and_a_standby_waits_the_lone_lease(log):
    clock = Ticks()
    a = daemon_on(log, clock, "ctl1", 11)
    a.step(), a.step()
    assert a.alone  # no standby said it was there
    store = a.store
    a.store = Broken()  # the log goes down for a
    clock.now += 120
    assert not a.step() and a.leads and a.may_act()  # 2 min without the log: still placing (spooling)
    a.store = store
    b = daemon_on(log, clock, "ctl2", 22)  # a standby appears meanwhile: the row says "alone"
    b.step()
    clock.now += 5 * LEASE
    assert not b.step() and not b.leads
    clock.now += LONE_LEASE_S
    assert b.step() and b.leads
    assert not a.may_act(renew=False)


def test_a_leader_with_a_standby_stops_changing_jobs_when_its_lease_runs_out_in_an_outage(log):
    clock = Ticks()
    a, b = daemon_on(log, clock, "ctl1", 11), daemon_on(log, clock, "ctl2", 22)
    a.step(), b.step(), a.step()
    a.store = Broken()
    clock.now += LEASE / 4
    assert a.may_act()
    clock.now += LEASE / 4 + 0.1
    assert not a.may_act() and not a.leads


def test_a_leader_of_this_host_that_is_gone_is_taken_over_at_once(log):
    clock = Ticks()
    dead = daemon_on(log, clock, "ctl1", 11)
    dead.step()
    after = daemon_on(log, clock, "ctl1", 12, alive=lambda pid: pid != 11)  # systemd restarted it
    assert after.step() and after.leads and after.leader().token == 2


def test_a_daemon_that_stops_resigns_and_the_standby_leads_at_its_next_cycle(log):
    clock = Ticks()
    a, b = daemon_on(log, clock, "ctl1", 11), daemon_on(log, clock, "ctl2", 22)
    a.step(), b.step()
    a.close()
    assert b.step() and b.leads


def test_of_two_standbys_claiming_one_stale_lease_one_wins(log):
    clock = Ticks()
    a = daemon_on(log, clock, "ctl1", 11)
    a.step()
    b, c = daemon_on(log, clock, "ctl2", 22), daemon_on(log, clock, "ctl3", 33)
    b.step(), c.step(), a.step()
    b.step(), c.step()
    clock.now += LEASE + 1
    assert [b.step(), c.step()] == [True, False]
    assert b.leads and not c.leads and c.leader().host == "ctl2"


def test_a_log_never_reached_leaves_a_daemon_alone_to_lead_for_the_lone_lease(tmp_path):
    clock = Ticks()
    broken = tmp_path / "log.db"
    broken.write_bytes(b"no database" * 100)
    a = daemon_on(f"sqlite:///{broken}", clock, "ctl1", 11)
    assert a.step() and a.leads and a.may_act()
    clock.now += LONE_LEASE_S - LEASE
    assert a.may_act() and a.step() is False  # still failing: still alone
    clock.now += LEASE - a.guard
    assert not a.may_act()  # then it stops: a standby may have appeared meanwhile


@pytest.mark.parametrize("seed", range(4))
def test_random_schedules_never_let_two_daemons_act_at_once(log, seed):
    """Three daemons, each cycling at its own pace, pausing, losing the log, dying and restarting: at no instant do
    two of them may_act (the fence checked just before each would act)."""
    rng, server = random.Random(seed), not log.startswith("sqlite")
    clock = Ticks()
    daemons = [daemon_on(log, clock, f"ctl{i}", 10 + i) for i in range(3)]
    stores = [None] * 3
    for _ in range(400):
        clock.now += rng.uniform(0.1, LEASE / 3)
        k = rng.randrange(3)
        d, roll = daemons[k], rng.random()
        if roll < 0.05:  # it dies without resigning; a new process on its host takes its place
            daemons[k] = daemon_on(log, clock, d.host, d.pid + 100)
        elif roll < 0.15 and server:  # the log goes away for it, or comes back (a SQLite file fails for all
            # its daemons at once, which then lead alone each: two daemons on one host are no backup)
            if isinstance(d.store, Broken):
                d.store, stores[k] = stores[k], None
            else:
                stores[k], d.store = d.store or Store.open(log), Broken()
        elif roll < 0.25:
            continue  # it pauses (a long cycle, a stop): nothing
        else:
            d.step()
        acting = [i for i, x in enumerate(daemons) if x.may_act()]
        assert len(acting) <= 1, (acting, clock.now)
    for d in daemons:
        if isinstance(d.store, Broken):
            d.store = None
        d.close()


class Broken:
    """A log that answers nothing."""

    def __getattr__(self, name):
        def fail(*args, **kwargs):
            raise StoreError("cannot write to the decision log: the server is gone")
        return fail


# -- the daemon standing by ---------------------------------------------------------------------


def test_a_standby_daemon_changes_no_job_and_writes_nothing_and_takes_over_from_the_log(tmp_path):
    db = f"sqlite:///{tmp_path / 'log.db'}"
    state = cluster(nodes(2), [pending("10", gpus=4)])
    first_backend, second_backend = SnapshotBackend(state, out=None), SnapshotBackend(state, out=None)
    config = Config(anchors=str(tmp_path / "anchors"), metrics_textfile=str(tmp_path / "m.prom"))
    first = Daemon(config, first_backend, db, clock=Clock())
    standby = Daemon(config, second_backend, db, clock=Clock())
    standby.leadership.host = "elsewhere"  # another controller's host
    report = first.cycle()
    assert [(d.job_id, d.action) for d in report.decisions] == [("10", "placed")]
    with Store.open(db) as store:
        cycles = len({s.cycle for s in store.samples()})
        assert store.samples()[-1].actions == {"placed": 1}  # the cycle's tally, for compass report
    assert standby.cycle().decisions == [] and standby.cycle().decisions == []
    assert second_backend.commands == []  # not even a lease renewed
    assert "compass_leader 0" in (tmp_path / "m.prom").read_text()
    with Store.open(db) as store:
        assert len({s.cycle for s in store.samples()}) == cycles  # its cycles are not logged
    assert standby.handlers()["ping"]({}, None)["role"] == "standby"
    first.close()  # resigns
    second_backend.state = cluster(nodes(2), [replace(pending("10", gpus=4), required_nodes=report.decisions[0].nodes)])
    standby.cycle()
    assert standby.leadership.leads
    assert [d.action for d in Store.open(db).decisions(job="10")] == ["placed"]  # taken over, not placed again


def test_a_standby_that_stops_withdraws_and_the_leader_then_sees_itself_alone(log):
    """What a leader stopping asks before it clears its pins: whether a standby is there to take them over."""
    clock = Ticks()
    a, b = daemon_on(log, clock, "ctl1", 11), daemon_on(log, clock, "ctl2", 22)
    a.step(), b.step()
    assert not a.alone_now() and a.leads
    b.close()
    assert a.alone_now() and a.leads
