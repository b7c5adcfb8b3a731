"""Task processes as /proc shows them: who runs, judged without asking the cell.

Every task process carries its task id in its environment (`TASK_ID`, inherited by its
children), so a scan of /proc finds each process of each task index whatever the cell says.
`ProcSampler` scans in a thread and records samples, and the double-running it proves: two
task ids of one (job, index) whose processes are both alive when re-checked after the scan
(a scan is not atomic: a process that died before its successor was read is no double).
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterable

from loadtests.periodic import Periodic
from spec.taskid import parse_task_id, running_twice

TASK_ID = b"TASK_ID="


def _stat(pid: int | str) -> tuple[bytes, bytes] | None:
    """(state, start time) of a process from /proc/PID/stat; None when it is gone. The start
    time tells a process from a later one that reuses its pid (pid_max may be only 32768)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            fields = handle.read().rpartition(b")")[2].split()
        return fields[0], fields[19]
    except (OSError, IndexError):
        return None


def _alive_stat(pid: int | str) -> bool:
    """The process exists and is not a zombie (a zombie runs nothing)."""
    st = _stat(pid)
    return st is not None and st[0] != b"Z"


def _task_id(pid: int | str) -> str | None:
    """The task id in a process's environment, or None."""
    try:
        with open(f"/proc/{pid}/environ", "rb") as handle:
            raw = handle.read()
    except OSError:
        return None
    at = raw.find(TASK_ID)
    if at < 0 or (at > 0 and raw[at - 1] != 0):
        return None
    end = raw.find(b"\0", at)
    return raw[at + len(TASK_ID) : end if end >= 0 else len(raw)].decode(errors="replace")


class Scanner:
    """Scans /proc for task processes, reading each task process's environment once.

    A scan reads every process's stat (alive, start time); the environment, the larger read,
    only of a process not already known by pid and start time as a task. Only task ids are
    remembered: a process read between its fork and its exec shows its parent's environment,
    without a task id, and is read again at the next scan.
    """

    def __init__(self) -> None:
        self._known: dict[int, tuple[bytes, str]] = {}  # pid -> (start time, task id)

    def scan(self, prefixes: Iterable[str] = ("",)) -> dict[int, str]:
        """pid -> task id of every live process whose task id starts with one of `prefixes`."""
        wanted = tuple(prefixes)
        found: dict[int, str] = {}
        known: dict[int, tuple[bytes, str]] = {}
        for entry in os.listdir("/proc"):
            if not entry.isdigit():
                continue
            st = _stat(entry)
            if st is None:
                continue
            pid = int(entry)
            cached = self._known.get(pid)
            tid = cached[1] if cached is not None and cached[0] == st[1] else _task_id(entry)
            if tid is None:
                continue
            known[pid] = (st[1], tid)
            if st[0] != b"Z" and tid.startswith(wanted):
                found[pid] = tid
        self._known = known
        return found

    def still_live(self, pids: dict[int, str], exact_below: int = 200) -> dict[int, str]:
        """The processes of `pids` (from a scan of this scanner) still alive. A signal 0 each
        (no file read) while many are; once fewer than `exact_below` pass it, each is also
        checked by its stat: not a zombie, and not a later process that reuses its pid."""
        out: dict[int, str] = {}
        for pid, tid in pids.items():
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                continue
            except PermissionError:
                pass  # exists, another user's
            out[pid] = tid
        if len(out) >= exact_below:
            return out
        exact: dict[int, str] = {}
        for pid, tid in out.items():
            st = _stat(pid)
            known = self._known.get(pid)
            if st is not None and st[0] != b"Z" and known is not None and known[0] == st[1]:
                exact[pid] = tid
        return exact


def task_processes(prefixes: Iterable[str] = ("",)) -> dict[int, str]:
    """pid -> task id of every live process whose task id starts with one of `prefixes`."""
    return Scanner().scan(prefixes)


def index_of(task_id: str) -> tuple[str, int]:
    """'load/flood/12#0@1' -> ('load/flood', 12)."""
    return parse_task_id(task_id)[:2]


def doubles_in(pids: dict[int, str]) -> list[tuple[tuple[str, int], list[str]]]:
    """(job, index) -> task ids, where one index has processes of two task ids still alive
    (spec.taskid.running_twice over the ids of the processes alive now; /proc is read again
    only for the indices seen with two ids)."""
    suspects = running_twice(set(pids.values()))
    alive = {tid for pid, tid in pids.items() if index_of(tid) in suspects and _alive_stat(pid)}
    return sorted((key, sorted(ids)) for key, ids in running_twice(alive).items())


class ProcSampler(Periodic):
    """Scans /proc every `every` seconds in a thread (bounded by the run it is used in)."""

    def __init__(self, prefixes: Iterable[str], every: float = 0.5) -> None:
        # A scan of thousands of processes can take seconds on a busy machine.
        super().__init__(every, "proc-sampler", join_timeout_s=60.0)
        self.prefixes = tuple(prefixes)
        self.samples: list[tuple[float, dict[int, str]]] = []  # (monotonic time, pid -> task id)
        self.doubles: list[tuple[float, tuple[str, int], list[str]]] = []
        self.scanner = Scanner()
        self._scan_lock = threading.Lock()

    def scan(self, prefixes: Iterable[str]) -> dict[int, str]:
        """A fresh scan (not a sample), sharing the sampler's knowledge of which pid runs what."""
        with self._scan_lock:
            return self.scanner.scan(prefixes)

    def still_live(self, pids: dict[int, str]) -> dict[int, str]:
        """Which of `pids`, from an earlier scan, are still alive (cheap: no environment read)."""
        with self._scan_lock:
            return self.scanner.still_live(pids)

    def tick(self) -> None:
        t = time.monotonic()
        pids = self.scan(self.prefixes)
        self.samples.append((t, pids))
        self.doubles += [(t, key, ids) for key, ids in doubles_in(pids)]

    def live(self, prefix: str) -> set[str]:
        """Task ids with a live process now (a fresh scan, not a sample)."""
        return set(self.scan((prefix,)).values())

    def started_after(self, since: float, prefix: str) -> list[tuple[float, list[str]]]:
        """Samples after `since` that show a process of `prefix`: what started after a kill."""
        return [
            (t, sorted({v for v in pids.values() if v.startswith(prefix)}))
            for t, pids in self.samples
            if t > since and any(v.startswith(prefix) for v in pids.values())
        ]
