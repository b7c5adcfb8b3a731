"""Task processes as /proc shows them: who runs, judged without asking the cell.

Every task process carries its task id in its environment (`TASK_ID`, inherited by its
children), so a scan of /proc finds each process of each task index whatever the cell says.
`ProcSampler` scans in a thread and records samples, and the double-running it proves: two
task ids of one (job, index) whose processes are both alive when re-checked after the scan
(a scan is not atomic: a process that died before its successor was read is no double).
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterable

from loadtests.periodic import Periodic

TASK_ID = b"TASK_ID="


def _alive_stat(pid: int | str) -> bool:
    """The process exists and is not a zombie (a zombie runs nothing)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            return handle.read().rpartition(b")")[2].split()[0] != b"Z"
    except (OSError, IndexError):
        return False


def task_processes(prefixes: Iterable[str] = ("",)) -> dict[int, str]:
    """pid -> task id of every live process whose task id starts with one of `prefixes`."""
    wanted = tuple(prefixes)
    found: dict[int, str] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/environ", "rb") as handle:
                raw = handle.read()
        except OSError:
            continue
        at = raw.find(TASK_ID)
        if at < 0 or (at > 0 and raw[at - 1] != 0):
            continue
        end = raw.find(b"\0", at)
        tid = raw[at + len(TASK_ID) : end if end >= 0 else len(raw)].decode(errors="replace")
        if tid.startswith(wanted) and _alive_stat(entry):
            found[int(entry)] = tid
    return found


def index_of(task_id: str) -> tuple[str, int]:
    """'load/flood/12#0@1' -> ('load/flood', 12)."""
    head = task_id.partition("#")[0]
    job, _, index = head.rpartition("/")
    return job, int(index)


def doubles_in(pids: dict[int, str]) -> list[tuple[tuple[str, int], list[str]]]:
    """(job, index) -> task ids, where one index has processes of two task ids still alive."""
    by_index: dict[tuple[str, int], dict[str, list[int]]] = {}
    for pid, tid in pids.items():
        by_index.setdefault(index_of(tid), {}).setdefault(tid, []).append(pid)
    found = []
    for key, ids in sorted(by_index.items()):
        if len(ids) < 2:
            continue
        live = sorted(tid for tid, ps in ids.items() if any(_alive_stat(p) for p in ps))
        if len(live) > 1:
            found.append((key, live))
    return found


class ProcSampler(Periodic):
    """Scans /proc every `every` seconds in a thread (bounded by the run it is used in)."""

    def __init__(self, prefixes: Iterable[str], every: float = 0.5) -> None:
        # A scan of thousands of processes can take seconds on a busy machine.
        super().__init__(every, "proc-sampler", join_timeout_s=60.0)
        self.prefixes = tuple(prefixes)
        self.samples: list[tuple[float, dict[int, str]]] = []  # (monotonic time, pid -> task id)
        self.doubles: list[tuple[float, tuple[str, int], list[str]]] = []

    def tick(self) -> None:
        t = time.monotonic()
        pids = task_processes(self.prefixes)
        self.samples.append((t, pids))
        self.doubles += [(t, key, ids) for key, ids in doubles_in(pids)]

    def live(self, prefix: str) -> set[str]:
        """Task ids with a live process now (a fresh scan, not a sample)."""
        return set(task_processes((prefix,)).values())

    def started_after(self, since: float, prefix: str) -> list[tuple[float, list[str]]]:
        """Samples after `since` that show a process of `prefix`: what started after a kill."""
        return [
            (t, sorted({v for v in pids.values() if v.startswith(prefix)}))
            for t, pids in self.samples
            if t > since and any(v.startswith(prefix) for v in pids.values())
        ]
