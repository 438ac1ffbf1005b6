"""The Anchor-Based Space: slots, anchors, fillers, pool nodes, and the indexes over them.

This module only keeps the structure and its indexes consistent; the COMPASS
rules that decide what goes where live in compass.py. Every node is, by its
contents, one of:

- empty: nothing on it;
- pool: only 1-GPU instances that are not fillers (``ones``);
- slotted: one or more slots, each an anchor (>= 2 GPUs) plus 1-GPU fillers up to
  the slot width; ``ones`` here are orphans (fillers whose anchor left when no
  other home existed) and ``extras`` are instances outside ABS (adopted from a
  foreign placement, or placed by the work-conserving fallback).

D(n), the unprofiled residue of a slotted node, is its capacity minus slot
widths, orphans and extras.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..cluster import ClusterState
from ..index import Buckets, MinSet
from ..model import InstanceKey


@dataclass(eq=False)
class Slot:
    width: int
    anchor: InstanceKey
    anchor_gpus: int
    fillers: list[InstanceKey] = field(default_factory=list)

    @property
    def vacancy(self) -> int:
        return self.width - self.anchor_gpus - len(self.fillers)

    def members(self) -> list[InstanceKey]:
        return [self.anchor, *self.fillers]


# Where an instance sits in the ABS: its role and, for anchors and fillers, its slot.
ANCHOR, FILLER, ONE, EXTRA = "anchor", "filler", "one", "extra"


class AbsState:
    """ABS structure over a ClusterState; raw GPU accounting stays in the ClusterState."""

    def __init__(self, cluster: ClusterState) -> None:
        self.c = cluster
        n = len(cluster)
        self.slots: list[list[Slot]] = [[] for _ in range(n)]
        self.ones: list[list[InstanceKey]] = [[] for _ in range(n)]
        self.extras: list[list[InstanceKey]] = [[] for _ in range(n)]
        self.role: dict[InstanceKey, tuple[str, Slot | None]] = {}
        #: per node group (ClusterState.groups, by index), so that a slot width means the same thing
        #: within an index and a pass over one never moves an instance to another group
        self.cap: list[int] = [group.capacity for group in cluster.groups]
        self.empty: dict[int, MinSet] = {g: MinSet() for g in range(len(self.cap))}
        self.residue: dict[int, Buckets] = {g: Buckets(cap) for g, cap in enumerate(self.cap)}
        self.pool_room: dict[int, Buckets] = {g: Buckets(cap) for g, cap in enumerate(self.cap)}
        self.vacant: dict[int, MinSet] = {g: MinSet() for g in range(len(self.cap))}
        #: nodes with a slot vacancy, usable or not (the raw GPUs may be taken by extras, or the node unavailable)
        self.open = MinSet()
        self.orphaned = MinSet()
        self.foreign = MinSet()
        self.vacancy_total = 0
        #: bumped whenever a node enters or leaves the pool nodes or its room there changes (what the pool
        #: drain reads: a drain that found nothing to move finds nothing until it changes)
        self.pools_changed = 0
        #: per node, bumped by every change of its contents: what a policy derives from a node's
        #: contents (e.g. which of its slots may move) it keeps until this moves on
        self.version: list[int] = [0] * n
        # per group, partial_hosts() as last listed; dropped when a node enters, leaves or moves in it
        self._hosts: dict[int, tuple[int, ...]] = {}
        # per group, partial_pools() at pools_changed
        self._pools: dict[int, tuple[int, tuple[tuple[int, int], ...]]] = {}
        for i in range(n):
            self.refresh(i)
        cluster.watchers.append(self.refresh)

    # -- node facts ----------------------------------------------------------------------

    def kind(self, i: int) -> str:
        if self.slots[i] or self.extras[i]:
            return "slotted"
        return "pool" if self.ones[i] else "empty"

    def residue_of(self, i: int) -> int:
        """D(n) of a slotted node; for an empty node its capacity."""
        used = sum(s.width for s in self.slots[i]) + len(self.ones[i])
        used += sum(self.c.gpus_of(k) for k in self.extras[i])
        return self.c.capacity[i] - used

    def refresh(self, i: int) -> None:
        """Recompute node i's membership in every index from its contents (runs on every change)."""
        c = self.c
        cap = c.capacity[i]
        g = c.group_of[i]
        avail = c.available[i]
        self.version[i] += 1
        slots, ones, extras = self.slots[i], self.ones[i], self.extras[i]
        slotted = bool(slots or extras)
        if avail and not slotted and not ones:
            self.empty[g].add(i)
        else:
            self.empty[g].discard(i)
        residue = self.residue_of(i) if avail and slotted else None
        if self.residue[g].set(i, residue if residue is not None and residue >= 0 else None):
            self._hosts.pop(g, None)
        room = cap - len(ones)  # negative only on an overcommitted adopted node: in no bucket
        if self.pool_room[g].set(i, room if avail and ones and not slotted and room >= 0 else None):
            self.pools_changed += 1
        # A vacancy is usable only while the node has raw GPUs free: a work-conserving
        # extra may sit in space that a slot's vacancy also claims.
        open_slot = bool(slots) and any(s.vacancy > 0 for s in slots)
        if avail and open_slot and c.used[i] < cap:
            self.vacant[g].add(i)
        else:
            self.vacant[g].discard(i)
        if open_slot:
            self.open.add(i)
        else:
            self.open.discard(i)
        if slotted and ones:
            self.orphaned.add(i)
        else:
            self.orphaned.discard(i)
        if extras:
            self.foreign.add(i)
        else:
            self.foreign.discard(i)

    # -- structural edits (raw accounting is the caller's, via ClusterState) --------------

    def add_slot(self, i: int, width: int, anchor: InstanceKey) -> Slot:
        slot = Slot(width, anchor, self.c.gpus_of(anchor))
        self.slots[i].append(slot)
        self.role[anchor] = (ANCHOR, slot)
        self.vacancy_total += slot.vacancy
        self.refresh(i)
        return slot

    def add_filler(self, i: int, slot: Slot, key: InstanceKey) -> None:
        slot.fillers.append(key)
        self.role[key] = (FILLER, slot)
        self.vacancy_total -= 1
        self.refresh(i)

    def add_one(self, i: int, key: InstanceKey) -> None:
        self.ones[i].append(key)
        self.role[key] = (ONE, None)
        self.refresh(i)

    def add_extra(self, i: int, key: InstanceKey) -> None:
        self.extras[i].append(key)
        self.role[key] = (EXTRA, None)
        self.refresh(i)

    def detach(self, key: InstanceKey) -> tuple[str, Slot | None]:
        """Take an instance out of the structure (fillers of a departing anchor become ones)."""
        i = self.c.location[key]
        role, slot = self.role.pop(key)
        if role == ANCHOR:
            assert slot is not None
            self.slots[i].remove(slot)
            self.vacancy_total -= slot.vacancy
            for filler in slot.fillers:
                self.ones[i].append(filler)
                self.role[filler] = (ONE, None)
        elif role == FILLER:
            assert slot is not None
            slot.fillers.remove(key)
            self.vacancy_total += 1
        elif role == ONE:
            self.ones[i].remove(key)
        else:
            self.extras[i].remove(key)
        self.refresh(i)
        return role, slot

    def take_slot(self, i: int, slot: Slot) -> None:
        """Lift a whole slot (anchor and fillers) off node i, keeping its roles, to put it elsewhere."""
        self.slots[i].remove(slot)
        self.refresh(i)

    def put_slot(self, i: int, slot: Slot) -> None:
        self.slots[i].append(slot)
        self.refresh(i)

    def partial_hosts(self, g: int) -> tuple[int, ...]:
        """Available slotted nodes of group ``g`` with residue left (not full), by (D(n), index)."""
        hosts = self._hosts.get(g)
        if hosts is None:  # Compact asks after every event; most events change no slotted node's residue
            buckets = self.residue[g]
            # most buckets are empty; listing one sorts it
            hosts = tuple(i for d in range(1, self.cap[g] + 1) if buckets.count(d) for i in buckets.bucket(d))
            self._hosts[g] = hosts
        return hosts

    def partial_pools(self, g: int) -> tuple[tuple[int, int], ...]:
        """(room, node) of every partial pool node of group ``g``, the fullest first (room, then index)."""
        kept = self._pools.get(g)
        if kept is None or kept[0] != self.pools_changed:  # what the pool drain reads after every event
            buckets = self.pool_room[g]
            pools = tuple((room, i) for room in range(1, self.cap[g]) if buckets.count(room) for i in buckets.bucket(room))
            kept = self._pools[g] = (self.pools_changed, pools)
        return kept[1]
