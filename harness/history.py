"""Client-operation histories and their checker: lost writes, per-job linearizability, double-running tasks.

A `History` records every operation a client issued against a cell: when it was invoked,
when it completed and how (ok, failed, unknown). `check` judges a history three ways:

- no acknowledged write is lost: a read that began after an ok write completed, with no
  other write to that job that could order after it, must show that write's effect;
- reads of each job are linearizable with respect to the writes (Wing & Gong's search with
  Lowe's memoization, one register per job key, P-compositionality: keys are independent);
  an `unknown` write may or may not have taken effect, a `failed` one did not (the API
  promises that a rejected request writes nothing);
- from borglet task reports sampled over time, no task index ever has two processes
  running at once, except while its machine was declared lost (a partition window).

No maintained Python package checks linearizability (the known checkers, Porcupine and
Knossos, are Go and Clojure), so the search is written here; it is exponential only in
the number of mutually concurrent operations on one job, which the harness keeps small.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import asdict, dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any


class Outcome(StrEnum):
    OK = "ok"
    FAILED = "failed"  # the cell refused it: it did not happen
    UNKNOWN = "unknown"  # timeout, reset, 5xx: it may or may not have happened
    PENDING = "pending"  # invoked, not completed yet (treated as unknown by the checker)


class OpKind(StrEnum):
    SUBMIT = "submit"  # value: the job's tracked fields; the job must not exist
    UPDATE = "update"  # value: the changed fields; the job must exist
    KILL = "kill"  # the job must exist; afterwards it does not
    KILL_TASK = "kill_task"  # value: the index; does not change the job's register
    READ = "read"  # result: the job's tracked fields, or None when it does not exist


WRITES = (OpKind.SUBMIT, OpKind.UPDATE, OpKind.KILL)


@dataclass
class Op:
    id: int
    op: str
    key: str
    value: Any
    invoke_t: float
    complete_t: float | None = None
    outcome: str = Outcome.PENDING
    result: Any = None


@dataclass
class CheckResult:
    ok: bool
    lost_writes: list[Op] = field(default_factory=list)
    nonlinearizable_keys: list[str] = field(default_factory=list)
    double_running: list[dict[str, Any]] = field(default_factory=list)
    details: list[str] = field(default_factory=list)


class History:
    """An append-only record of client operations; thread-safe enough for one writer per op."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.ops: list[Op] = []
        self._clock = clock

    def invoke(self, op: str, key: str, value: Any = None, at: float | None = None) -> int:
        op_id = len(self.ops)
        self.ops.append(Op(op_id, str(op), key, value, self._clock() if at is None else at))
        return op_id

    def complete(
        self, op_id: int, outcome: str, result: Any = None, at: float | None = None
    ) -> None:
        o = self.ops[op_id]
        o.outcome = str(Outcome(outcome))
        o.result = result
        o.complete_t = self._clock() if at is None else at

    def to_jsonl(self, path: str | Path) -> None:
        with open(path, "w") as f:
            for o in self.ops:
                f.write(json.dumps(asdict(o), sort_keys=True) + "\n")

    @classmethod
    def from_jsonl(cls, path: str | Path) -> History:
        h = cls()
        with open(path) as f:
            for line in f:
                if line.strip():
                    h.ops.append(Op(**json.loads(line)))
        return h


# --- the register model of one job ----------------------------------------------------------

Value = Mapping[str, Any] | None


def _freeze(v: Value) -> Any:
    return None if v is None else tuple(sorted((k, json.dumps(x, sort_keys=True)) for k, x in v.items()))


def _apply(state: Value, o: Op) -> tuple[bool, Value]:
    """(legal, next state) for one operation applied to the job register."""
    if o.op == OpKind.SUBMIT:
        return state is None, dict(o.value or {})
    if o.op == OpKind.UPDATE:
        return state is not None, {**(state or {}), **(o.value or {})}
    if o.op == OpKind.KILL:
        return state is not None, None
    if o.op == OpKind.READ:
        return _matches(o.result, state), state
    return True, state  # kill_task: no change to the job's register


def _matches(read: Value, state: Value) -> bool:
    """A read matches when it shows the same fields the register tracks (extra fields are ignored)."""
    if read is None or state is None:
        return read is None and state is None
    return all(read.get(k) == v for k, v in state.items())


