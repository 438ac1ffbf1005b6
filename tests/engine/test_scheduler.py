"""The Scheduler's queue disciplines on hand-built queues: FIFO, EASY backfill and its reservation."""

from __future__ import annotations

import math

import pytest

from compass_slurm.engine.model import EngineError, Job, Node
from compass_slurm.engine.policies.base import make_policy
from compass_slurm.engine.policies.baselines import BestFit
from compass_slurm.engine.policies.slurm_like import slurm_nodes
from compass_slurm.engine.scheduler import Entry, Scheduler


def cluster(n: int, gpus: int = 8) -> list[Node]:
    return [Node(f"n{i}", gpus) for i in range(n)]


def scheduler(n: int, policy: str = "best-fit", queue: str = "backfill", **options) -> Scheduler:
    return Scheduler(make_policy(policy, cluster(n)), queue, **options)


def started(step) -> list[str]:
    return [d.job for d in step.decisions]


def test_unknown_queue_and_bad_estimate_factor_are_refused():
    with pytest.raises(EngineError, match="unknown queue 'lifo'; choose from: fifo, backfill"):
        scheduler(1, queue="lifo")
    with pytest.raises(EngineError, match="estimate factor"):
        scheduler(1, estimate_factor=0)


@pytest.mark.parametrize("queue", ["fifo", "backfill"])
def test_refine_narrows_a_job_s_nodes_by_what_started_before_it_in_the_drain(queue):
    # The driver counts what the engine does not (the daemon: CPUs, memory): b may not join a on its node.
    s = scheduler(2, queue=queue)
    seen = []
    s.on_start = lambda decision: seen.append(decision.nodes)
    s.refine = lambda job, eligible: frozenset({"n0", "n1"}).difference(*seen) if seen else eligible
    s.submit(Job("a", 1, 2), limit=10)
    s.submit(Job("b", 1, 2), limit=10)
    step = s.drain(0)
    assert [(d.job, d.nodes) for d in step.decisions] == [("a", ("n0",)), ("b", ("n1",))]
    s.check()


def test_fifo_starts_nothing_past_a_blocked_head():
    s = scheduler(1, queue="fifo")
    s.arrive(Job("a", 1, 6), now=0, limit=10)
    s.submit(Job("h", 1, 8), limit=1)
    s.submit(Job("small", 1, 2), limit=1)
    assert started(s.drain(0)) == [] and s.reservation is None


def test_shadow_time_counts_jobs_started_earlier_in_the_same_drain():
    # a runs until 10 on 4 GPUs; b (4 GPUs, until 100) starts in the same drain that finds h blocked:
    # h fits only when b ends too, at 100 (the old shadow missed b and said 10).
    s = scheduler(1)
    s.arrive(Job("a", 1, 4), now=0, limit=10)
    s.submit(Job("b", 1, 4), limit=100)
    s.submit(Job("h", 1, 8), limit=5)
    assert started(s.drain(0)) == ["b"]
    res = s.reservation
    assert (res.job, res.shadow, res.nodes) == ("h", 100, {0: 8})
    s.check()


def test_reservation_is_node_aware():
    # n0: a (4 GPUs) runs long; n1: b (4 GPUs) ends at 100. h needs a whole node: 8 GPUs are
    # free in total now, but h fits only at 100, on n1. A long 4-GPU job may start on n0
    # (a raw GPU count would refuse it); another one may not take n1's reserved GPUs; a
    # short one may.
    s = scheduler(2, "worst-fit")
    s.arrive(Job("a", 1, 4), now=0, limit=1000)
    s.arrive(Job("b", 1, 4), now=0, limit=100)
    assert s.policy.cluster.location[("b", 0)] == 1
    s.submit(Job("h", 1, 8), limit=10)
    for job_id, limit in [("long1", 500), ("long2", 500), ("short", 50)]:
        s.submit(Job(job_id, 1, 4), limit=limit)
    assert started(s.drain(0)) == ["long1", "short"]
    assert s.policy.cluster.location[("long1", 0)] == 0
    assert s.policy.cluster.location[("short", 0)] == 1
    assert (s.reservation.shadow, s.reservation.nodes) == (100, {1: 8})
    s.check()
    # b and short end: h starts at its shadow time, long2 then backfills nowhere (no room)
    s.depart("short", now=50)
    step = s.depart("b", now=100)
    assert started(step) == ["h"]


