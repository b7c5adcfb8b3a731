"""The master's Prometheus metrics, in a registry of its own (several replicas may share a process in tests)."""

from __future__ import annotations

from collections.abc import Callable

from prometheus_client import (
    GC_COLLECTOR,
    PLATFORM_COLLECTOR,
    PROCESS_COLLECTOR,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
)
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from reference.master import views, work
from reference.master.cell import Cell


class _CellCollector(Collector):
    """Tasks by state and machines by state, computed from the watch cache at scrape time."""

    def __init__(self, cell: Callable[[], Cell]) -> None:
        self._cell = cell

    def collect(self):  # type: ignore[no-untyped-def]
        cell = self._cell()
        tasks = GaugeMetricFamily("minborg_tasks", "Tasks by state.", labels=["state"])
        counts = views.task_counts(cell)  # kept by the watch cache's views: no walk of the tasks
        for state in ("PENDING", "RUNNING", "DEAD"):
            tasks.add_metric([state], counts.get(state, 0))
        yield tasks
        machines = GaugeMetricFamily("minborg_machines", "Machines by state.", labels=["state"])
        up = sum(1 for m in cell.state.machines.values() if m.up)
        machines.add_metric(["up"], up)
        machines.add_metric(["down"], len(cell.state.machines) - up)
        yield machines
        yield GaugeMetricFamily("minborg_jobs", "Jobs in the cell.", value=len(cell.state.jobs))
        yield GaugeMetricFamily(
            "minborg_cache_revision", "etcd revision the watch cache reflects.", value=cell.revision
        )


class _WorkCollector(Collector):
    """The work this process's per-event paths did, counted by kind (`work`): what a campaign
    divides by the tasks it filled, to compare cells of different sizes without timing."""

    def collect(self):  # type: ignore[no-untyped-def]
        family = CounterMetricFamily("minborg_work", "Work done by the master's per-event paths, by kind.", labels=["kind"])
        for kind, n in sorted(work.snapshot().items()):
            family.add_metric([kind], n)
        yield family


class MasterMetrics:
    def __init__(self, cell: Callable[[], Cell]) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        # The standard process_* and python_* families (CPU seconds, memory, open fds, GC,
        # version), as prometheus_client's default registry carries them: read at scrape time.
        for standard in (PROCESS_COLLECTOR, PLATFORM_COLLECTOR, GC_COLLECTOR):
            r.register(standard)
        self.requests = Counter(
            "minborg_api_requests", "API requests by route, method and status.",
            ["route", "method", "status"], registry=r,
        )  # fmt: skip
        self.latency = Histogram(
            "minborg_api_request_duration_seconds", "API request latency by route and method (streams are not timed).",
            ["route", "method"], registry=r,
            buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5),
        )  # fmt: skip
        self.leader = Gauge("minborg_leader", "1 while this replica leads the cell.", registry=r)
        self.pass_seconds = Histogram(
            "minborg_scheduling_pass_duration_seconds", "Duration of one scheduling pass (plan and write).",
            registry=r, buckets=(0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5),
        )  # fmt: skip
        self.placed = Counter("minborg_placements", "Tasks placed by the scheduler.", registry=r)
        self.txns = Counter(
            "minborg_txns", "Leader txns by outcome (committed, fenced, conflict, unknown, ...).",
            ["outcome"], registry=r,
        )  # fmt: skip
        self.txn_ops = Counter("minborg_txn_ops", "Ops in committed leader txns.", registry=r)
        self.polls = Counter("minborg_borglet_polls", "Borglet syncs sent.", registry=r)
        self.refused = Counter(
            "minborg_borglet_syncs_refused",
            "Syncs a borglet refused, by reason (stale_epoch, stale_seq, stale_revision, need_full).",
            ["reason"],
            registry=r,
        )
        self.holds = Counter(
            "minborg_incarnation_holds",
            "Task incarnations held back until an older process of their index stopped.",
            registry=r,
        )
        self.streams = Gauge(
            "minborg_watch_streams", "Open server-sent event streams (watches, events, followed logs) by kind.",
            ["kind"], registry=r,
        )  # fmt: skip
        r.register(_CellCollector(cell))
        r.register(_WorkCollector())

    def on_txn(self, outcome: str, n: int) -> None:
        self.txns.labels(outcome).inc()
        if outcome == "committed":
            self.txn_ops.inc(n)

    def on_pass(self, seconds: float, placed: int) -> None:
        self.pass_seconds.observe(seconds)
        self.placed.inc(placed)

    def on_poll(self, event: str) -> None:
        """The poller's events: "sent" (a sync went out), "hold" (a new incarnation waits) or
        "refused_<reason>" (a borglet refused a sync)."""
        if event == "hold":
            self.holds.inc()
        elif event.startswith("refused_"):
            self.refused.labels(event.removeprefix("refused_")).inc()
        else:
            self.polls.inc()

    def render(self) -> bytes:
        return generate_latest(self.registry)
