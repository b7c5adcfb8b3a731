"""Judging the cell in the stateful test: after every step, observe it and check that what it shows is a state the spec allows; the rules that wait and settle; and clearing an example's jobs at its end."""

from __future__ import annotations

import time

from hypothesis import strategies as st
from hypothesis.stateful import invariant, rule

from harness import windows
from harness.api import tracked
from harness.checks import borglet_samples, check_observation, convergence_problems
from harness.context import ConformanceViolation, ExampleState
from harness.history import OpKind, Outcome
from harness.observe import Observation
from spec.model import TaskState
from spec.taskid import parse_task_id

SETTLE_TIMEOUT_S = 25.0
EVENTS_EVERY_S = 2.0  # how often the cell's machine events are read (harness/windows.py, declared_down)


class Judging(ExampleState):
    """Observation and its checks: the state and step invariants of every poll, the lost
    windows and the history's reads it records, and convergence where the spec says the cell
    must get to."""

    @invariant()
    def conforms(self) -> None:
        """After every step: what goes on beside the rules (`each_step`), then a poll, judged."""
        self.each_step()
        self._observe_and_check()

    def _observe_and_check(self) -> Observation | None:
        t0 = self.clock()
        obs = self.observer.poll(skip=set(self.c.cell.paused) if self.c.cell is not None else set())
        if obs is None:
            return None  # no master answered (a failover): nothing to judge this time
        self._record_reads(obs, t0)
        self._track_windows(obs)
        self._lost_since_last(obs)
        self.c.samples += borglet_samples(obs)
        bad = check_observation(self.prev, obs, self.c.coverage, self.submitted)
        self.prev = obs
        self._retire(obs)
        if bad:
            raise ConformanceViolation("; ".join(f"[{n}] {m}" for n, m in bad[:5]))
        return obs

    def _retire(self, obs: Observation) -> None:
        """Stop reading the tasks of killed jobs seen gone with every task DEAD."""
        for key in sorted(self.watch):
            if key not in self.model.jobs and key not in obs.state.jobs:
                if all(t.state is TaskState.DEAD for t in obs.state.tasks_of(key)):
                    self.watch.discard(key)

    def _record_reads(self, obs: Observation, t0: float) -> None:
        """The jobs list is a read of every job this example touched (absent reads as None)."""
        views = {v.key: v for v in obs.state.jobs.values()}
        for key in sorted(self.keys):
            op = self.c.history.invoke(OpKind.READ, key, at=t0)
            job = views.get(key)
            value = None if job is None else tracked({"task_count": job.task_count, "request": {"cpu": f"{job.request.get('cpu')}m"}})
            self.c.history.complete(op, Outcome.OK, value, at=obs.t)

    def _track_windows(self, obs: Observation) -> None:
        """Machines seen down are lost from then; those seen up again, and no longer paused or
        killed here, are back (harness/windows.py)."""
        cell = self.c.cell
        faulted = set() if cell is None else {*cell.down_borglets, *cell.paused}
        up = {name: m.up for name, m in obs.state.machines.items()}
        self.down_since, closed = windows.seen(self.down_since, up, faulted, obs.t, self.clock())
        self.c.lost_windows.extend(closed)
        self._declared_since_last(obs)

    def _declared_since_last(self, obs: Observation) -> None:
        """Machines the cell declared down since the last read of its events, seen down by a
        poll or not. Read every EVENTS_EVERY_S at most: each read of the stream takes a fifth
        of a second, and the cursor (a revision) misses nothing between reads."""
        now = self.clock()
        if self.events_since is None:
            self.events_since, self.events_read_t = obs.revision, obs.t
            return
        if now - self.events_read_t < EVENTS_EVERY_S:
            return
        got = self.api.machine_events(self.events_since)
        if got is None:  # no answer: the next read starts from the same revision
            return
        events, reached = got
        self.events_since = obs.revision if reached < 0 else reached  # -1: fell behind, read on from here
        declared = windows.declared_down(events, self.events_read_t, now)
        self.c.lost_windows.extend(declared)
        self.c.coverage.declared_downs += len(declared)
        self.events_read_t = now

    def _lost_since_last(self, obs: Observation) -> None:
        if self.prev is not None:
            self.c.lost_windows.extend(windows.lost_between(self.prev, obs))

    @rule(seconds=st.sampled_from((0.5, 1.0, 2.0)))
    def wait(self, seconds: float) -> None:
        """Let the cell move, observing it meanwhile so polls skip fewer intermediate states."""
        deadline = self.clock() + seconds
        while self.clock() < deadline:
            time.sleep(0.3)
            self._observe_and_check()

    @rule()
    def settle(self) -> None:
        """The cell must converge to the spec model within SETTLE_TIMEOUT_S, judged all along."""
        self.c.coverage.convergence_checks += 1
        deadline = self.clock() + SETTLE_TIMEOUT_S
        problems: list[str] = ["no observation"]
        while self.clock() < deadline:
            obs = self._observe_and_check()
            if obs is not None:
                problems = convergence_problems(self.model, obs, self.keys)
                if not problems:
                    return
            time.sleep(0.5)
        raise ConformanceViolation(f"[convergence] after {SETTLE_TIMEOUT_S:.0f}s: " + "; ".join(problems[:5]) + self._why(problems[:5]))

    def _why(self, problems: list[str]) -> str:
        """What the cell says of the jobs a convergence problem names, as it stands now: each
        job's rollout (its state and reason) and its live tasks' borglet facts. It explains a
        failure; it judges nothing."""
        keys = sorted({k for k in self.keys if any(f"{k}/" in p or f"{k} " in p for p in problems)})
        lines = []
        for key in keys[:3]:
            body = self.api.get(f"/v1/jobs/{key}")
            tasks = self.api.tasks(key) or []
            rollout = (body or {}).get("rollout")
            facts = [
                {f: t.get(f) for f in ("id", "state", "machine", "borglet_state", "started_at", "failures", "restarts", "last_exit")}
                for t in tasks if t.get("state") != "DEAD"
            ]  # fmt: skip
            lines.append(f"\n  {key}: rollout {rollout}; tasks {facts}")
        return "".join(lines)

    def clear_jobs(self) -> None:
        """Kill this example's jobs and wait (up to SETTLE_TIMEOUT_S) until none of its tasks runs."""
        for key in self._live():
            self.api.kill(key)
        deadline = self.clock() + SETTLE_TIMEOUT_S
        while self.clock() < deadline:
            obs = self.observer.poll()
            if obs is not None and not self._still_running(obs):
                break
            time.sleep(0.3)

    def _still_running(self, obs: Observation) -> bool:
        if any(t.state is not TaskState.DEAD and t.id.job in self.keys for t in obs.state.tasks.values()):
            return True
        return any(parse_task_id(str(s["task_id"]))[0] in self.keys for s in borglet_samples(obs))
