"""Garbage collection for the long-running processes: masters, borglets and the scheduler.

CPython's cyclic collector runs a young collection every 700 net allocations of container
objects, and looks at the whole heap every hundred young ones when a quarter of it is new
since the last look. A leader through a 10,000-task start allocates tens of thousands of
objects a second (decoded records, replies, desired sets): through one such start and its
kill its collector ran 3,515 young and 23 whole-heap collections, 12.6 s of its wall time on a
busy host (docs/decisions.md). Objects freed by their reference counts before a collection
cost it nothing, so collecting less often does less work in all; what only the collector
frees (reference cycles) waits longer.

`tune()` is called once a process has imported and set up what it keeps for its life: those
objects are moved out of the collector's sight (`gc.freeze`), and the thresholds raised.
"""

from __future__ import annotations

import gc

YOUNG = 50_000  # net container allocations between young collections (CPython: 700)
MIDDLE = 20  # young collections between middle ones (CPython: 10)
OLD = 20  # middle collections between looks at the whole heap (CPython: 10)


def tune() -> None:
    gc.collect()  # what start-up left as garbage is not frozen with the rest
    gc.freeze()
    gc.set_threshold(YOUNG, MIDDLE, OLD)