def test_estimate_factor_stretches_estimates():
    # with estimates 3x the limit, a job of 40 s is expected to run 120 s: past h's shadow time 100.
    s = scheduler(1, estimate_factor=3.0)
    s.arrive(Job("a", 1, 4), now=0, limit=100 / 3)
    s.submit(Job("h", 1, 8), limit=1)
    s.submit(Job("j", 1, 2), limit=40)
    assert started(s.drain(0)) == []
    assert s.reservation.shadow == pytest.approx(100)
    assert s.expected_end("a") == pytest.approx(100)


def test_a_head_without_estimates_reserves_nothing():
    # a has no time limit: h cannot be planned, so the next job may start wherever it fits.
    s = scheduler(1)
    s.adopt(Job("a", 1, 4), ["n0"], start=0)
    assert math.isinf(s.expected_end("a"))
    s.submit(Job("h", 1, 8), limit=1)
    s.submit(Job("j", 1, 2), limit=1e6)
    assert started(s.drain(5)) == ["j"]
    assert s.reservation is None


def test_a_job_past_its_estimate_is_expected_to_end_now():
    s = scheduler(1)
    s.arrive(Job("a", 1, 4), now=0, limit=10)
    s.submit(Job("h", 1, 8), limit=1)
    s.drain(50)
    assert s.reservation.shadow == 50


def test_requeue_keeps_unchanged_entries_and_replaces_the_rest():
    s = scheduler(1)
    s.arrive(Job("a", 1, 8), now=0, limit=10)
    x, y, z = Job("x", 1, 2), Job("y", 1, 2), Job("z", 1, 4)
    s.requeue([Entry(x, None, 100), Entry(y, None, 100), Entry(z, None, 100)])
    kept = s.queue["y"]
    s.requeue([Entry(z, None, 100), kept, Entry(Job("x", 1, 2), None, 5)])  # x: a new job object, a new limit
    assert list(s.queue) == ["z", "y", "x"] and s.queue["y"] is kept and s.queue["x"].limit == 5
    assert s._least_estimate((1, 2, False, None, True)) == 5  # the replaced entry's old estimate is skipped
    s.requeue([Entry(y, None, 100)])
    assert list(s.queue) == ["y"]
    s.check()
    s.expect({"a": 50})
    s.expect({"a": 20})  # replaces, as the daemon tells it each cycle
    assert s.expected_end("a") == 20
    s.check()
    with pytest.raises(EngineError, match="duplicate job id x"):
        s.requeue([Entry(x, None, 1), Entry(y, None, 1), Entry(x, None, 1)])
    assert list(s.queue) == ["y"]  # a queue refused leaves the one before


def test_an_equal_new_entry_takes_the_place_of_the_old_one_uncounted_again():
    s = scheduler(1)
    x, y = Job("x", 1, 2), Job("y", 1, 2)
    s.requeue([Entry(x, frozenset({"n0"}), 100), Entry(y, None, 100)])
    equal = Entry(x, frozenset({"n0"}), 100)  # another object: a job repriced by Slurm, say
    s.requeue([Entry(y, None, 100), equal])
    assert list(s.queue) == ["y", "x"] and s.queue["x"] is equal
    assert s._shapes[(1, 2, False, frozenset({"n0"}), True)] == 1
    s.requeue([Entry(x, None, 100), Entry(y, None, 100)])  # eligible nodes changed: counted in its new shape
    assert (1, 2, False, frozenset({"n0"}), True) not in s._shapes and s._shapes[(1, 2, False, None, True)] == 2
    s.check()


