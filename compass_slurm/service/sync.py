"""The cycle's first step: make the policy match what Slurm runs.

Jobs that ended are removed, GPU allocations the daemon did not make (foreign jobs,
jobs from before it started) are adopted, node availability is mirrored. When the
set of GPU nodes changes the policy is rebuilt from Slurm alone, and a restarted
daemon takes over the pins its predecessor logged (``take_over``); the places it
logged that Slurm never heard are re-planned, and checked against where Slurm ran
those jobs if it started them first (``left_queue``, ``ran_elsewhere``). What it learns of each job goes
into the JobBook (job_states.py).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence, Set
from dataclasses import replace
from itertools import compress
from operator import attrgetter, is_not

from ..engine.model import Decision, EngineError, Job, Migration, Node
from ..engine.policies.base import Policy
from ..slurm.claims import Eligible
from ..slurm.requests import adoption_order, id_order
from ..slurm.state import SlurmJob
from ..slurm.translate import Observation
from .bookkeeping import CycleReport, counts, fmt, log, per_node
from .job_states import JobBook, JobState
from .store import PINS, PLACES, DecisionRecord

ALLOC = attrgetter("alloc")
#: pending reasons of a pinned job that its pin caused: Slurm will never start it on those nodes
PIN_REFUSED = frozenset({"BadConstraints", "PartitionNodeLimit", "PartitionConfig"})
#: the reason of a migration's record that requeues a running job (a take-over knows the requeue by it)
REQUEUE = "compact: requeued"


def is_requeue(record: DecisionRecord) -> bool:
    """Whether ``record`` is a migration's requeue of a running job (still a job's latest place: not re-pinned yet)."""
    return record.action == "migrated" and record.reason == REQUEUE


def same_nodes(policy: Policy | None, obs: Observation) -> bool:
    """Whether ``policy`` was built for exactly the GPU nodes Slurm now has."""
    if policy is None or len(policy.cluster.nodes) != len(obs.nodes):
        return False
    # (identity first, in C: the translation cache hands the same Node while a node's layout and availability
    # stay; only the others are compared)
    ours, read = policy.cluster.nodes, obs.nodes
    return all(_layout(ours[i]) == _layout(read[i]) for i in compress(range(len(read)), map(is_not, ours, read)))


def mirror(policy: Policy, obs: Observation, book: JobBook, report: CycleReport,
           movable_to: Callable[[SlurmJob, Iterable[str]], Eligible]) -> list[Migration]:
    """Bring ``policy`` up to date with ``obs``; returns the migrations its Compact then wants (``movable_to``: where
    a running job may be moved, Translator.movable_to)."""
    for node in obs.nodes:
        if policy.cluster.available[policy.cluster.index[node.name]] != node.available:
            policy.set_available(node.name, node.available)
            log.info("node %s %s", node.name, "is available again" if node.available else "takes no new work")
    moves: list[Migration] = []
    placed, running, move = book.placed, obs.running, book.move
    seen = book.allocs
    # a job requeued by a migration is the policy's on its new nodes until the acting step settles it, whether Slurm
    # still shows it completing on its old ones or pending
    requeued = book.in_state(JobState.REQUEUED)
    gone = policy.cluster.jobs.keys() - running.keys() - requeued.keys()  # (set operations and maps: 100,000 jobs)
    # decided and still pending: kept; so is a re-pinned job held on its new nodes until its owed release is taken
    pending = set(obs.pending_ids) if not placed.keys().isdisjoint(gone) else set()
    if owed := placed.keys() & book.release_due:
        pending |= {j for j, job in obs.find(owed).items() if job.pending}
    for job_id in list(filter(gone.__contains__, policy.cluster.jobs)):
        if job_id in placed and job_id in pending:
            continue
        was = placed.get(job_id)
        if was is not None and (slurm := obs.slurm_jobs.get(job_id)) is not None and slurm.pending:
            # held back by Slurm since it was decided
            move(job_id, JobState.PINNED, pin=was.decision.nodes, logged=was.logged)
        elif was is not None or job_id in seen:
            move(job_id, None)
        moves += policy.remove(job_id)
        report.departed.append(job_id)
    # Only a job whose allocation is not the very object seen can differ from it (adoption_order sorts them).
    other = set(compress(running, map(is_not, map(seen.get, running), map(ALLOC, running.values())))) - requeued.keys()
    changed = [running[j].engine() for j in other | (placed.keys() & running.keys())
               if j in placed or seen.get(j) != running[j].alloc]
    for job, nodes in adoption_order(changed):
        job_id = job.id
        was = placed.get(job_id)
        move(job_id, JobState.RUNNING, alloc=running[job_id].alloc)
        if job_id in policy.cluster.jobs:
            if per_node(policy, job_id) == counts(job, nodes):
                continue
            if was is not None:
                report.error("mismatch", f"job {job_id} started on {fmt(counts(job, nodes))}, "
                                         f"not on {fmt(was.decision.gpus_per_node())} as decided")
            policy.remove(job_id)
        try:
            policy.adopt(job, nodes, running[job_id].eligible)
        except EngineError as err:
            move(job_id, None)
            report.error("adopt", f"job {job_id}: {err}")
            continue
        report.adopted.append(job_id)
        if was is not None:
            # the log's latest record of a job names where it runs, also when Slurm chose otherwise
            report.decisions.append(adopted(policy, job, nodes, was.decision.nodes,
                                            "Slurm started it elsewhere than decided; adopted there"))
        log.info("adopted job %s (%dx%d, %s) on %s", job_id, job.instances, job.gpus,
                 "migratable" if job.migratable else "pinned", fmt(counts(job, nodes)))
    if obs.context_changed:  # the nodes' features or partitions may have changed: where each job may move, anew
        reconfine(policy, obs, book, set(report.adopted), movable_to)
    moves += report.compact(policy)
    return moves


def reconfine(policy: Policy, obs: Observation, book: JobBook, adopted_now: Set[str],
              movable_to: Callable[[SlurmJob, Iterable[str]], Eligible]) -> None:
    """Tell the policy anew where each job it holds may be moved, those ``adopted_now`` (confined as they were
    adopted) but: a running job where the read says, one placed and not started or requeued and not re-pinned where
    ``movable_to`` says of the nodes decided (not where it may be placed now: its own pin, and what is free this
    cycle, narrow that). Without it Compact could move a job onto a node that lost a feature it asks for since, where
    Slurm would hold it."""
    jobs, requeued = policy.cluster.jobs, book.in_state(JobState.REQUEUED)
    for job_id, r in obs.running.items():
        if (job_id not in adopted_now and job_id not in requeued and (job := jobs.get(job_id)) is not None
                and job.migratable):
            policy.confine(job_id, r.eligible)
    decided = {j: r.decision.nodes for j, r in book.placed.items() if j not in obs.running}
    decided |= {j: r.decision.nodes for j, r in requeued.items()}
    for job_id, slurm in obs.lookup(decided.keys()).items():
        policy.confine(job_id, movable_to(slurm, decided[job_id]))


def take_over(obs: Observation, policy: Policy, book: JobBook, last: Mapping[str, DecisionRecord],
              now: float) -> list[str]:
    """After a (re)start: pending jobs an earlier daemon already pinned are decisions, not new jobs.

    ``last`` holds the latest logged record naming a place of each pending job that has one
    (``waiting_ids``). A job counts as pinned by us when that record names exactly the nodes in
    its ReqNodeList; placing it again would log a second decision and re-point a job that Slurm
    is about to start. Any other such record no longer stands: Slurm never heard it (a daemon
    killed while telling it, possibly several restarts ago), or the pin was undone. The job is
    REPLANNED with the record (where it runs is checked against it); returns those that Slurm has pinned
    (to nodes the daemon may have decided before: the caller asks the log).
    """
    replanned = []
    for job_id in obs.skipped.keys() & last.keys():  # held back by Slurm now: the pin is ours all the same
        slurm, record = obs.slurm_jobs.get(job_id), last[job_id]
        if slurm is None or not slurm.pending:
            continue
        if _ours(record, slurm):
            book.move(job_id, JobState.PINNED, pin=record.nodes, logged=record)
        else:
            book.move(job_id, JobState.REPLANNED, unheard=record)
            replanned.append(job_id)
    for p in obs.pending:
        record = last.get(p.job.id)
        if record is None:
            continue
        if len(record.nodes) == p.job.instances and _ours(record, p.slurm):
            try:
                policy.adopt(p.job, record.nodes, p.eligible)
            except EngineError as err:
                log.warning("job %s: earlier decision not taken over: %s", p.job.id, err)
                continue
            book.move(p.job.id, JobState.PLACED, decision=Decision(p.job.id, record.nodes, p.job.gpus, record.rule),
                      job=p.job, at=now, logged=record)
            log.info("job %s: taking over the earlier decision (%s)", p.job.id, fmt(record.gpus_per_node))
        else:
            book.move(p.job.id, JobState.REPLANNED, unheard=record)
            replanned.append(p.job.id)
    return [j for j in replanned if obs.slurm_jobs[j].required_nodes]


def take_over_requeues(policy: Policy, book: JobBook, held: Mapping[str, SlurmJob],
                       last: Mapping[str, DecisionRecord],
                       movable_to: Callable[[SlurmJob, Iterable[str]], Eligible],
                       ) -> tuple[set[str], list[DecisionRecord]]:
    """After a (re)start: the jobs an earlier daemon requeue-held to migrate them and did not re-pin and release.

    Slurm holds each of ``held`` (still completing, or pending again); one whose latest logged place (``last``) is
    its requeue's record is REQUEUED again, the policy holding it on the nodes logged (its request as logged), to
    be re-pinned there and released as if this daemon had requeued it, kept to the nodes ``movable_to`` says when
    moved again (Translator.movable_to). Returns those taken over, and the records of those the nodes logged cannot
    take now (the caller releases them, their node lists cleared)."""
    taken, refused = set(), []
    for job_id in sorted(held.keys() & last.keys(), key=id_order):
        record = last[job_id]
        if not is_requeue(record):
            continue
        raw = record.request_raw
        try:
            job = Job(job_id, raw["instances"], raw["gpus"], raw.get("migratable", True),
                      raw.get("distinct_nodes", False), record.user)
            policy.adopt(job, record.nodes, movable_to(held[job_id], record.nodes))
        except (EngineError, KeyError) as err:
            log.warning("job %s: earlier requeue not taken over: %s", job_id, err)
            refused.append(record)
            continue
        book.move(job_id, JobState.REQUEUED, decision=Decision(job_id, record.nodes, job.gpus, record.rule), job=job,
                  logged=record)
        taken.add(job_id)
        log.info("job %s: taking over the earlier requeue (to %s)", job_id, fmt(record.gpus_per_node))
    return taken, refused


def refused_pins(obs: Observation, book: JobBook) -> None:
    """The jobs pinned by the daemon that Slurm holds back for a reason the pin itself caused (``PIN_REFUSED``: the
    nodes lack a feature or a resource the job needs that the daemon does not read): left to Slurm, unpinned."""
    for job_id, nodes in book.pinned().items():
        slurm = obs.slurm_jobs.get(job_id)
        reason = slurm.reason.split(",")[0].strip() if slurm is not None else ""
        if slurm is not None and slurm.pending and reason in PIN_REFUSED and pinned_to(slurm, nodes):
            book.move(job_id, JobState.LEAVING, unpin=True,
                      why=f"Slurm refused its pin on {','.join(dict.fromkeys(nodes))} ({slurm.reason}); "
                          f"unpinned and left to Slurm")


def waiting_ids(obs: Observation) -> list[str]:
    """Every job Slurm has pending that the daemon may have decided: those it decides, and those Slurm holds back."""
    held_back = [j for j in obs.skipped if (s := obs.slurm_jobs.get(j)) is not None and s.pending]
    return [*obs.pending_ids, *held_back]


def left_queue(obs: Observation, book: JobBook) -> list[DecisionRecord]:
    """The unheard records of the REPLANNED jobs Slurm no longer has pending, which are forgotten: Slurm started
    them by itself, or they ended; check where they ran with ``ran_elsewhere``."""
    replanned = book.in_state(JobState.REPLANNED)
    gone = sorted((j for j in replanned if (s := obs.slurm_jobs.get(j)) is None or not s.pending), key=id_order)
    records = [r for j in gone if (r := replanned[j].unheard) is not None]
    book.forget_many(gone)
    return records


def adopted(policy: Policy, job: Job, nodes: Sequence[str], decided: tuple[str, ...], reason: str) -> DecisionRecord:
    """The record of ``job`` adopted where Slurm runs it (``nodes``, one per instance), ``from`` the ``decided``."""
    return DecisionRecord.of(Decision(job.id, tuple(nodes), job.gpus, "adopted"), job, policy.name,
                             action="adopted", from_nodes=decided, reason=reason)


def ran_elsewhere(obs: Observation, policy: Policy, records: list[DecisionRecord],
                  ran: Mapping[str, tuple[str, ...]]) -> list[DecisionRecord]:
    """Records of the jobs of ``records`` (each a job's latest place logged) that run, or ran, on other nodes
    (``ran``: where Slurm says, finished jobs too), logged as ``adopted`` where they ran, so that a job's latest
    record names them. Such a job was decided by a daemon killed while telling Slurm (Slurm ran it where it
    chose once its lease ran out), Slurm refused the decision because it had started the job meanwhile, or
    someone else pointed the job at other nodes after Slurm heard it."""
    out = []
    for r in records:
        nodes = ran.get(r.job_id)
        if r.action not in PLACES or not nodes or set(nodes) == set(r.nodes):
            continue
        running = obs.running.get(r.job_id)
        if running is not None:  # its instances as the engine sees them
            job, at = running.engine()
            out.append(adopted(policy, job, at, r.nodes, _ELSEWHERE))
        else:  # not running when read (ended since, or started since): the nodes Slurm lists, GPUs evenly
            gpus = sum(r.gpus_per_node.values())
            out.append(replace(r, nodes=nodes, gpus_per_node={n: gpus // len(nodes) for n in nodes}, rule="adopted",
                               candidates=(), sif_before=None, sif_after=None, partial_before=None,
                               partial_after=None, reason=_ELSEWHERE, action="adopted", from_nodes=r.nodes,
                               time=None, cycle=None, id=None))
    return out


_ELSEWHERE = ("ran elsewhere than logged (Slurm never heard of the decision, started the job first, or someone else "
              "set its nodes); adopted there")


def pinned_to(job: SlurmJob, nodes: tuple[str, ...]) -> bool:
    """Whether the job's ReqNodeList is a pin to exactly ``nodes`` (ours, when they are the nodes we decided)."""
    return set(job.required_nodes) == set(nodes)


def pinned_by_us(obs: Observation, book: JobBook, job_id: str) -> bool:
    """Whether the job's ReqNodeList is a pin of the daemon's that it knows of (its record's), as Slurm shows it."""
    record, slurm = book.get(job_id), obs.slurm_jobs.get(job_id)
    return record is not None and record.pin is not None and slurm is not None and pinned_to(slurm, record.pin)


def _ours(record: DecisionRecord, job: SlurmJob) -> bool:
    """Whether the job's ReqNodeList is the pin of its last logged decision."""
    return record.action in PINS and pinned_to(job, record.nodes)


def _layout(node: Node) -> tuple[str, int, str | None]:
    return node.name, node.gpus, node.gpu_type
