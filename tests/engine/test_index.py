"""MinSet and Buckets: the engine's node indexes."""

from __future__ import annotations

import random

from compass_slurm.engine.index import MinSet


def test_smallest_matches_the_sorted_members_through_adds_discards_and_re_adds():
    rng = random.Random(7)
    s, members = MinSet(), set()
    for _ in range(3000):
        item = rng.randrange(60)
        if rng.random() < 0.55:
            s.add(item)
            members.add(item)
        else:
            s.discard(item)
            members.discard(item)
        k = rng.randrange(5)
        assert s.smallest(k) == sorted(members)[:k]
        assert s.min() == min(members, default=None)
        assert list(s) == sorted(members)


def test_smallest_of_fewer_members_than_asked_gives_them_all():
    s = MinSet()
    assert s.smallest(3) == []
    for item in (5, 2, 9):
        s.add(item)
    s.discard(2)
    s.add(2)  # re-added: its stale heap entry is a twin
    assert s.smallest(5) == [2, 5, 9]
    assert s.smallest(5) == [2, 5, 9]