def test_a_requeued_queue_forgets_the_estimates_of_jobs_gone():
    s = scheduler(1)
    long = Entry(Job("long", 1, 1), None, 1000)
    for k in range(200):  # the job behind the new one keeps its entry: the heap is rebuilt with it
        s.requeue([Entry(Job(f"j{k}", 1, 1), None, 10), long])
    assert len(s._shortest[(1, 1, False, None, True)]) <= 2 * 2 + 64
    assert s._least_estimate((1, 1, False, None, True)) == 10
    s.requeue([long])
    assert s._least_estimate((1, 1, False, None, True)) == 1000
    s.check()


def test_unmanaged_jobs_are_placed_as_slurm_does_and_adopted_pinned():
    s = Scheduler(make_policy("compass", cluster(2)), "backfill", foreign=slurm_nodes)
    s.arrive(Job("m", 1, 1), now=0, limit=10)  # compass: a pool node (n0)
    step = s.arrive(Job("plain", 1, 2), now=0, limit=10, managed=False)
    (decision,) = step.decisions
    assert decision.nodes == ("n0",) and "adopted pinned" in decision.rule  # lowest-index node that fits
    assert not s.policy.cluster.jobs["plain"].migratable
    with pytest.raises(EngineError, match="not managed"):
        scheduler(1).arrive(Job("p", 1, 1), now=0, managed=False)


def test_withdraw_and_finish_keep_the_books():
    s = scheduler(1)
    s.arrive(Job("a", 1, 8), now=0, limit=10)
    s.submit(Job("b", 1, 8), limit=10)
    s.withdraw("b")
    assert not s.queue
    assert s.finish("a") == []
    s.check()
    with pytest.raises(EngineError, match="unknown job a"):
        s.finish("a")
    with pytest.raises(EngineError, match="not queued"):
        s.withdraw("a")
    with pytest.raises(EngineError, match="duplicate"):
        s.arrive(Job("c", 1, 1), now=0) and s.arrive(Job("c", 1, 1), now=0)


def test_check_catches_a_job_that_would_delay_the_reservation():
    s = scheduler(2, "worst-fit")
    s.arrive(Job("a", 1, 4), now=0, limit=1000)
    s.arrive(Job("b", 1, 4), now=0, limit=100)
    s.submit(Job("h", 1, 8), limit=10)
    s.drain(0)
    s.check()
    # an instance that runs past the shadow time lands on the reserved node behind the scheduler's back
    c = s.policy.cluster
    c.register(Job("sneak", 1, 2))
    c.add(("sneak", 0), 1)
    s._expect("sneak", 0, 500)
    with pytest.raises(AssertionError, match="node n1: 2 GPUs stay past the shadow time 100, 8 reserved for h"):
        s.check()


def test_slack_must_be_a_finite_number_of_estimates():
    for bad in (-1.0, math.inf, math.nan):
        with pytest.raises(EngineError, match="slack must be a number >= 0"):
            scheduler(1, slack=bad)


def test_slack_lets_1_gpu_jobs_delay_a_blocked_whole_node_head_up_to_its_first_deadline():
    # a (4 GPUs) ends at 100: h's first shadow time is 100, its deadline 100 + 0.5 x 100 = 150.
    s = scheduler(1, slack=0.5)
    s.arrive(Job("a", 1, 4), now=0, limit=100)
    s.submit(Job("h", 1, 8), limit=100)
    s.submit(Job("two", 1, 2), limit=140)  # not a 1-GPU job: EASY's rule (ends after 100)
    s.submit(Job("late", 1, 1), limit=160)  # ends after the deadline
    s.submit(Job("within", 1, 1), limit=140)
    assert started(s.drain(0)) == ["within"]
    assert s.reservation.shadow == 140  # delayed by it, not beyond the deadline
    s.check()
    # the deadline is the first one: the later shadow time does not renew the slack
    s.submit(Job("next", 1, 1), limit=145)  # ends at 155
    s.submit(Job("last", 1, 1), limit=139)  # ends at 149
    assert started(s.drain(10)) == ["last"]
    assert s.reservation.shadow == 149
    s.depart("a", now=100)
    s.depart("within", now=140)
    assert started(s.depart("last", now=149)) == ["h"]