def linearizable(ops: list[Op], initial: Value = None, budget: int = 200_000) -> bool | None:
    """Wing-Gong search over one key's ops; None when the search budget runs out (undecided).

    Ok ops must all be linearized between their invoke and completion; unknown writes may be
    linearized at any time after their invoke, or never; failed ops and unknown reads are
    dropped before the search.
    """
    relevant = [
        o for o in ops
        if o.outcome == Outcome.OK or (o.op in WRITES and o.outcome in (Outcome.UNKNOWN, Outcome.PENDING))
    ]  # fmt: skip
    relevant.sort(key=lambda o: o.invoke_t)
    n = len(relevant)
    required = 0
    for i, o in enumerate(relevant):
        if o.outcome == Outcome.OK:
            required |= 1 << i
    ends = [
        o.complete_t if o.outcome == Outcome.OK and o.complete_t is not None else math.inf
        for o in relevant
    ]
    seen: set[tuple[int, Any]] = set()
    steps = 0

    def search(done: int, state: Value) -> bool | None:
        nonlocal steps
        if done & required == required:
            return True
        memo = (done, _freeze(state))
        if memo in seen:
            return False
        seen.add(memo)
        steps += 1
        if steps > budget:
            return None
        # An op may go next only if it was invoked before every pending ok op completed.
        horizon = min(ends[i] for i in range(n) if not done >> i & 1)
        undecided = False
        for i in range(n):
            if done >> i & 1 or relevant[i].invoke_t > horizon:
                continue
            legal, nxt = _apply(state, relevant[i])
            if not legal:
                continue
            r = search(done | 1 << i, nxt)
            if r:
                return True
            undecided = undecided or r is None
        return None if undecided else False

    return search(0, initial)


# --- lost writes -------------------------------------------------------------------------------


def _shows(read: Value, w: Op) -> bool:
    if w.op == OpKind.KILL:
        return read is None
    if read is None:
        return False
    return all(read.get(k) == v for k, v in (w.value or {}).items())


def lost_writes(ops: list[Op]) -> list[tuple[Op, Op]]:
    """(write, read) pairs: an ok write that a later read, with no rival write, does not show."""
    out = []
    writes = [o for o in ops if o.op in WRITES and o.outcome != Outcome.FAILED]
    for w in writes:
        if w.outcome != Outcome.OK or w.complete_t is None:
            continue
        for r in ops:
            if r.op != OpKind.READ or r.outcome != Outcome.OK or r.invoke_t <= w.complete_t:
                continue
            rivals = [
                x for x in writes
                if x is not w and x.invoke_t < (r.complete_t or math.inf)
                and (x.complete_t is None or x.outcome != Outcome.OK or x.complete_t > w.invoke_t)
            ]  # fmt: skip
            if not rivals and not _shows(r.result, w):
                out.append((w, r))
                break
    return out


# --- double running ------------------------------------------------------------------------------

LIVE_STATES = ("STARTING", "RUNNING")


def parse_task_id(task_id: str) -> tuple[str, int, int, str]:
    """'user/job/3#1@2' -> ('user/job', 3, 1, '2'): job, index, incarnation, placement."""
    base, _, placement = task_id.partition("@")
    head, _, inc = base.rpartition("#")
    job, _, index = head.rpartition("/")
    return job, int(index), int(inc or 0), placement


