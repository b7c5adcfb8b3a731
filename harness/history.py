"""Client-operation histories and their checker: lost writes, per-job linearizability, double-running tasks.

A `History` records every operation a client issued against a cell: when it was invoked,
when it completed and how (ok, failed, unknown). `check` judges a history three ways:

- no acknowledged write is lost: a read that began after an ok write completed must show
  that write's effect, unless a write that may have come after it explains what the read
  shows (`lost_writes`);
- reads of each job are linearizable with respect to the writes (Wing & Gong's search with
  Lowe's memoization, one register per job key, P-compositionality: keys are independent);
  an `unknown` write may or may not have taken effect, a `failed` one did not (the API
  promises that a rejected request writes nothing). A key whose search runs out of its
  step budget is undecided, and an undecided key fails the check: it is not a pass;
- from borglet task reports sampled over time, no task index ever has two processes
  running at once, except while its machine was declared lost (a partition window).

Every interval is closed: an operation that ends exactly when another begins is concurrent
with it, in every check, so the checks never order two operations the clocks cannot.

No maintained Python package checks linearizability (the known checkers, Porcupine and
Knossos, are Go and Clojure), so the search is written here; it is exponential only in
the number of mutually concurrent operations on one job, which the harness keeps small.
"""

from __future__ import annotations

import json
import math
import time
from bisect import bisect_left, bisect_right
from collections.abc import Callable, Iterable, Mapping
from dataclasses import asdict, dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any

from spec.taskid import parse_task_id


class Outcome(StrEnum):
    OK = "ok"
    FAILED = "failed"  # the cell refused it: it did not happen
    UNKNOWN = "unknown"  # timeout, reset, 5xx: it may or may not have happened
    PENDING = "pending"  # invoked, not completed yet (treated as unknown by the checker)


class OpKind(StrEnum):
    SUBMIT = "submit"  # value: the job's tracked fields; the job must not exist
    UPDATE = "update"  # value: the changed fields; the job must exist
    KILL = "kill"  # the job must exist; afterwards it does not
    KILL_TASK = "kill_task"  # value: the index; the job must exist (404 otherwise); no change to it
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

    @property
    def is_write(self) -> bool:
        return self.op in WRITES

    @property
    def end(self) -> float:
        """When it surely took effect, if it did: its completion when ok; never (inf) when it
        may still take effect (unknown, pending)."""
        return self.complete_t if self.outcome == Outcome.OK and self.complete_t is not None else math.inf


@dataclass
class CheckResult:
    ok: bool
    lost_writes: list[Op] = field(default_factory=list)
    nonlinearizable_keys: list[str] = field(default_factory=list)
    undecided_keys: list[str] = field(default_factory=list)  # the search ran out of steps: a failure
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


def _freeze(v: Any) -> Any:
    if isinstance(v, Mapping):
        return tuple(sorted((k, json.dumps(x, sort_keys=True)) for k, x in v.items()))
    return json.dumps(v, sort_keys=True)


def _apply(state: Value, o: Op) -> tuple[bool, Value]:
    """(legal, next state) for one operation applied to the job register. The guards are the
    API's: a submit of an existing job is refused (409); an update, kill or kill_task of a job
    that does not exist is refused (404), so none of them can succeed on one."""
    if o.op == OpKind.SUBMIT:
        return state is None, dict(o.value or {})
    if o.op == OpKind.UPDATE:
        return state is not None, {**(state or {}), **(o.value or {})}
    if o.op == OpKind.KILL:
        return state is not None, None
    if o.op == OpKind.KILL_TASK:
        return state is not None, state
    if o.op == OpKind.READ:
        return _matches(o.result, state), state
    raise ValueError(f"operation {o.id}: unknown kind {o.op!r}; the register models {[str(k) for k in OpKind]}")


def _matches(read: Value, state: Value) -> bool:
    """A read matches when it shows the same fields the register tracks (extra fields are ignored)."""
    if read is None or state is None:
        return read is None and state is None
    return all(read.get(k) == v for k, v in state.items())


