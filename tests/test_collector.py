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