def test_a_whole_node_head_that_fits_lets_1_gpu_jobs_go_first_then_starts_if_it_still_fits():
    s = scheduler(2, slack=1.0)
    s.arrive(Job("a", 1, 4), now=0, limit=1000)
    s.submit(Job("h", 1, 8), limit=100)
    s.submit(Job("j", 1, 1), limit=50)
    assert started(s.drain(0)) == ["j", "h"]  # best fit put j beside a: h kept its node, no GPU idled
    assert s.reservation is None


def test_a_whole_node_head_passed_within_its_slack_waits_no_later_than_its_deadline():
    s = scheduler(1, slack=1.0)
    s.submit(Job("h", 1, 8), limit=100)  # fits at 0: deadline 0 + 100
    s.submit(Job("j", 1, 1), limit=50)
    s.submit(Job("long", 1, 1), limit=150)  # would end after the deadline
    assert started(s.drain(0)) == ["j"]
    assert (s.reservation.job, s.reservation.shadow) == ("h", 50)
    s.check()
    s.submit(Job("k", 1, 1), limit=90)  # ends at 100: within the deadline
    assert started(s.drain(10)) == ["k"]
    s.depart("j", now=50)
    step = s.depart("k", now=100)
    assert started(step)[0] == "h"
    # past its deadline a head is not passed: the next one that fits starts first again
    s2 = scheduler(1, slack=0.1)
    s2.submit(Job("h", 1, 8), limit=100)
    s2.submit(Job("j", 1, 1), limit=5)
    assert started(s2.drain(0)) == ["j"]  # h's deadline is 10
    s2.submit(Job("m", 1, 1), limit=1)
    assert started(s2.depart("j", now=20)) == ["h"]  # j ran late: m, behind h, no longer goes first


def test_slack_keeps_easy_for_multi_node_heads():
    # the starvation case (tests/sim/test_starvation.py): a multi-node head keeps EASY's promise
    s = scheduler(2, slack=1.0)
    s.arrive(Job("a", 1, 4), now=0, limit=100)
    s.submit(Job("big", 2, 8), limit=100)
    s.submit(Job("j", 1, 1), limit=150)
    assert started(s.drain(0)) == []
    assert s.reservation.shadow == 100


@pytest.mark.parametrize(("queue", "restart_s", "worth"), [
    ("backfill", 100, 100 / (4 * 100)), ("backfill", 20, 100 / (4 * 20)), ("backfill", 0, math.inf),
    ("fifo", 100, math.inf)])
def test_a_blocked_head_s_expected_wait_over_the_restarts_is_what_moves_are_worth(queue, restart_s, worth):
    # a holds 4 of the 8 GPUs until 100: h (8 GPUs) waits 100 s by its reservation, which pays for
    # 100 / (ROOM_GATE x restart) moves; a restart that costs nothing pays for any, and so does any move
    # under fifo, which keeps no expected ends to say how long h waits.
    told = []

    class Listening(BestFit):
        def blocked(self, job, eligible=None, budget=None, worth=math.inf):
            told.append((job and job.id, worth))
            return super().blocked(job, eligible, budget, worth)

    s = Scheduler(Listening(cluster(1)), queue, restart_s=restart_s)
    s.arrive(Job("a", 1, 4), now=0, limit=100)
    s.submit(Job("h", 1, 8), limit=10)
    s.drain(0)
    assert [w for job, w in told if job == "h"] == [pytest.approx(worth)]
    with pytest.raises(EngineError, match="restart cost"):
        Scheduler(BestFit(cluster(1)), queue, restart_s=-1)