def impossible_read(ops: list[Op], initial: Value = None) -> Op | None:
    """An ok read that no state of the register can match, whatever the order: it shows a job
    no submit made, no job where no kill could remove it, or a field value that no write
    assigned while every way to make the job assigns that field. The search would find the
    same, but only after trying every order of the unknown writes."""
    writes = [o for o in ops if o.op in WRITES and o.outcome != Outcome.FAILED]
    bases = [dict(initial)] if initial is not None else []
    bases += [dict(o.value or {}) for o in writes if o.op == OpKind.SUBMIT]
    can_vanish = initial is None or any(o.op == OpKind.KILL for o in writes)
    always = set.intersection(*(set(b) for b in bases)) if bases else set()
    assigned: dict[str, set[Any]] = {}
    for value in bases + [dict(o.value or {}) for o in writes if o.op == OpKind.UPDATE]:
        for k, x in value.items():
            assigned.setdefault(k, set()).add(_freeze(x))
    for r in ops:
        if r.op != OpKind.READ or r.outcome != Outcome.OK:
            continue
        if r.result is None:
            if not can_vanish:
                return r
        elif not bases or any(_freeze(r.result.get(k)) not in assigned[k] for k in always):
            return r
    return None


def linearizable(ops: list[Op], initial: Value = None, budget: int = 200_000) -> bool | None:
    """Wing-Gong search over one key's ops; None when the search budget runs out (undecided:
    `check` fails such a key).

    Ok ops must all be linearized between their invoke and completion; unknown writes may be
    linearized at any time after their invoke, or never; failed ops and unknown reads are
    dropped before the search. The search is Lowe's just-in-time linearization, iterative with
    an explicit stack (no recursion: a key may have any number of ops): it walks a time-ordered
    list of call and return events, linearizes an op at its call when the register allows it
    and the (linearized set, state) pair is new, and backtracks at the return of an op it has
    not linearized. Intervals are closed: at one instant, calls come before returns.
    """
    if impossible_read(ops, initial) is not None:
        return False
    relevant = [
        o for o in ops
        if o.outcome == Outcome.OK or (o.op in WRITES and o.outcome in (Outcome.UNKNOWN, Outcome.PENDING))
    ]  # fmt: skip
    relevant.sort(key=lambda o: o.invoke_t)
    n = len(relevant)
    required = [o.outcome == Outcome.OK for o in relevant]
    # Events: (time, 0 for a call / 1 for a return, op). An unknown write has no return: it
    # may take effect at any later time or never; an ok op returns at its completion.
    events = [(o.invoke_t, 0, i) for i, o in enumerate(relevant)]
    events += [(max(o.invoke_t, o.end), 1, i) for i, o in enumerate(relevant) if required[i]]
    events.sort()
    # A doubly linked list of the events not yet lifted; node 0 is the head, m + 1 the end.
    m = len(events)
    nxt = list(range(1, m + 2))
    prv = [-1] + list(range(m + 1))
    call_at, return_at = [0] * n, [0] * n
    for node, (_, kind, i) in enumerate(events, start=1):
        (return_at if kind else call_at)[i] = node

    def unlink(node: int) -> None:
        nxt[prv[node]], prv[nxt[node]] = nxt[node], prv[node]

    def relink(node: int) -> None:
        nxt[prv[node]] = prv[nxt[node]] = node

    left = sum(required)
    # States by their frozen form, and each (state, op) step computed once: the walk tries the
    # same op on the same state many times, and a dict merge plus a freeze is most of a step.
    values: dict[Any, Value] = {_freeze(initial): initial}
    steps_from: dict[tuple[Any, int], Any] = {}

    def step(frozen: Any, i: int) -> Any:
        """The frozen state after op i from `frozen`; None when the register refuses it."""
        if (frozen, i) not in steps_from:
            legal, after = _apply(values[frozen], relevant[i])
            nxt_frozen = _freeze(after) if legal else None
            if legal:
                values.setdefault(nxt_frozen, after)
            steps_from[(frozen, i)] = nxt_frozen
        return steps_from[(frozen, i)]

    seen: set[tuple[int, Any]] = set()
    stack: list[tuple[int, Any]] = []  # (op linearized, the state before it)
    done, state, node, steps = 0, _freeze(initial), nxt[0], 0
    while left:
        _, kind, i = events[node - 1]  # never the end: an ok op's return is still listed
        if kind == 0:
            after = step(state, i)
            if after is not None and (memo := (done | 1 << i, after)) not in seen:
                seen.add(memo)
                steps += 1
                if steps > budget:
                    return None
                stack.append((i, state))
                done, state, left = memo[0], after, left - required[i]
                unlink(call_at[i])
                if required[i]:
                    unlink(return_at[i])
                node = nxt[0]
                continue
            node = nxt[node]
            continue
        # The return of an op not linearized yet: undo the last choice and try the next one.
        if not stack:
            return False
        i, state = stack.pop()
        done, left = done & ~(1 << i), left + required[i]
        if required[i]:
            relink(return_at[i])
        relink(call_at[i])
        node = nxt[call_at[i]]
    return True


