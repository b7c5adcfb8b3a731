"""The long-running processes' collector settings (reference/gctune.py)."""

import gc

from reference import gctune


def test_tune_freezes_what_start_up_made_and_raises_the_thresholds():
    before = gc.get_threshold()
    try:
        kept = [[i] for i in range(1000)]  # objects a process keeps for its life
        gctune.tune()
        assert gc.get_threshold() == (gctune.YOUNG, gctune.MIDDLE, gctune.OLD)
        assert gc.get_freeze_count() >= len(kept)
        assert all(gc.is_tracked(k) for k in kept[:3])
        # A cycle made afterwards is still collected.
        cycle: list = []
        cycle.append(cycle)
        del cycle
        assert gc.collect() >= 1
    finally:
        gc.unfreeze()
        gc.set_threshold(*before)
