"""The step load shape: raise users in steps until a stop rule trips, and record every step and the trip.

Options (added to Locust's command line, so `--processes` workers get them too):
`--step-start`, `--step-users`, `--step-seconds`, `--max-users`, `--slo-p95-ms`,
`--max-error-rate`, `--shape-out PATH` (JSON with each step's stats and the verdict).
The shape runs on the Locust master, which sees the workers' stats merged.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import locust.runners
from locust import LoadTestShape, events

from loadtests.steps import Ladder, StopRules, check, diff, group_of, step_stats, user_ladder

# Workers report to the master every 3 s by default; once a second keeps a 10-15 s step's
# boundaries sharp (the shape cuts steps on the master's merged stats).
locust.runners.WORKER_REPORT_INTERVAL = 1.0

# Requests issued while users are still being spawned are not the step's steady state.
SETTLE_S = 1.0


@events.init_command_line_parser.add_listener
def _options(parser: Any) -> None:
    group = parser.add_argument_group("step shape")
    group.add_argument("--step-start", type=int, default=2, help="users in the first step")
    group.add_argument("--step-users", type=int, default=4, help="users added per step")
    group.add_argument("--step-seconds", type=float, default=12.0, help="length of a step")
    group.add_argument("--max-users", type=int, default=40, help="the last step's users")
    group.add_argument("--slo-p95-ms", type=float, default=250.0, help="p95 SLO of a step")
    group.add_argument("--max-error-rate", type=float, default=0.01, help="failures/requests")
    group.add_argument("--shape-out", default="", help="write the steps and the verdict here")


Snapshot = tuple[dict[str, dict[int, int]], dict[str, tuple[int, int]]]


class StepLoadShape(LoadTestShape):
    """Users go start, start+step, ... max; each step is judged on its own requests only."""

    def __init__(self) -> None:
        super().__init__()
        self.ladder = Ladder()
        self._rungs: list[int] = []
        self._index = -1
        self._step_started = 0.0
        self._wall_started = 0.0
        self._snapshot: Snapshot | None = None
        self._rules: StopRules | None = None
        self._out = ""

    def _configure(self) -> None:
        opts = self.runner.environment.parsed_options  # type: ignore[union-attr]
        self._rungs = user_ladder(opts.step_start, opts.step_users, opts.max_users)
        self._rules = StopRules(
            slo_p95_ms=opts.slo_p95_ms, max_users=opts.max_users, max_error_rate=opts.max_error_rate
        )
        self._step_seconds = float(opts.step_seconds)
        self._out = opts.shape_out

    def tick(self) -> tuple[int, float] | None:
        if self._rules is None:
            self._configure()
        now = time.monotonic()
        if self._index < 0:
            return self._begin(0, now)
        elapsed = now - self._step_started
        if self._snapshot is None and elapsed >= SETTLE_S:
            self._snapshot = self._take()
        if elapsed < self._step_seconds:
            return self._rungs[self._index], self._spawn_rate()
        verdict = self._end_step(elapsed - SETTLE_S)
        if verdict is not None:
            return None
        return self._begin(self._index + 1, now)

    def _spawn_rate(self) -> float:
        # All of a step's new users within about half a second.
        return float(max(10, 2 * self._rungs[self._index]))

    def _begin(self, index: int, now: float) -> tuple[int, float]:
        self._index, self._step_started, self._snapshot = index, now, None
        self._wall_started = time.time()
        return self._rungs[index], self._spawn_rate()

    def _take(self) -> Snapshot:
        stats = self.runner.stats  # type: ignore[union-attr]
        hists = {}
        counts = {}
        for (name, _method), entry in stats.entries.items():
            hists[name] = dict(entry.response_times)
            counts[name] = (entry.num_requests, entry.num_failures)
        return hists, counts

    def _end_step(self, seconds: float) -> Any:
        assert self._rules is not None
        before = self._snapshot or ({}, {})
        after = self._take()
        users = self._rungs[self._index]
        grouped: dict[str, tuple[dict[int, int], int, int]] = {}
        total_hist: dict[int, int] = {}
        total_req = total_fail = 0
        for name, hist in after[0].items():
            delta = diff(hist, before[0].get(name, {}))
            req = after[1][name][0] - before[1].get(name, (0, 0))[0]
            fail = after[1][name][1] - before[1].get(name, (0, 0))[1]
            g_hist, g_req, g_fail = grouped.setdefault(group_of(name), ({}, 0, 0))
            for bucket, count in delta.items():
                g_hist[bucket] = g_hist.get(bucket, 0) + count
                total_hist[bucket] = total_hist.get(bucket, 0) + count
            grouped[group_of(name)] = (g_hist, g_req + req, g_fail + fail)
            total_req, total_fail = total_req + req, total_fail + fail
        total = step_stats(users, seconds, total_hist, total_req, total_fail)
        self.ladder.steps.append(total)
        self.ladder.times.append((self._wall_started, time.time()))
        self.ladder.groups.append(
            {g: step_stats(users, seconds, h, r, f) for g, (h, r, f) in sorted(grouped.items())}
        )
        verdict = check(total, self._index, self._rules)
        self.ladder.verdict = verdict
        self._write()
        return verdict

    def _write(self) -> None:
        if not self._out:
            return
        assert self._rules is not None
        doc = {
            "rules": vars(self._rules),
            "step_seconds": self._step_seconds,
            "settle_s": SETTLE_S,
            "steps": [
                {
                    **s.to_json(),
                    "started_at": t0,
                    "ended_at": t1,
                    "groups": {g: gs.to_json() for g, gs in groups.items()},
                }
                for s, groups, (t0, t1) in zip(
                    self.ladder.steps, self.ladder.groups, self.ladder.times, strict=True
                )
            ],
            "verdict": self.ladder.verdict.to_json() if self.ladder.verdict else None,
        }
        path = Path(self._out)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(doc, indent=2) + "\n")
