"""The collector pause leaves the collector as it found it."""

from __future__ import annotations

import gc

from compass_slurm import collector


def test_the_collector_is_paused_inside_and_left_as_it_was():
    was = gc.isenabled()
    try:
        for before in (True, False):
            (gc.enable if before else gc.disable)()
            with collector.paused():
                assert not gc.isenabled()
            assert gc.isenabled() is before
    finally:
        (gc.enable if was else gc.disable)()


class _Node:
    def __init__(self) -> None:
        self.me = self  # a reference cycle: only a collection frees it


def test_what_survives_a_freezing_pause_is_frozen_until_a_sweep_collects_it():
    was = gc.isenabled()
    gc.enable()
    try:
        gc.unfreeze()
        with collector.paused(freeze=True):
            assert not gc.isenabled()
            kept = [_Node()]
            lost = _Node()
        assert gc.isenabled() and gc.get_freeze_count() > 0
        assert gc.is_tracked(kept) and not any(kept is o for o in gc.get_objects())  # frozen: no generation's
        del lost
        gc.collect()
        assert sum(isinstance(o, _Node) for o in gc.get_objects()) == 0  # the cycle waits, frozen
        assert collector.sweep() >= 1 and gc.get_freeze_count() == 0
        assert sum(isinstance(o, _Node) for o in gc.get_objects()) == 1  # kept's, now in a generation again
        gc.disable()
        with collector.paused(freeze=True):
            pass
        assert not gc.isenabled() and gc.get_freeze_count() == 0  # nothing frozen when collection was off
    finally:
        gc.unfreeze()
        (gc.enable if was else gc.disable)()
