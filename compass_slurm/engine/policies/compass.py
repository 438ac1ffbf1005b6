"""COMPASS: Place, Remove and Compact over the Anchor-Based Space (spec sections 3-4).

Three registered variants share this code:
- ``compass``: the bounded policy, with the repair step (spec "beyond the paper" 1);
- ``compass-literal``: the paper's Compact as written, without repair, kept to show
  the state in which the literal reading breaks the 2/N bound;
- ``compass-wc``: work-conserving; a job that ABS refuses but raw GPU counts fit is
  placed outside ABS, and Compact brings it back into ABS when it can.

``compass-easy`` is ``compass-wc`` that migrates only while a job waits, under a finite
budget re-homes an orphan only where the move removes a partial node, and places a job
that may not move where best fit would (Compact could never tidy it up later): with no
job movable it places exactly as best fit does.

Every move of a running instance is returned as a Migration. Instances of jobs
that are not migratable are pinned: nothing here moves them. A move that would
exceed the budget the driver passes to ``place`` or ``compact`` is not made.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Collection, Iterable
from enum import Enum
from itertools import combinations
from typing import ClassVar, NamedTuple

from ..fragmentation import slot_width, slot_widths
from ..index import Buckets, MinSet
from ..model import Decision, EngineError, InstanceKey, Job, Migration
from .abs_state import ANCHOR, EXTRA, FILLER, ONE, AbsState, Slot
from .base import Compaction, Policy, register


class Rule(Enum):
    """The COMPASS rule that chose a node for an instance; the value is what the decision log says."""

    SLOT = "anchor slot on the best-fit slotted node"
    NEW_SLOT = "anchor slot on a newly opened node"
    VACANCY = "filler in a slot vacancy"
    POOL = "1-GPU instance on the fullest partial pool node"
    NEW_POOL = "1-GPU instance on a newly opened pool node"
    ORPHAN = "outside ABS: 1-GPU in slotted-node residue (work-conserving)"
    EXTRA = "outside ABS: best raw fit (work-conserving)"


#: rules that open a slot for the instance (an anchor)
SLOT_RULES = frozenset({Rule.SLOT, Rule.NEW_SLOT})
#: rules outside ABS (compass-wc's fallback)
OUTSIDE_RULES = frozenset({Rule.ORPHAN, Rule.EXTRA})
#: how compass-easy placed a job, whatever ABS role it takes there: where best fit would (a movable one is moved
#: where ABS wants it while a job waits)
BEST_FIT_RULE = "best raw fit"
PINNED_RULE = "may not move: best raw fit"


class Mobile(NamedTuple):
    """What on a node may move: its slots as a whole (a full-node slot never moves), its orphans or pool
    ones anywhere (``ones``), and how many of its ones may move anywhere but beside a sibling
    (``ones_somewhere``, those of ``ones`` included)."""

    slots: tuple[Slot, ...]
    ones: tuple[InstanceKey, ...]
    ones_somewhere: int


Spot = tuple[int, Rule, Slot | None]  # node, the rule that chose it, the slot with a vacancy (fillers only)
Unit = Slot | InstanceKey  # what Compact moves as one piece: a whole slot, or one orphan
# Under COMPASS a capacity group has at most a few non-full slotted nodes; hundreds
# only occur after adopting a foreign placement, where the quadratic first-fit plan
# would cost seconds per event and the drains converge more cheaply.
REPAIR_MAX_HOSTS = 64
#: eligible sets whose cover of each group is remembered (a frozenset keeps its hash: a lookup is cheap)
COVERS_KEPT = 64


@register
class Compass(Policy):
    name = "compass"
    summary = "COMPASS-ABS with repair: at most 2 partial nodes while WCC holds"
    repair: ClassVar[bool] = True
    work_conserving: ClassVar[bool] = False
    #: migrate only while a job waits (told by the scheduler through ``blocked``)
    on_demand: ClassVar[bool] = False
    #: under a finite budget, re-home an orphan only where the move removes a partial node
    frugal: ClassVar[bool] = False
    #: place every job where best fit would; ABS shapes the cluster through the moves made while a job waits
    #: (docs/results/history.md: ABS's rules keep room for moves that, with few jobs movable, never come)
    best_fit_placement: ClassVar[bool] = False

    def __init__(self, nodes, **config) -> None:
        super().__init__(nodes, **config)
        self.abs = AbsState(self.cluster)
        #: the blocked queue head the scheduler last reported (on-demand variants)
        self.wanted: Job | None = None
        # The budget of the event being handled (place, compact, blocked): set on entry, never by drivers.
        self._left: int | None = None
        self._spent = 0
        self._scarce = False  # the event's budget is finite and the policy is frugal
        #: AbsState.pools_changed when the pool drain last found nothing to move (None: not since)
        self._pools_stuck: int | None = None
        #: per capacity group, the partial hosts and their AbsState.version when the slot passes last found
        #: nothing to move whatever the budget
        self._slots_stuck: dict[int, tuple[tuple[int, ...], tuple[int, ...]]] = {}
        self._refused = 0  # spends refused for want of budget (a pass that found nothing may find more with more)
        #: node -> (AbsState.version when read, what on it may move): Compact asks after every event
        self._mobiles: dict[int, tuple[int, Mobile]] = {}
        #: running jobs placed under an eligible set that leaves out part of a group they run in (a constraint
        #: on node features, a partition over part of a group): the nodes they may move to
        self._confined: dict[str, frozenset[int]] = {}
        #: per eligible set placed under (a few: the daemon's are one per partition and CPU/memory class),
        #: per group whether it holds all of the group's nodes
        self._covers: dict[frozenset[int], dict[int, bool]] = {}

    # -- views -------------------------------------------------------------------------------

    def role(self, i: int) -> str:
        return self.abs.kind(i)

    def abs_violations(self) -> dict[str, str]:
        c, a = self.cluster, self.abs
        out: dict[str, str] = {}
        for i in sorted(set(a.foreign) | set(a.orphaned)):
            parts = []
            if a.extras[i]:
                parts.append("outside ABS: " + _describe(a.extras[i], c.gpus_of))
            if a.slots[i] and a.ones[i]:
                parts.append("orphaned fillers: " + _describe(a.ones[i], c.gpus_of))
            out[c.nodes[i].name] = "; ".join(parts)
        return out

    def orphans(self) -> int:
        return sum(len(self.abs.ones[i]) for i in self.abs.orphaned)

    # -- Place ---------------------------------------------------------------------------------

    def _place(self, job: Job, allowed: frozenset[int] | None, budget: int | None) -> Decision | None:
        # A single instance that finds no spot is refused before anything changes: no pre-check needed.
        if job.instances > 1 and not self._may_fit(job, allowed):
            return None
        c = self.cluster
        c.register(job)
        self._open_budget(budget)
        chosen: list[int] = []
        rules: list[Rule] = []
        pulls: list[Migration] = []
        best_fit = self.best_fit_placement
        rule_of = self._best_raw_fit if best_fit else self._spot
        for k in range(job.instances):
            exclude = set(chosen) if job.distinct_nodes else set()
            spot = rule_of(job.gpus, allowed, exclude)
            if spot is None:
                self._undo_place(job.id, k, pulls)
                return None
            key = (job.id, k)
            c.add(key, spot[0])
            new = self._attach(key, spot)
            if new is not None:
                pulls.extend(self._fill(new, spot[0]))
            chosen.append(spot[0])
            rules.append(spot[1])
        if best_fit:
            rule = BEST_FIT_RULE if job.migratable else PINNED_RULE
        else:
            rule = "; ".join(dict.fromkeys(r.value for r in rules))
        self._confine(job.id, allowed, chosen)
        return Decision(job.id, self._names(chosen), job.gpus, rule, tuple(pulls))

    def _confine(self, job_id: str, allowed: frozenset[int] | None, nodes: Iterable[int]) -> None:
        """Keep a job's moves to ``allowed`` where that leaves out part of a group it runs in."""
        if allowed is not None and len(allowed) < len(self.cluster) and not all(self._covered(allowed, i)
                                                                                for i in nodes):
            self._confined[job_id] = allowed

    def _covered(self, allowed: frozenset[int], i: int) -> bool:
        """Whether ``allowed`` holds every node of node i's group (moves within the group then keep to it)."""
        groups = self._covers.get(allowed)
        if groups is None:
            if len(self._covers) >= COVERS_KEPT:
                self._covers.clear()
            groups = self._covers[allowed] = {}
        g = self.cluster.group_of[i]
        if g not in groups:
            groups[g] = all(m in allowed for m in self.cluster.groups[g].members)
        return groups[g]

    def _attach(self, key: InstanceKey, spot: Spot) -> Slot | None:
        """Give an instance (already on ``spot``'s node) its ABS role by the rule that chose; a new slot is returned."""
        i, rule, slot = spot
        a = self.abs
        if rule in SLOT_RULES:
            return a.add_slot(i, slot_width(self.cluster.gpus_of(key), self.cluster.capacity[i]), key)
        if rule is Rule.VACANCY:
            assert slot is not None
            a.add_filler(i, slot, key)
        elif rule is Rule.EXTRA:
            a.add_extra(i, key)
        else:
            a.add_one(i, key)
        return None

    def candidates(self, job: Job, eligible: Collection[str] | None = None) -> tuple[str, ...]:
        """What the rule for the job's first instance chooses among: the best node of each tier.

        For an anchor, the lowest node of every residue D >= w*(g), then an empty node;
        for a 1-GPU instance, a vacancy, the lowest pool node of every room, then an empty
        node, in rule order; for a job that may not move under compass-easy, the lowest node
        of every free-GPU count that fits, as best fit. O(G) lookups.
        """
        gpus = job.gpus
        allowed = self._allowed(eligible)
        a, names = self.abs, self.cluster.nodes
        gids = self._groups_for(gpus, None)
        out: list[str] = []
        if self.best_fit_placement:
            free = self.cluster.free
            tiers = [(free.bucket(f), f"{f} free") for f in range(gpus, free.max_key + 1)]
        elif gpus >= 2:
            tiers = [(a.residue[g].bucket(d), f"D={d}") for g in gids
                     for d in range(slot_width(gpus, a.cap[g]), a.cap[g] + 1)]
        else:
            tiers = [(a.vacant[g], "vacancy") for g in gids]
            tiers += [(a.pool_room[g].bucket(r), f"pool room {r}") for g in gids for r in range(1, a.cap[g])]
        if not self.best_fit_placement:
            tiers += [(a.empty[g], "empty") for g in gids]
        for members, label in tiers:
            i = _pick(members, allowed, set())
            if i is not None:
                out.append(f"{names[i].name} ({label})")
        return tuple(out)

    def _spot(self, gpus: int, allowed: frozenset[int] | None, exclude: set[int], within: int | None = None
              ) -> Spot | None:
        """Where the next instance of ``gpus`` GPUs goes under the COMPASS rules, or None.

        ``within``: only in that group (a running instance's move), and then only under ABS
        (every caller that moves one takes no spot outside it).
        """
        a = self.abs
        gids = self._groups_for(gpus, within)
        cap = a.cap
        if gpus >= 2:
            # Best fit by residue: the smallest D(n) >= w*(g).
            i = _best_fit(a.residue, gids, lambda g: range(slot_width(gpus, cap[g]), cap[g] + 1), allowed, exclude)
            if i is not None:
                return i, Rule.SLOT, None
            i = _first_empty(a.empty, cap, gids, allowed, exclude)
            if i is not None:
                return i, Rule.NEW_SLOT, None
            return self._outside_abs(gpus, allowed, exclude) if within is None else None
        i = _lowest(a.vacant, gids, allowed, exclude)
        if i is not None:
            return i, Rule.VACANCY, next(s for s in a.slots[i] if s.vacancy > 0)
        i = _best_fit(a.pool_room, gids, lambda g: range(1, cap[g]), allowed, exclude)
        if i is not None:
            return i, Rule.POOL, None
        i = _first_empty(a.empty, cap, gids, allowed, exclude)
        if i is not None:
            return i, Rule.NEW_POOL, None
        return self._outside_abs(gpus, allowed, exclude) if within is None else None

    def _best_raw_fit(self, gpus: int, allowed: frozenset[int] | None, exclude: set[int]) -> Spot | None:
        """The node best fit picks (fewest free GPUs that fit, then the lowest index), with the ABS role the
        instance takes there: what an observed allocation would take (``_adopted``)."""
        i = self._best_free(gpus, allowed, exclude)
        return None if i is None else self._role_on(i, gpus)

    def _best_free(self, gpus: int, allowed: frozenset[int] | None, exclude: set[int]) -> int | None:
        """The node with the fewest free GPUs that fit, then the lowest index."""
        free = self.cluster.free
        for f in range(gpus, free.max_key + 1):
            i = _pick(free.bucket(f), allowed, exclude)
            if i is not None:
                return i
        return None

    def _role_on(self, i: int, gpus: int) -> Spot:
        """The ABS role an instance of ``gpus`` GPUs already on node i takes (counted in its free GPUs, not yet
        in ABS), named by the rule that would have chosen it: a slot where the residue holds its width, a filler
        in a vacancy, a one where a GPU is left, else outside ABS."""
        a = self.abs
        kind = a.kind(i)
        if gpus >= 2:
            cap = self.cluster.capacity[i]
            if gpus <= cap and kind != "pool" and a.residue_of(i) >= slot_width(gpus, cap):
                return i, Rule.NEW_SLOT if kind == "empty" else Rule.SLOT, None
            return i, Rule.EXTRA, None
        slot = next((s for s in a.slots[i] if s.vacancy > 0), None)
        if slot is not None:
            return i, Rule.VACANCY, slot
        if a.residue_of(i) < 1:
            return i, Rule.EXTRA, None
        return i, {"empty": Rule.NEW_POOL, "pool": Rule.POOL}.get(kind, Rule.ORPHAN), None

    def _groups_for(self, gpus: int, within: int | None) -> list[int]:
        """The groups an instance of ``gpus`` GPUs may go to: those big enough, or only ``within``."""
        cap = self.abs.cap
        if within is not None:
            return [within] if cap[within] >= gpus else []
        return [g for g in range(len(cap)) if cap[g] >= gpus]

    def _outside_abs(self, gpus: int, allowed: frozenset[int] | None, exclude: set[int]) -> Spot | None:
        """compass-wc only: the best raw fit, when ABS has no place but free GPUs do."""
        if not self.work_conserving:
            return None
        i = self._best_free(gpus, allowed, exclude)
        if i is None:
            return None
        fits_as_one = gpus == 1 and self.abs.kind(i) == "slotted" and self.abs.residue_of(i) >= 1
        return i, Rule.ORPHAN if fits_as_one else Rule.EXTRA, None

    def _next(self, gpus: int) -> int | None:
        spot = (self._best_raw_fit if self.best_fit_placement else self._spot)(gpus, None, set())
        return None if spot is None else spot[0]

    def _may_fit(self, job: Job, allowed: frozenset[int] | None) -> bool:
        """A cheap necessary condition, so a blocked queue head costs O(G), not a placement and undo."""
        c, a = self.cluster, self.abs
        free = c.free
        if sum(f * free.count(f) for f in range(1, free.max_key + 1)) < job.total_gpus:
            return False
        if allowed is not None or job.distinct_nodes or len(a.cap) > 1 or self.work_conserving:
            return True
        cap = a.cap[0]
        if job.gpus >= 2:
            width = slot_width(job.gpus, cap)
            slots = len(a.empty[0]) * (cap // width)
            slots += sum((d // width) * a.residue[0].count(d) for d in range(width, cap + 1))
            return slots >= job.instances
        room = a.vacancy_total + len(a.empty[0]) * cap
        room += sum(r * a.pool_room[0].count(r) for r in range(1, cap))
        return room >= job.instances

    def _undo_place(self, job_id: str, placed: int, pulls: list[Migration]) -> None:
        c, a = self.cluster, self.abs
        # The job's own instances leave first: a later one may sit where a pulled filler came from.
        for k in range(placed):
            a.detach((job_id, k))
            c.remove((job_id, k))
        for m in reversed(pulls):
            key = (m.job, m.instance)
            a.detach(key)
            src = c.index[m.src]
            c.move(key, src)
            a.add_one(src, key)
        c.unregister(job_id)

    # -- Remove --------------------------------------------------------------------------------

    def _remove(self, job_id: str) -> tuple[Migration, ...]:
        # Fillers of a departing anchor become ones on their node; vacancies left by a
        # departing filler stay open. Compact, which the scheduler runs next, refills
        # and re-homes them, so Remove itself is O(instances).
        c, a = self.cluster, self.abs
        for key, _ in c.instances_of(job_id):
            a.detach(key)
            c.remove(key)
        c.unregister(job_id)
        self._confined.pop(job_id, None)
        return ()

    def _adopted(self, job: Job, nodes: list[int], allowed: frozenset[int] | None) -> None:
        """Fit an observed allocation into the closest ABS state; what cannot fit is an extra."""
        for k, i in enumerate(nodes):
            self._attach((job.id, k), self._role_on(i, job.gpus))
        self._confine(job.id, allowed, nodes)

    def _reconfined(self, job_id: str, allowed: frozenset[int] | None) -> None:
        nodes = [i for _, i in self.cluster.instances_of(job_id)]
        was = self._confined.pop(job_id, None)
        self._confine(job_id, allowed, nodes)
        if self._confined.get(job_id) != was:  # what may move from its nodes changed: the passes look again
            for i in set(nodes):
                self.abs.refresh(i)
            self._pools_stuck = None

    # -- Compact -------------------------------------------------------------------------------

    def blocked(self, job: Job | None, eligible: Collection[str] | None = None,
                budget: int | None = None, worth: float = math.inf) -> Compaction:
        """On demand: make room for the blocked job where its wait is worth the moves, else Compact."""
        if not self.on_demand:
            return Compaction()
        self.wanted = job
        if job is None:
            return Compaction()
        self._open_budget(budget)
        moves = self._make_room(job, self._allowed(eligible), worth)
        if moves:
            return Compaction(_net(moves), self._spent)
        return self.compact(budget)

    def _make_room(self, job: Job, allowed: frozenset[int] | None, worth: float) -> list[Migration]:
        """The fewest moves that let ``job`` start now, or none.

        Movable instances leave as few nodes as the job needs (on each, the fewest instances, then GPUs, that
        free enough), each to its best raw fit in its group, never onto a node being freed. Compact's passes
        remove partial nodes but need not let the job start; these moves do, or are not made: nor when they
        exceed the budget or ``worth``.
        """
        if self._left == 0 or worth < 1:  # not one move: spare the walk over every node
            return []
        c = self.cluster
        g, distinct = job.gpus, job.distinct_nodes
        free = {i: c.free_gpus(i) for i in range(len(c)) if c.available[i]}
        hosts = [i for i in free if c.capacity[i] >= g and (allowed is None or i in allowed)]
        need = job.instances - sum(_room(free[i], g, distinct) for i in hosts)
        if need <= 0:
            return []
        counted = set(hosts)
        freed: set[int] = set()
        touched: set[int] = set()  # nodes whose free GPUs the plan changed
        #: (distinct-nodes job, node) for each of its instances the plan sends there: _can_move sees only where
        #: the siblings are, not where the plan sends them
        sent: set[tuple[str, int]] = set()

        def lands(j: int, key: InstanceKey) -> bool:
            """A move may land on node j: not one being freed, nor one whose room for the job it would take, nor
            one the plan sends a sibling of a distinct-nodes instance to."""
            gpus = c.gpus_of(key)
            return j not in freed and (key[0], j) not in sent and (
                j not in counted or _room(free[j] - gpus, g, distinct) == _room(free[j], g, distinct))

        options = []
        for i in hosts:
            short = g - free[i]
            if short <= 0:
                continue
            leave = _fewest_to_free(sorted((k for k in c.on_node[i] if c.jobs[k[0]].migratable), key=c.gpus_of,
                                           reverse=True), short, c.gpus_of)
            if leave is not None:
                options.append((len(leave), sum(map(c.gpus_of, leave)), i, leave))
        if len(options) < need:
            return []
        options.sort()
        plan: list[tuple[InstanceKey, int, int]] = []
        for _, gpus, i, leave in options:
            if need == 0:
                break
            if g - free[i] > gpus:  # an earlier move of the plan went there
                continue
            freed.add(i)
            trial = []
            for key in leave:
                dst = self._landing(key, i, free, touched, lands)
                if dst is None:
                    break
                trial.append((key, i, dst))
                if c.jobs[key[0]].distinct_nodes:
                    sent.add((key[0], dst))
                free[dst] -= c.gpus_of(key)
                free[i] += c.gpus_of(key)
                touched.update((dst, i))
            else:
                plan += trial
                need -= 1
                continue
            for key, _, dst in trial:
                sent.discard((key[0], dst))
                free[dst] += c.gpus_of(key)
                free[i] -= c.gpus_of(key)
            freed.discard(i)
        if need > 0 or len(plan) > worth or (self._left is not None and len(plan) > self._left):
            return []
        moves: list[Migration] = []
        for key, _, dst in plan:
            self._spend(1)
            moves += self._move_one(key, self._role_on(dst, c.gpus_of(key)))
        return moves

    def _landing(self, key: InstanceKey, src: int, free: dict[int, int], touched: set[int],
                 lands: Callable[[int, InstanceKey], bool]) -> int | None:
        """Where a move that makes room sends ``key``: the fewest free GPUs (as planned) that hold it in its node's
        group, then the lowest index, where it ``lands``. The nodes the plan left alone are found by the cluster's
        own free-GPU index, so a search costs a few lookups, not a pass over every node."""
        c = self.cluster
        gpus, group = c.gpus_of(key), c.group_of[src]

        def takes(j: int) -> bool:
            return j in free and c.group_of[j] == group and lands(j, key) and self._can_move(key, j)

        best = min(((free[j], j) for j in touched if free[j] >= gpus and takes(j)), default=None)
        for f in range(gpus, c.free.max_key + 1):
            if best is not None and best[0] < f:
                break
            j = c.free.bucket(f).first(lambda j: j not in touched and takes(j))
            if j is not None:
                best = min(best or (f, j), (f, j))
                break
        return None if best is None else best[1]

    def compact(self, budget: int | None = None) -> Compaction:
        if self.on_demand and self.wanted is None:
            return Compaction()  # nothing waits: spend no migration (the budget is kept for a blocked job)
        self._open_budget(budget)
        moves = self._compact()
        return Compaction(_net(moves), self._spent)

    def _compact(self) -> list[Migration]:
        moves: list[Migration] = []
        moves += self._settle_ones()
        if self._left == 0:  # every pass below moves something; skip their search
            return moves
        if self.work_conserving:
            restored = self._restore_extras()
            moves += restored
            if restored:  # a restored anchor may have opened a slot vacancy
                moves += self._settle_ones()
        moves += self._drain_pools()
        a = self.abs
        for g, cap in enumerate(a.cap):  # every pass works within one group: nothing moves between groups
            hosts = a.partial_hosts(g)
            if len(hosts) < 2:  # slot passes and repair need two hosts
                continue
            # They read only these hosts: while none changed, what found nothing to move finds nothing again.
            seen = hosts, tuple(a.version[i] for i in hosts)
            if self._slots_stuck.get(g) == seen:
                continue
            before, refused = len(moves), self._refused
            for width in sorted((w for w in _movable_widths(cap)), reverse=True):
                moves += self._drain_slots(g, width)
            if self.repair:
                moves += self._repack(g)
            if len(moves) == before and self._refused == refused and self._left != 0:  # nothing, whatever the budget
                self._slots_stuck[g] = seen
        return moves

    def _settle_ones(self) -> list[Migration]:
        """Re-home orphans by the 1-GPU rule and fill every slot vacancy from orphans, then pools."""
        a = self.abs
        moves: list[Migration] = []
        # Once no orphan of a group can move with profit (no vacancy or partial pool node of its
        # group takes one, or under a scarce budget none would fill it), none will until something
        # moves there; orphans move only within their group, so one group's moves leave another's be.
        homeless: set[int] = set()
        # Where a group's orphans go: one spot for all of them until one moves (an orphan that
        # reaches the search has no vacancy on its own node, and pool nodes hold no orphans).
        spots: dict[int, Spot | None] = {}
        group_of, groups = self.cluster.group_of, len(a.cap)
        order = list(a.orphaned)
        for at, i in enumerate(order):
            if len(homeless) == groups or self._left == 0:
                # No orphan moves from here on: only those on a node with an open slot become fillers
                # in place, which changes no other node, so the other nodes need no visit.
                later = set(order[at:])
                for j in [j for j in a.open if j in later]:
                    self._fill_in_place(j)
                break
            g = group_of[i]
            if g in homeless:
                if i in a.open:
                    self._fill_in_place(i)
                continue
            spot = spots.get(g)
            # A node without a vacancy of its own keeps its orphans as they are: under a scarce budget, what its
            # first orphan meets below, no partial node removed by the spot kept, ends its turn (on every full
            # node, whose number grows across daemon cycles), so it is decided without listing them.
            if (self._scarce and spot is not None and i not in a.open
                    and not (spot[1] is Rule.VACANCY and spot[2].vacancy == 0) and self._gain(i, spot[0]) <= 0):
                if self.cluster.free_gpus(spot[0]) > 1:
                    homeless.add(g)
                continue
            # Its orphans first fill its own vacancies without moving. Moving one out opens none, so
            # the others each try to move, and what fails for every one of them ends the node's turn.
            for key in self._fill_in_place(i):
                # The spot kept from an earlier node may be a vacancy that one of this node's
                # orphans has just filled in place: a full slot takes no one.
                if spot is not None and spot[1] is Rule.VACANCY and spot[2].vacancy == 0:
                    spot = None
                # Opening an empty node for an orphan would add a partial node, not remove one.
                spot = spot or self._spot(1, None, {i}, g)
                if spot is None or spot[1] not in (Rule.VACANCY, Rule.POOL):
                    homeless.add(g)
                    break
                # A scarce budget buys fewer partial nodes, not ABS roles: on Philly, re-homing
                # orphans spent most migrations and removed about one partial node per ten.
                if self._scarce and self._gain(i, spot[0]) <= 0:
                    # a spot that one more GPU does not fill stays partial whoever moves there
                    if self.cluster.free_gpus(spot[0]) > 1:
                        homeless.add(g)
                    break
                if self._can_move(key, spot[0]) and self._spend(1):
                    moves += self._move_one(key, spot)
                    spot = None
                    if self._left == 0:
                        break
            spots[g] = spot
        for g in range(groups):  # fillers come from the vacancy's own group (_donor)
            while a.vacancy_total > 0:
                target = next(((i, s) for i in a.vacant[g] for s in a.slots[i] if s.vacancy > 0), None)
                if target is None:
                    break
                i, slot = target
                pulled = self._fill(slot, i)
                if not pulled:
                    break
                moves += pulled
        return moves

    def _fill_in_place(self, i: int) -> list[InstanceKey]:
        """Node i's orphans become fillers of its own slot vacancies while there are any; returns the others."""
        a = self.abs
        ones = list(a.ones[i])
        for at, key in enumerate(ones):
            own = next((s for s in a.slots[i] if s.vacancy > 0), None)
            if own is None:
                return ones[at:]
            a.detach(key)
            a.add_filler(i, own, key)
        return []

    def _fill(self, slot: Slot, i: int) -> list[Migration]:
        """Pull 1-GPU instances into ``slot``'s vacancy: orphans first, then the emptiest pool node."""
        moves: list[Migration] = []
        while slot.vacancy > 0 and self.cluster.free_gpus(i) > 0:
            donor = self._donor(i)
            if donor is None or not self._spend(1):
                break
            key, src = donor
            self.abs.detach(key)
            self.cluster.move(key, i)
            self.abs.add_filler(i, slot, key)
            moves.append(self._migration(key, src, i))
        return moves

    def _donor(self, avoid: int) -> tuple[InstanceKey, int] | None:
        """A 1-GPU instance for a vacancy on node ``avoid``, from that node's group only."""
        a = self.abs
        g = self.cluster.group_of[avoid]
        found = self._first_with_movable_one(a.orphaned, avoid, g)
        if found is not None:
            return found
        buckets = a.pool_room[g]
        for room in range(a.cap[g] - 1, -1, -1):
            found = self._first_with_movable_one(buckets.bucket(room), avoid)
            if found is not None:
                return found
        return None

    def _first_with_movable_one(self, nodes: MinSet, avoid: int, g: int | None = None
                                ) -> tuple[InstanceKey, int] | None:
        """The lowest of ``nodes`` (of group ``g``, if given) with a 1-GPU instance that may move to ``avoid``."""
        group_of = self.cluster.group_of

        def movable(i: int) -> InstanceKey | None:
            if i == avoid or (g is not None and group_of[i] != g):
                return None
            return self._movable(self.abs.ones[i], avoid)

        # The lowest node almost always has one; scan (sorted) only past pinned or avoided ones.
        first = nodes.min()
        for i in [first] if first is not None else []:
            key = movable(i)
            if key is not None:
                return key, i
        for i in nodes:
            key = movable(i)
            if key is not None:
                return key, i
        return None

    def _restore_extras(self) -> list[Migration]:
        """compass-wc: move instances placed outside ABS to an ABS place once one exists."""
        c, a = self.cluster, self.abs
        moves: list[Migration] = []
        # Per group and size, whether ABS has a place excluding no node: without one, it has none excluding an
        # extra's own node either, so the extras of that size are not searched one by one (until a move changes
        # the state). An extra moves only within its group.
        placeable: dict[tuple[int, int], bool] = {}
        for i in list(a.foreign):
            g = c.group_of[i]
            for key in list(a.extras[i]):
                if not c.jobs[key[0]].migratable:
                    continue  # pinned (adopted from Slurm's own placement): no search, it would not move
                gpus = c.gpus_of(key)
                if (g, gpus) not in placeable:
                    placeable[(g, gpus)] = self._spot(gpus, None, set(), g) is not None
                if not placeable[(g, gpus)]:
                    continue
                spot = self._spot(gpus, None, {i}, g)
                if spot is not None and self._can_move(key, spot[0]) and self._spend(1):
                    moves += self._move_one(key, spot)
                    placeable.clear()
        return moves

    def _drain_pools(self) -> list[Migration]:
        """Best-fit drain of partial pool nodes, group by group: emptiest source into the fullest other host."""
        a = self.abs
        moves: list[Migration] = []
        if self._pools_stuck == a.pools_changed:
            return moves  # no pool node changed since a drain found none of them with an orphan to move
        for g in range(len(a.cap)):
            if not self._drain_group_pools(g, moves):
                return moves  # the budget ran out
        self._pools_stuck = a.pools_changed
        return moves

    def _drain_group_pools(self, g: int, moves: list[Migration]) -> bool:
        """The pool drain of group ``g`` (moves appended); False when it stopped for want of budget."""
        a = self.abs
        while self._left != 0:
            hosts = a.partial_pools(g)
            # Sources from the most room down; pinned ones are skipped without a rescan.
            for room, src in reversed(hosts):
                if not self._mobile(src).ones_somewhere:
                    continue
                dst_room, dst = hosts[0] if hosts[0][1] != src else (hosts[1] if len(hosts) > 1 else (0, None))
                if dst is None or dst_room > room:
                    continue  # only ever towards the fuller node, or moves could cycle
                key = self._movable(a.ones[src], dst)
                if key is not None and self._spend(1):
                    moves += self._move_one(key, (dst, Rule.POOL, None))
                    break
            else:
                # nothing movable whatever the budget (a spend fails only at 0, which the loop excludes)
                return True
        return False

    def _drain_slots(self, g: int, width: int) -> list[Migration]:
        """Best-fit drain of ``width`` slots between slotted nodes of group ``g``."""
        a = self.abs
        residue = a.residue[g].key  # D(n) of a partial host, without summing its contents
        moves: list[Migration] = []
        while self._left != 0:
            # Hosts come by (D(n), index), so by (room, D(n), index): the fullest first.
            dsts = [i for i in a.partial_hosts(g) if residue(i) >= width]
            # Only a host with room and a movable slot of this width can be a source (the others are skipped).
            srcs = sorted((i for i in dsts if any(s.width == width for s in self._mobile(i).slots)),
                          key=lambda i: (residue(i) // width, i), reverse=True)
            # Sources from the most room down: move one of their slots to the fullest other host.
            for src in srcs:
                dst = dsts[0] if dsts[0] != src else (dsts[1] if len(dsts) > 1 else None)
                if dst is None or residue(dst) // width > residue(src) // width:
                    continue
                slot = next(s for s in self._mobile(src).slots if s.width == width)
                if self._spend(len(slot.members())):
                    moves += self._move_units([(slot, src, dst)])
                    break
            else:
                return moves
        return moves

    def _repack(self, g: int) -> list[Migration]:
        """Repair: first-fit-decreasing of everything on the non-full slotted nodes into those nodes.

        The drain passes cannot merge, e.g., {4, 2} with {4}: no single move fits.
        Re-packing the movable slots of all non-full slotted nodes together can,
        and since widths are powers of two it leaves at most one of them non-full.
        Orphans take part as items of width 1 (they hold residue that a slot could
        use). Items keep their node whenever the packing allows; the plan runs
        only if it reduces the number of non-full nodes and fits the budget.
        """
        a = self.abs
        hosts = a.partial_hosts(g)  # by (D(n), index), all of group g
        if not 2 <= len(hosts) <= REPAIR_MAX_HOSTS:
            return []
        cap, residue = a.cap[g], a.residue[g].key
        mobile = {i: self._mobile(i) for i in hosts}
        room = {i: residue(i) + sum(s.width for s in mobile[i].slots) + len(mobile[i].ones) for i in hosts}
        fixed = {i: room[i] < cap for i in hosts}  # pinned slots, extras or pinned orphans stay
        count: Counter[int] = Counter()
        for i in hosts:
            count.update(s.width for s in mobile[i].slots)
            count[1] += len(mobile[i].ones)
        # First fit, widest first, by counts: equal items fill the first host with room until it has none.
        planned: dict[int, list[int]] = {i: [] for i in hosts}
        for width in sorted(count, reverse=True):
            left = count[width]
            for i in hosts:
                if left == 0:
                    break
                n = min(left, room[i] // width)
                room[i] -= n * width
                planned[i] += [width] * n
                left -= n
            if left:
                return []
        after = sum(1 for i in hosts if room[i] > 0 and (planned[i] or fixed[i]))
        if after >= len(hosts):
            return []
        units: dict[int, list[Unit]] = {i: [*mobile[i].slots, *mobile[i].ones] for i in hosts}
        order = {i: n for n, i in enumerate(hosts)}
        items = sorted(((u, i) for i in hosts for u in units[i]), key=lambda ui: (-_width(ui[0]), order[ui[1]]))
        # Items of equal width are interchangeable: let each node keep its own first.
        unassigned = {id(u): (u, i) for u, i in items}
        plan: list[tuple[Unit, int, int]] = []
        for i in hosts:
            for width in planned[i]:
                own = next((u for u in units[i] if _width(u) == width and id(u) in unassigned), None)
                if own is not None:
                    del unassigned[id(own)]
                    continue
                uid = next(k for k, (u, _) in unassigned.items() if _width(u) == width)
                unit, src = unassigned.pop(uid)
                plan.append((unit, src, i))
        if not self._spend(sum(len(_members(u)) for u, _, _ in plan)):
            return []
        return self._move_units(plan)

    def _mobile(self, i: int) -> Mobile:
        """What on node i may move (see Mobile), kept until the node's contents change."""
        a = self.abs
        kept = self._mobiles.get(i)
        if kept is not None and kept[0] == a.version[i]:
            return kept[1]
        cap = self.cluster.capacity[i]
        jobs = self.cluster.jobs
        slots = tuple(s for s in a.slots[i] if s.width < cap and self._slot_movable(s))
        ones = tuple(key for key in a.ones[i] if self._can_move(key, None))
        mobile = Mobile(slots, ones, sum(1 for key in a.ones[i] if jobs[key[0]].migratable))
        self._mobiles[i] = (a.version[i], mobile)
        return mobile

    # -- moves -----------------------------------------------------------------------------

    def _move_one(self, key: InstanceKey, spot: Spot) -> list[Migration]:
        """Move one instance to ``spot``, where it takes the role the spot's rule gives."""
        c = self.cluster
        self.abs.detach(key)
        src = c.move(key, spot[0])
        self._attach(key, spot)
        return [self._migration(key, src, spot[0])]

    def _move_units(self, plan: list[tuple[Unit, int, int]]) -> list[Migration]:
        """Move whole slots and orphans; all leave before any arrives, so a swap never overcommits."""
        c, a = self.cluster, self.abs
        for unit, src, _ in plan:
            if isinstance(unit, Slot):
                a.take_slot(src, unit)
            else:
                a.detach(unit)
            for key in _members(unit):
                c.remove(key)
        moves = []
        for unit, src, dst in plan:
            for key in _members(unit):
                c.add(key, dst)
                moves.append(self._migration(key, src, dst))
            if isinstance(unit, Slot):
                a.put_slot(dst, unit)
            else:
                a.add_one(dst, unit)
        return moves

    def _migration(self, key: InstanceKey, src: int, dst: int) -> Migration:
        nodes = self.cluster.nodes
        return Migration(key[0], key[1], nodes[src].name, nodes[dst].name)

    def _can_move(self, key: InstanceKey, dst: int | None) -> bool:
        """Pinned instances never move; a distinct-nodes instance never joins a sibling; a confined one
        never leaves the nodes it was eligible for.

        ``dst`` None means "somewhere not known yet" (whole-slot moves), where a
        distinct-nodes or confined instance cannot be checked and so stays put.
        (Every move stays within the instance's group: the passes look at no other.)
        """
        c = self.cluster
        job = c.jobs[key[0]]
        if not job.migratable:
            return False
        confined = self._confined.get(job.id)
        if confined is not None and (dst is None or dst not in confined):
            return False
        if job.distinct_nodes and job.instances > 1:
            return dst is not None and all(
                c.location[(job.id, k)] != dst for k in range(job.instances) if k != key[1]
            )
        return True

    def _movable(self, keys: Iterable[InstanceKey], dst: int) -> InstanceKey | None:
        return next((k for k in keys if self._can_move(k, dst)), None)

    def _slot_movable(self, slot: Slot) -> bool:
        return all(self._can_move(k, None) for k in slot.members())

    def _open_budget(self, budget: int | None) -> None:
        if budget is not None and budget < 0:
            raise EngineError(f"the migration budget must be >= 0 or None, got {budget}")
        self._left, self._spent = budget, 0
        self._scarce = self.frugal and budget is not None

    def _gain(self, src: int, dst: int) -> int:
        """Partial nodes one GPU's move from ``src`` to ``dst`` removes (negative: adds)."""
        c = self.cluster

        def partial(i: int, used: int) -> int:
            return 1 if 0 < used < c.capacity[i] else 0

        us, ud = c.used[src], c.used[dst]
        return partial(src, us) + partial(dst, ud) - partial(src, us - 1) - partial(dst, ud + 1)

    def _spend(self, n: int) -> bool:
        if self._left is not None:
            if self._left < n:
                self._refused += 1
                return False
            self._left -= n
        self._spent += n
        return True

    # -- invariants ----------------------------------------------------------------------------

    def check(self) -> None:
        """Assert that the ABS structure and the raw accounting agree (simulator debug mode)."""
        c, a = self.cluster, self.abs
        seen: set[InstanceKey] = set()
        for i in range(len(c)):
            cap = c.capacity[i]
            keys: list[InstanceKey] = []
            for slot in a.slots[i]:
                assert slot.width == slot_width(slot.anchor_gpus, cap)
                assert slot.vacancy >= 0, f"slot on {c.nodes[i].name} overfilled"
                assert a.role[slot.anchor] == (ANCHOR, slot)
                assert all(a.role[f] == (FILLER, slot) and c.gpus_of(f) == 1 for f in slot.fillers)
                keys += slot.members()
            assert all(a.role[k][0] == ONE and c.gpus_of(k) == 1 for k in a.ones[i])
            assert all(a.role[k][0] == EXTRA for k in a.extras[i])
            keys += a.ones[i] + a.extras[i]
            assert sorted(keys) == sorted(c.on_node[i]), f"ABS and raw accounting differ on {c.nodes[i].name}"
            assert c.used[i] <= cap or a.extras[i], f"{c.nodes[i].name} over capacity"
            if not a.extras[i]:
                assert a.residue_of(i) >= 0, f"slots on {c.nodes[i].name} exceed its capacity"
            assert (i in a.open) == any(s.vacancy > 0 for s in a.slots[i]), f"open slots of {c.nodes[i].name}"
            # a node is indexed in its own group only: the passes of one group never see another's nodes
            others = [h for h in range(len(a.cap)) if h != c.group_of[i]]
            assert not any(i in a.empty[h] or i in a.vacant[h] or a.residue[h].key(i) is not None
                           or a.pool_room[h].key(i) is not None for h in others), f"{c.nodes[i].name} in another group"
            seen.update(keys)
        assert seen == set(c.location) == set(a.role), "an instance is lost or duplicated"


@register
class CompassLiteral(Compass):
    name = "compass-literal"
    summary = "the paper's Compact as written (no repair step): can exceed the bound"
    repair = False


@register
class CompassWorkConserving(Compass):
    name = "compass-wc"
    summary = "COMPASS plus a raw-fit fallback outside ABS that Compact later restores"
    work_conserving = True


@register
class CompassEasy(CompassWorkConserving):
    name = "compass-easy"
    summary = ("every job placed best fit; migrates only while a job waits (for EASY backfill): room for it if its "
               "wait is worth the restarts, else Compact")
    on_demand = True
    frugal = True
    best_fit_placement = True


def _best_fit(
    buckets: dict[int, Buckets],
    gids: list[int],
    keys: Callable[[int], range],
    allowed: frozenset[int] | None,
    exclude: set[int],
) -> int | None:
    """Over the groups: the smallest key with a usable node, then the lowest index."""
    best: tuple[int, int] | None = None
    for g in gids:
        for key in keys(g):
            i = _pick(buckets[g].bucket(key), allowed, exclude)
            if i is not None:
                if best is None or (key, i) < best:
                    best = (key, i)
                break
    return None if best is None else best[1]


def _first_empty(
    empty: dict[int, MinSet], cap: list[int], gids: list[int], allowed: frozenset[int] | None, exclude: set[int]
) -> int | None:
    """The lowest usable empty node of the smallest capacity that fits (bigger nodes stay whole).

    ``gids`` come by capacity; groups of one capacity (GPU types) compete by node index.
    """
    best: int | None = None
    best_group = 0
    for g in gids:
        if best is not None and cap[g] != cap[best_group]:
            break
        i = _pick(empty[g], allowed, exclude)
        if i is not None and (best is None or i < best):
            best, best_group = i, g
    return best


def _lowest(sets: dict[int, MinSet], gids: list[int], allowed: frozenset[int] | None, exclude: set[int]
            ) -> int | None:
    """The lowest usable member of the groups' sets."""
    best: int | None = None
    for g in gids:
        i = _pick(sets[g], allowed, exclude)
        if i is not None and (best is None or i < best):
            best = i
    return best


def _pick(members: MinSet, allowed: frozenset[int] | None, exclude: set[int]) -> int | None:
    """Lowest member that the job may use: O(log n) without restrictions, a scan with them."""
    if allowed is None and not exclude:
        return members.min()
    if allowed is not None and len(allowed) < len(members):
        candidates: Iterable[int] = (i for i in sorted(allowed) if i in members)
    elif allowed is None:
        candidates = members.smallest(len(exclude) + 1)
    else:
        candidates = members
    for i in candidates:
        if (allowed is None or i in allowed) and i not in exclude:
            return i
    return None


def _room(free: int, gpus: int, distinct: bool) -> int:
    """Instances of ``gpus`` GPUs that ``free`` GPUs of one node take."""
    return (1 if free >= gpus else 0) if distinct else max(free, 0) // gpus


def _fewest_to_free(keys: list[InstanceKey], short: int, gpus_of: Callable[[InstanceKey], int]
                    ) -> tuple[InstanceKey, ...] | None:
    """The fewest of ``keys`` (largest first) holding at least ``short`` GPUs, then the fewest GPUs; None if all
    hold fewer. Among equals, the first in ``keys``' order."""
    sizes = [gpus_of(k) for k in keys]
    total, count = 0, 0
    for size in sizes:
        if total >= short:
            break
        total += size
        count += 1
    if total < short:
        return None
    if total == short:  # the largest ones fit exactly: no set of as few holds fewer GPUs, none comes earlier
        return tuple(keys[:count])
    best = min((sum(sizes[j] for j in pick), pick) for pick in combinations(range(len(keys)), count)
               if sum(sizes[j] for j in pick) >= short)
    return tuple(keys[j] for j in best[1])


def _net(moves: list[Migration]) -> tuple[Migration, ...]:
    """One requeue per instance: a later pass may move again (or back) what an earlier one moved.

    Keeps each instance's first source and last destination, in first-move order,
    and drops round trips.
    """
    if not moves:
        return ()
    net: dict[InstanceKey, Migration] = {}
    for m in moves:
        first = net.get((m.job, m.instance), m)
        net[(m.job, m.instance)] = Migration(m.job, m.instance, first.src, m.dst)
    return tuple(m for m in net.values() if m.src != m.dst)


def _width(unit: Unit) -> int:
    return unit.width if isinstance(unit, Slot) else 1


def _members(unit: Unit) -> list[InstanceKey]:
    return unit.members() if isinstance(unit, Slot) else [unit]


def _movable_widths(cap: int) -> list[int]:
    return [w for w in slot_widths(cap) if w < cap]


def _describe(keys: list[InstanceKey], gpus_of) -> str:
    return ", ".join(f"{job}#{k} ({gpus_of((job, k))} GPU)" for job, k in keys)
