"""Prometheus exposition of a borglet: tasks by state, restarts and usage, from its own registry."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from reference.borglet.supervisor import Borglet

STATES = ("QUEUED", "STARTING", "RUNNING", "FINISHED", "FAILED", "KILLED")


class BorgletCollector(Collector):
    """Builds every metric from one report at scrape time, so the numbers agree with each other."""

    def __init__(self, borglet: Borglet):
        self.borglet = borglet

    def collect(self) -> Iterator[Metric]:
        report = self.borglet.report()
        machine = report["machine"]
        by_state = Counter(t["state"] for t in report["tasks"])
        tasks = GaugeMetricFamily(
            "minborg_borglet_tasks",
            "Tasks known to the borglet by state",
            labels=["machine", "state"],
        )
        for state in STATES:
            tasks.add_metric([machine, state], by_state.get(state, 0))
        yield tasks

        restarts = GaugeMetricFamily(
            "minborg_borglet_task_restarts", "In-place restarts of each task",
            labels=["machine", "task_id"],
        )  # fmt: skip
        cpu = GaugeMetricFamily(
            "minborg_borglet_task_cpu_milli", "CPU usage of each task in milli-CPU",
            labels=["machine", "task_id"],
        )  # fmt: skip
        ram = GaugeMetricFamily(
            "minborg_borglet_task_ram_bytes", "RAM usage of each task in bytes",
            labels=["machine", "task_id"],
        )  # fmt: skip
        for task in report["tasks"]:
            labels = [machine, task["task_id"]]
            restarts.add_metric(labels, task["restarts"])
            cpu.add_metric(labels, task["usage"]["cpu_milli"])
            ram.add_metric(labels, task["usage"]["ram_bytes"])
        yield restarts
        yield cpu
        yield ram

        restarts_total = GaugeMetricFamily(
            "minborg_borglet_restarts",
            "In-place restarts summed over known tasks",
            labels=["machine"],
        )
        restarts_total.add_metric([machine], sum(t["restarts"] for t in report["tasks"]))
        yield restarts_total

        usage = GaugeMetricFamily(
            "minborg_borglet_usage", "Summed task usage", labels=["machine", "resource"]
        )
        usage.add_metric([machine, "cpu_milli"], report["usage"]["cpu_milli"])
        usage.add_metric([machine, "ram_bytes"], report["usage"]["ram_bytes"])
        yield usage

        capacity = GaugeMetricFamily(
            "minborg_borglet_capacity", "Declared machine capacity", labels=["machine", "resource"]
        )
        for name, value in report["capacity"].items():
            capacity.add_metric([machine, name], value)
        yield capacity

        syncs = CounterMetricFamily(
            "minborg_borglet_syncs",
            "Syncs applied, and refused by reason (stale_epoch, stale_seq, stale_revision, need_full)",
            labels=["machine", "result"],
        )
        syncs.add_metric([machine, "applied"], self.borglet.syncs)
        for reason in ("stale_epoch", "stale_seq", "stale_revision", "need_full"):
            syncs.add_metric([machine, reason], self.borglet.refused[reason])
        yield syncs

        queued = GaugeMetricFamily(
            "minborg_borglet_queued_tasks", "Tasks waiting for their process to start", labels=["machine"]
        )
        queued.add_metric([machine], report["queued"])
        yield queued

        epoch = GaugeMetricFamily(
            "minborg_borglet_epoch", "Highest leader epoch seen", labels=["machine"]
        )
        epoch.add_metric([machine], report["epoch"])
        yield epoch


def make_registry(borglet: Borglet) -> CollectorRegistry:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(BorgletCollector(borglet))
    return registry


def render(registry: CollectorRegistry) -> bytes:
    return generate_latest(registry)