def double_running(
    task_reports: Iterable[Mapping[str, Any]],
    lost_windows: Iterable[tuple[str, float, float]] = (),
) -> tuple[list[dict[str, Any]], int]:
    """Overlapping live processes of one task index, outside lost windows; and how many
    (index, process) intervals were checked.

    A report is {"machine", "task_id", "state"} with either "t" (when it was true) or "t0"
    and "t1" (the request for it was sent at t0 and answered at t1: it was true at some moment
    in between). Only overlaps the samples prove are found: a process seen live in windows
    [s1, e1] ... [sk, ek] was surely live from e1 to sk, and two processes overlapped when
    those spans meet, when one's first or last window lies inside the other's span, or when
    one reply shows both. Two borglets read one after the other in one poll prove nothing:
    the first may have stopped its process before the second started its own.
    """
    firsts: dict[tuple[str, str], tuple[float, float]] = {}  # (machine, task_id) -> first window
    lasts: dict[tuple[str, str], tuple[float, float]] = {}
    replies: dict[tuple[str, float, float], list[str]] = {}  # one borglet answer -> its live ids
    for r in task_reports:
        if r.get("state") not in LIVE_STATES:
            continue
        k = (str(r["machine"]), str(r["task_id"]))
        w = (float(r.get("t0", r.get("t"))), float(r.get("t1", r.get("t"))))
        if k not in firsts or w < firsts[k]:
            firsts[k] = w
        if k not in lasts or w > lasts[k]:
            lasts[k] = w
        replies.setdefault((k[0], *w), []).append(k[1])
    windows = list(lost_windows)
    by_index: dict[tuple[str, int], list[tuple[str, str]]] = {}
    for machine, tid in firsts:
        job, index, _, _ = parse_task_id(tid)
        by_index.setdefault((job, index), []).append((machine, tid))
    together = {
        frozenset((a, b)): (s, e)
        for (machine, s, e), tids in replies.items()
        for a in tids for b in tids if a != b and parse_task_id(a)[:2] == parse_task_id(b)[:2]
    }  # fmt: skip

    def span(k: tuple[str, str]) -> tuple[float, float]:
        return firsts[k][1], lasts[k][0]  # empty when lo > hi (one sample)

    def proven(k1: tuple[str, str], k2: tuple[str, str]) -> tuple[float, float] | None:
        if (both := together.get(frozenset((k1[1], k2[1])))) is not None and k1[0] == k2[0]:
            return both
        (a1, b1), (a2, b2) = span(k1), span(k2)
        if a1 <= b1 and a2 <= b2 and max(a1, a2) <= min(b1, b2):
            return max(a1, a2), min(b1, b2)
        for (x, y), (lo, hi) in ((span(k2), firsts[k1]), (span(k2), lasts[k1]), (span(k1), firsts[k2]), (span(k1), lasts[k2])):
            if x <= lo and hi <= y:
                return lo, hi
        return None

    found = []
    for (job, index), runs in sorted(by_index.items()):
        runs.sort(key=lambda k: firsts[k])
        for i, k1 in enumerate(runs):
            for k2 in runs[i + 1 :]:
                overlap = proven(k1, k2)
                if overlap is None:
                    continue
                lo, hi = overlap
                excused = any(wm in (k1[0], k2[0]) and ws <= lo and hi <= we for wm, ws, we in windows)
                if not excused:
                    found.append({"job": job, "index": index, "a": k1, "b": k2, "overlap": overlap})
    return found, len(firsts)


def index_timeline(
    task_reports: Iterable[Mapping[str, Any]],
    lost_windows: Iterable[tuple[str, float, float]],
    found: Mapping[str, Any],
    around_s: float = 15.0,
) -> list[str]:
    """What the samples said about one double-running index near its overlap, for the report:
    each machine's reports of that index's processes (time, machine, id, state) and the lost
    windows of the two machines, so a failure can be read from the run's output alone."""
    lo, hi = found["overlap"]
    machines = {found["a"][0], found["b"][0]}
    lines = []
    for r in task_reports:
        tid = str(r["task_id"])
        job, index, _, _ = parse_task_id(tid)
        t0 = float(r.get("t0", r.get("t", 0.0)))
        t1 = float(r.get("t1", r.get("t", 0.0)))
        if (job, index) == (found["job"], found["index"]) and lo - around_s <= t1 and t0 <= hi + around_s:
            lines.append((t0, f"  seen {t0:.3f}-{t1:.3f} {r['machine']} {tid} {r.get('state')}"))
    for machine, start, end in lost_windows:
        if machine in machines and start <= hi + around_s and lo - around_s <= end:
            lines.append((start, f"  lost window {machine} {start:.3f}-{end:.3f}"))
    return [line for _, line in sorted(lines)][:60]


# --- the whole check -----------------------------------------------------------------------------


def check(
    history: History,
    task_reports: Iterable[Mapping[str, Any]] | None = None,
    lost_windows: Iterable[tuple[str, float, float]] | None = None,
) -> CheckResult:
    res = CheckResult(ok=True)
    by_key: dict[str, list[Op]] = {}
    for o in history.ops:
        by_key.setdefault(o.key, []).append(o)
    for key, ops in sorted(by_key.items()):
        for w, r in lost_writes(ops):
            res.lost_writes.append(w)
            res.details.append(
                f"lost write: {w.op} {key} {w.value} acknowledged at {w.complete_t:.3f}, "
                f"read at {r.invoke_t:.3f} shows {r.result}"
            )
        verdict = linearizable(ops)
        if verdict is False:
            res.nonlinearizable_keys.append(key)
            res.details.append(f"not linearizable: {key} ({len(ops)} ops)")
        elif verdict is None:
            res.details.append(f"undecided (search budget): {key}")
    if task_reports is not None:
        reports, windows = list(task_reports), list(lost_windows or ())  # read twice: by the check, and for each finding
        found, _ = double_running(reports, windows)
        res.double_running = found
        for d in found:
            res.details.append(
                f"double running: {d['job']}/{d['index']} {d['a']} and {d['b']} overlap {d['overlap']}"
            )
            res.details += index_timeline(reports, windows, d)
    res.ok = not (res.lost_writes or res.nonlinearizable_keys or res.double_running)
    return res
