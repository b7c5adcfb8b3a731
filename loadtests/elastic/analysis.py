"""The elastic campaign's raw records and the numbers drawn from them: per-second series and reaction times."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from bench.stats import percentile


@dataclass(frozen=True)
class Request:
    at: float  # wall time the request ended
    ms: float
    ok: bool
    endpoint: str
    error: str


@dataclass(frozen=True)
class Sample:
    at: float  # wall time
    task_count: int  # the job's desired count
    serving: int  # RUNNING, healthy and not draining: in the endpoints list
    draining: int
    machines: int


def read_requests(path: Path) -> list[Request]:
    """The locustfile's request log, one CSV line per request (wall time, ms, ok, endpoint, error);
    empty when the load never wrote it."""
    out = []
    if not path.exists():
        return out
    for line in path.read_text().splitlines():
        parts = line.split(",", 4)
        if len(parts) == 5:
            out.append(Request(float(parts[0]), float(parts[1]), parts[2] == "1", parts[3], parts[4]))
    return out


def parse_stages(text: str) -> list[tuple[float, int]]:
    """Load stages 'at_s:users,...' such as '0:2,30:6' -> [(0.0, 2), (30.0, 6)], sorted by time."""
    out = []
    for part in text.split(","):
        at, sep, users = part.strip().partition(":")
        if not sep:
            raise ValueError(f"a stage is AT_S:USERS such as 30:6, got {part!r}")
        out.append((float(at), int(users)))
    return sorted(out)


def per_second(requests: Sequence[Request], t0: float, t1: float, window_s: float = 5.0) -> list[dict[str, float | None]]:
    """For each second from t0: requests/s offered, errors that second, p95 over the last `window_s`."""
    n = max(0, math.ceil(t1 - t0))
    counts, errors = [0] * n, [0] * n
    buckets: list[list[float]] = [[] for _ in range(n)]
    for r in requests:
        i = int(r.at - t0)
        if 0 <= i < n:
            counts[i] += 1
            errors[i] += 0 if r.ok else 1
            if r.ok:
                buckets[i].append(r.ms)
    w = max(1, int(window_s))
    out = []
    for i in range(n):
        recent = [ms for b in buckets[max(0, i - w + 1) : i + 1] for ms in b]
        out.append({"t": float(i), "rps": float(counts[i]), "errors": float(errors[i]), "p95_ms": percentile(recent, 0.95)})
    return out


def settled_after(series: Sequence[tuple[float, float]], start: float, end: float, limit: float) -> float | None:
    """Seconds from `start` until the value is at most `limit` for good (until `end`): 0 when it
    never went over, None when it is still over at the end."""
    inside = [(t, v) for t, v in series if start <= t < end]
    over = [t for t, v in inside if v > limit]
    if not over:
        return 0.0
    if over[-1] == inside[-1][0]:
        return None
    return over[-1] + 1.0 - start


@dataclass(frozen=True)
class StepReaction:
    at: float
    users_before: int
    users_after: int
    tasks_before: int
    tasks_after: int  # the highest desired count before the next stage
    decided_s: float | None  # step -> the job's task count raised
    ready_s: float | None  # step -> that many tasks serving
    p95_ok_s: float | None  # step -> p95 under the SLO for the rest of the stage


def step_reactions(
    stages: Sequence[tuple[float, int]], samples: Sequence[Sample], p95: Sequence[tuple[float, float]], slo_ms: float
) -> list[StepReaction]:
    """Reaction to every stage that raised the users: times are seconds from the step."""
    out = []
    ends = [s[0] for s in stages[1:]] + [math.inf]
    prev_users = 0
    for (at, users), end in zip(stages, ends, strict=True):
        if users > prev_users and prev_users > 0:
            before = [s for s in samples if s.at <= at]
            during = [s for s in samples if at < s.at <= end]
            tasks_before = before[-1].task_count if before else 0
            tasks_after = max((s.task_count for s in during), default=tasks_before)
            decided = next((s.at - at for s in during if s.task_count > tasks_before), None)
            ready = next((s.at - at for s in during if s.serving >= tasks_after), None) if tasks_after > tasks_before else None
            out.append(StepReaction(at, prev_users, users, tasks_before, tasks_after, decided, ready,
                                    settled_after(p95, at, end, slo_ms)))  # fmt: skip
        prev_users = users
    return out


def scale_down_s(load_end: float, samples: Sequence[Sample], minimum: int) -> tuple[float | None, float | None]:
    """Seconds from the end of the load until the job's count is `minimum`, and until only that many serve."""
    after = [s for s in samples if s.at >= load_end]
    decided = next((s.at - load_end for s in after if s.task_count <= minimum), None)
    served = next((s.at - load_end for s in after if s.task_count <= minimum and s.serving + s.draining <= minimum), None)
    return decided, served
