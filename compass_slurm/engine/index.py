"""Small indexes that keep every per-event operation off an O(N) scan."""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterator


class MinSet:
    """A set of ints whose smallest member is found in amortised O(log n).

    Node indexes are ints; the engine always wants "the lowest-index node with
    property X" so that decisions are deterministic. A heap with lazy deletion
    gives that without sorting on every query.
    """

    __slots__ = ("_members", "_heap")

    def __init__(self) -> None:
        self._members: set[int] = set()
        self._heap: list[int] = []

    def add(self, item: int) -> None:
        if item not in self._members:
            self._members.add(item)
            heapq.heappush(self._heap, item)

    def discard(self, item: int) -> None:
        if item in self._members:
            self._members.discard(item)
            # Rebuild when stale entries dominate, so the heap stays O(members).
            if len(self._heap) > 2 * len(self._members) + 32:
                self._heap = sorted(self._members)

    def min(self) -> int | None:
        heap = self._heap
        members = self._members
        while heap:
            top = heap[0]
            if top in members:
                return top
            heapq.heappop(heap)
        return None

    def smallest(self, k: int) -> list[int]:
        """The k smallest members, ascending."""
        if k <= 0:
            return []
        # Popped off the heap and pushed back: O(k log n), where a pass over the members is O(n).
        heap, members = self._heap, self._members
        out: list[int] = []
        while heap and len(out) < k:
            item = heapq.heappop(heap)
            if item in members and (not out or item != out[-1]):  # a stale entry or a re-added one's twin: dropped
                out.append(item)
        for item in out:
            heapq.heappush(heap, item)
        return out

    def first(self, wanted: Callable[[int], bool]) -> int | None:
        """The smallest member ``wanted`` accepts, or None: O(k log n) for the k smallest it looks at."""
        k, seen = 4, 0
        while True:
            found = self.smallest(k)
            for item in found[seen:]:
                if wanted(item):
                    return item
            if len(found) < k:
                return None
            seen, k = k, 2 * k

    def __contains__(self, item: int) -> bool:
        return item in self._members

    def __len__(self) -> int:
        return len(self._members)

    def __bool__(self) -> bool:
        return bool(self._members)

    def __iter__(self) -> Iterator[int]:
        return iter(sorted(self._members))


class Buckets:
    """Node indexes grouped by a small integer key (free GPUs, residue, ...)."""

    __slots__ = ("_buckets", "_key_of")

    def __init__(self, max_key: int) -> None:
        self._buckets = [MinSet() for _ in range(max_key + 1)]
        self._key_of: dict[int, int] = {}

    def set(self, item: int, key: int | None) -> bool:
        """Put ``item`` under ``key``; ``None`` removes it. Returns whether its key changed."""
        old = self._key_of.get(item)
        if old == key:
            return False
        if old is not None:
            self._buckets[old].discard(item)
            del self._key_of[item]
        if key is not None:
            self._buckets[key].add(item)
            self._key_of[item] = key
        return True

    def key(self, item: int) -> int | None:
        return self._key_of.get(item)

    def bucket(self, key: int) -> MinSet:
        return self._buckets[key]

    def count(self, key: int) -> int:
        return len(self._buckets[key])

    @property
    def max_key(self) -> int:
        return len(self._buckets) - 1

    def lowest_with_key_at_least(self, key: int) -> tuple[int, int] | None:
        """(key, item) for the smallest key >= ``key`` that has members, lowest item first."""
        for k in range(max(key, 0), len(self._buckets)):
            item = self._buckets[k].min()
            if item is not None:
                return k, item
        return None

    def highest_with_key_at_least(self, key: int) -> tuple[int, int] | None:
        """(key, item) for the largest key >= ``key`` that has members, lowest item first."""
        for k in range(len(self._buckets) - 1, max(key, 0) - 1, -1):
            item = self._buckets[k].min()
            if item is not None:
                return k, item
        return None