# --- lost writes -------------------------------------------------------------------------------


class _Explainers:
    """Writes that could explain one thing a read shows, by invocation: the latest end among
    those invoked by a time (a prefix maximum), so 'did one of them end at or after t0 and
    begin by t1' is two bisections."""

    def __init__(self, writes: Iterable[Op]) -> None:
        ordered = sorted(writes, key=lambda o: o.invoke_t)
        self.invokes = [o.invoke_t for o in ordered]
        self.latest_end: list[float] = []
        for o in ordered:
            self.latest_end.append(max(o.end, self.latest_end[-1] if self.latest_end else -math.inf))

    def latest_by(self, t: float) -> float:
        """The latest end of a write invoked at or before `t` (closed); -inf when none."""
        i = bisect_right(self.invokes, t)
        return self.latest_end[i - 1] if i else -math.inf


class _Candidates:
    """Acknowledged writes by end, from which those already found lost are skipped (a
    union-find 'next one not removed'), so each is reported once and passed over once."""

    def __init__(self, writes: Iterable[Op]) -> None:
        self.ops = sorted(writes, key=lambda o: o.end)
        self.ends = [o.end for o in self.ops]
        self.skip = list(range(len(self.ops) + 1))

    def _next(self, i: int) -> int:
        root = i
        while self.skip[root] != root:
            root = self.skip[root]
        while self.skip[i] != root:
            self.skip[i], i = root, self.skip[i]
        return root

    def between(self, lo: float, hi: float, lost: set[int]) -> Iterable[Op]:
        """Those not yet lost that ended after `lo` and before `hi` (both open)."""
        i, stop = self._next(bisect_right(self.ends, lo)), bisect_left(self.ends, hi)
        while i < stop:
            if id(self.ops[i]) in lost:
                self.skip[i] = i + 1
            else:
                yield self.ops[i]
            i = self._next(i + 1)


