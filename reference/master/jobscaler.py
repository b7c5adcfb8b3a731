"""The job autoscaler on the leader: measures each autoscaled job's load, decides its task count, drains, resizes.

Resizes go through `mutations.update_job`, the path a user's `PATCH /v1/jobs/...` takes, so
the spec's `update` action and the task history record them like any other resize. A
scale-down first marks the tasks leaving (the highest indices, which `update` kills) as
draining: they drop out of the endpoints and BNS while still serving, and only after
`drain_s` (longer than the clients' endpoint refresh) is the job shrunk.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Hashable, Mapping
from dataclasses import dataclass, replace

from reference.elastic.decisions import Decision, Policy, Why, clamp, decide, raw_desired
from reference.elastic.metrics import CpuUtilization, RequestRates
from reference.jobspec import AutoscaleMetric, AutoscaleSpec
from reference.master import views
from reference.master.cache import WatchCache
from reference.master.cell import Cell, Draft
from reference.master.mutations import ApiError, update_job
from reference.master.writer import NotLeader, WriteFailed, Writer
from spec.model import Job, Task, TaskId, TaskState

log = logging.getLogger(__name__)

UsageSource = Callable[[], Mapping[TaskId, tuple[tuple[str, int], ...]]]


def policy_of(spec: AutoscaleSpec) -> Policy:
    return Policy(
        min=spec.min,
        max=spec.max,
        target=spec.target,
        scale_up_cooldown=spec.scale_up_cooldown,
        scale_down_cooldown=spec.scale_down_cooldown,
        stabilization=spec.stabilization_s,
    )


@dataclass
class _Drain:
    to: int  # the task count once the drain is over
    until: float  # monotonic time the draining tasks may be stopped


@dataclass
class JobStatus:
    """What the autoscaler last saw and did for one job (kept in memory on the leader)."""

    last_up_at: float | None = None
    history: tuple[tuple[float, int], ...] = ()
    drain: _Drain | None = None
    last: Decision | None = None
    measured: tuple[float, ...] = ()


class JobAutoscaler:
    def __init__(
        self,
        cache: WatchCache,
        writer: Writer,
        usage: UsageSource,
        *,
        interval: float = 1.0,
        clock: Callable[[], float] = time.monotonic,
        wall: Callable[[], float] = time.time,
    ) -> None:
        self.cache, self.writer, self.usage = cache, writer, usage
        self.interval, self.clock, self.wall = interval, clock, wall
        self.jobs: dict[str, JobStatus] = {}
        self.rates = RequestRates(clock)
        self.cpu = CpuUtilization(clock)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="job-autoscaler", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join(5)
        self.rates.close()

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            try:
                self.tick()
            except (NotLeader, WriteFailed) as err:
                log.info("autoscaler: change not written: %s", err)
            except Exception:  # one bad tick must not end autoscaling
                log.exception("autoscaler tick failed")

    # --- one tick ---------------------------------------------------------------------------

    def tick(self) -> None:
        cell = self.cache.cell()
        scaled = {
            key: info.spec.autoscale
            for key, info in cell.jobs.items()
            if info.spec.autoscale is not None and key in cell.state.jobs
        }
        for key in [k for k in self.jobs if k not in scaled]:
            del self.jobs[key]
        for key, spec in sorted(scaled.items()):
            if self._stop.is_set():
                return
            self._job(cell, cell.state.jobs[key], spec)

    def _job(self, cell: Cell, job: Job, spec: AutoscaleSpec) -> None:
        st = self.jobs.setdefault(job.key, JobStatus())
        now = self.clock()
        live = {i: t for i, t in cell.state.live_indices(job.key).items() if i < job.task_count}
        flagged = sorted(i for i, t in live.items() if cell.task_info(t.id).draining_since)
        if st.drain is None and flagged:
            # Draining tasks without a drain here: a previous leader began it. Finish it.
            st.drain = _Drain(flagged[0], now + spec.drain_s)
        staying = st.drain.to if st.drain is not None else job.task_count
        serving = [t for i, t in live.items() if i < staying and views.is_serving(cell, t)]
        values = self._measure(cell, job, spec, serving)
        ready = [v for v in values if v is not None]
        st.measured = tuple(ready)
        policy = policy_of(spec)
        rec = raw_desired(staying, ready, max(0, staying - len(ready)), spec.target, policy.tolerance)
        if st.drain is not None:
            self._draining(cell, job, spec, st, clamp(rec, policy), now)
            return
        decision = decide(now, job.task_count, rec, policy, st.last_up_at, st.history)
        st.history, st.last = decision.recommendations, decision
        if decision.desired == job.task_count:
            return
        avg = sum(ready) / len(ready) if ready else 0.0
        log.info(
            "autoscaler: %s %d -> %d (%s %.1f per task, target %g; %s)",
            job.key, job.task_count, decision.desired, spec.metric.value, avg, spec.target, decision.why.value,
        )  # fmt: skip
        if decision.desired > job.task_count or spec.drain_s <= 0:
            self._resize(job.key, decision.desired)
            if decision.desired > job.task_count:
                st.last_up_at = now
            return
        self._mark(job.key, range(decision.desired, job.task_count), self.wall())
        st.drain = _Drain(decision.desired, now + spec.drain_s)

    def _draining(self, cell: Cell, job: Job, spec: AutoscaleSpec, st: JobStatus, rec: int, now: float) -> None:
        assert st.drain is not None
        st.history = decide(now, job.task_count, rec, policy_of(spec), st.last_up_at, st.history).recommendations
        if rec > st.drain.to:
            # The load came back before the drained tasks were stopped: keep them.
            log.info("autoscaler: %s drain to %d cancelled (now wants %d)", job.key, st.drain.to, rec)
            self._mark(job.key, range(st.drain.to, job.task_count), 0.0)
            st.drain = None
            return
        if now < st.drain.until:
            return
        to = st.drain.to
        self._resize(job.key, to)
        st.drain = None
        st.last = Decision(to, Why.SCALE_DOWN, st.history)

    # --- measuring ----------------------------------------------------------------------------

    def _measure(self, cell: Cell, job: Job, spec: AutoscaleSpec, serving: list[Task]) -> list[float | None]:
        if spec.metric is AutoscaleMetric.REQUESTS_PER_TASK:
            targets: dict[Hashable, str] = {}
            for t in serving:
                info = cell.task_info(t.id)
                host = views.host_of(cell.machines[t.machine].address) if t.machine in cell.machines else ""
                if host and info.port:
                    targets[(t.id, info.placement)] = f"http://{host}:{info.port}/metrics"
            rates = self.rates.measure(targets)
            return [rates.get((t.id, cell.task_info(t.id).placement)) for t in serving]
        usage = self.usage()
        per_task: dict[Hashable, tuple[int, int]] = {}
        for t in serving:
            cpu = dict(usage.get(t.id, ())).get("cpu_milli")
            if cpu is not None:
                per_task[t.id] = (int(cpu), t.request.get("cpu"))
        cpu_pct = self.cpu.measure(per_task)
        return [cpu_pct.get(t.id) for t in serving]

    # --- writing --------------------------------------------------------------------------------

    def _resize(self, key: str, count: int) -> None:
        try:
            self.writer.mutate(lambda d: update_job(d, key, {"task_count": count}))
        except ApiError as err:
            log.warning("autoscaler: %s cannot be resized to %d: %s", key, count, err.error)

    def _mark(self, key: str, indices: range, since: float) -> None:
        """Set (since > 0) or clear (since == 0) the draining mark of the job's tasks at `indices`."""

        def change(d: Draft) -> None:
            for i in indices:
                t = d.state.latest(key, i)
                if t is None or t.state is TaskState.DEAD:
                    continue
                info = d.task_info(t.id)
                if bool(info.draining_since) != bool(since):
                    d.set_task_info(t.id, replace(info, draining_since=since))

        self.writer.mutate(change)
