"""The leader's work counted by kind, not timed: what its per-event paths build and walk.

A counter is one dict increment where the work is done. Tests read it to hold the leader's
work per task flat in the cell's size (tests/unit/test_work_per_task.py, issue 43): a walk of
the whole cell on a per-event path shows as a count that grows with the cell, whatever the
machine's load, where a CPU time would drown in it.

Kinds:
    desired_sets       machines whose desired set was computed
    desired_entries    entries put in a desired set (built or reused from the memo)
    hold_checks        entries or reported processes looked at to decide a hold-back
    sync_checks        machines looked at to decide whether a sync is due
    view_index         tasks put in a view's index (`views.tasks_by_job`)
    records_decoded    records the watch cache decoded
    records_taken_as_written  task records the watch brought back as this process wrote
                       them, taken without decoding (`WatchCache.expect`)
    full_rebuilds      desired sets rebuilt from the whole cell (the safety net)
    views_built        cell views the watch cache built (one per batch of changes read)
    view_entries_copied  entries of the maps a view copied whole (C-level copies of every
                       task's entry when tasks changed: this grows with the cell)
"""

from __future__ import annotations

from collections import Counter

counts: Counter[str] = Counter()


def add(kind: str, n: int = 1) -> None:
    counts[kind] += n


def snapshot() -> dict[str, int]:
    return dict(counts)