def lost_writes(ops: list[Op], reads_from: float = -math.inf) -> list[tuple[Op, Op]]:
    """(write, read) pairs: an ok write that a read begun after it completed does not show,
    with no write that may have come between them to explain what the read shows. Only the
    reads invoked at or after `reads_from` judge (the final reads, say).

    Whatever the order, what a read r shows is the state after w and some of the writes x that
    may come between w and r: those that did not surely end before w began (x's end >= w's
    invoke) and did not surely begin after r ended (x's invoke <= r's completion). So w is
    lost to r when r differs from w in one respect (r shows no job where w left one, a job
    where w killed it, or another value of a field w set) and no such x could have done it (a
    kill, a submit, a write of that field with the value r shows). For one respect of one read
    the writes that could have done it reduce to the latest end among those invoked by r's
    completion (`_Explainers`), and w is lost when it began after that end and ended before r
    began: O(n log n) plus the writes passed over, each lost write reported once.
    """
    writes = [o for o in ops if o.op in WRITES and o.outcome != Outcome.FAILED]
    acked = [w for w in writes if w.end < math.inf]
    reads = sorted(
        (r for r in ops if r.op == OpKind.READ and r.outcome == Outcome.OK and r.complete_t is not None and r.invoke_t >= reads_from),
        key=lambda r: (r.invoke_t, r.id),
    )  # fmt: skip
    kills = _Explainers(x for x in writes if x.op == OpKind.KILL)
    submits = _Explainers(x for x in writes if x.op == OpKind.SUBMIT)
    fields = sorted({k for w in writes if w.op != OpKind.KILL for k in (w.value or {})})
    by_value: dict[tuple[str, Any], list[Op]] = {}
    lacking: dict[str, list[Op]] = {k: [] for k in fields}
    for x in writes:
        for k in fields if x.op != OpKind.KILL else ():
            if k in (x.value or {}):
                by_value.setdefault((k, _freeze(x.value[k])), []).append(x)
            elif x.op == OpKind.SUBMIT:
                lacking[k].append(x)  # the job it makes has no such field: any read matches on it
    setting = {key: _Explainers(xs) for key, xs in by_value.items()}
    without = {k: _Explainers(xs) for k, xs in lacking.items()}
    made = _Candidates(w for w in acked if w.op != OpKind.KILL)  # left a job
    killed = _Candidates(w for w in acked if w.op == OpKind.KILL)  # left none
    of_field = {k: _Candidates(w for w in acked if w.op != OpKind.KILL and k in (w.value or {})) for k in fields}
    found: dict[int, tuple[Op, Op]] = {}
    lost: set[int] = set()

    def judge(r: Op, candidates: _Candidates, explained_until: float, differs: Callable[[Op], bool]) -> None:
        for w in candidates.between(explained_until, r.invoke_t, lost):
            if w.invoke_t > explained_until and differs(w):
                found[id(w)] = (w, r)
                lost.add(id(w))

    for r in reads:
        t1 = r.complete_t
        if r.result is None:
            judge(r, made, kills.latest_by(t1), lambda w: True)
            continue
        judge(r, killed, submits.latest_by(t1), lambda w: True)
        for k in fields:
            seen = _freeze(r.result.get(k))
            until = max(without[k].latest_by(t1), setting[(k, seen)].latest_by(t1) if (k, seen) in setting else -math.inf)
            judge(r, of_field[k], until, lambda w, k=k, seen=seen: _freeze(w.value[k]) != seen)
    return sorted(found.values(), key=lambda pair: (pair[0].invoke_t, pair[0].id))


# --- double running ------------------------------------------------------------------------------

LIVE_STATES = ("STARTING", "RUNNING")


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
    budget: int = 200_000,
) -> CheckResult:
    """The three judgements; `ok` only when no write is lost, every key is linearizable (an
    undecided key, whose search ran out of `budget` steps, is a failure, named), and no task
    index ran twice."""
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
        verdict = linearizable(ops, budget=budget)
        if verdict is False:
            res.nonlinearizable_keys.append(key)
            res.details.append(f"not linearizable: {key} ({len(ops)} ops)")
            if (r := impossible_read(ops)) is not None:
                res.details.append(f"  read at {r.invoke_t:.3f} shows {r.result}, which no write could make")
        elif verdict is None:
            res.undecided_keys.append(key)
            res.details.append(f"undecided (search ran out of {budget} steps): {key} ({len(ops)} ops): fails")
    if task_reports is not None:
        reports, windows = list(task_reports), list(lost_windows or ())  # read twice: by the check, and for each finding
        found, _ = double_running(reports, windows)
        res.double_running = found
        for d in found:
            res.details.append(
                f"double running: {d['job']}/{d['index']} {d['a']} and {d['b']} overlap {d['overlap']}"
            )
            res.details += index_timeline(reports, windows, d)
    res.ok = not (res.lost_writes or res.nonlinearizable_keys or res.undecided_keys or res.double_running)
    return res
