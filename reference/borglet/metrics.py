"""Prometheus exposition of a borglet: tasks by state, restarts and usage, from its own registry."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from typing import get_args

from prometheus_client import (
    GC_COLLECTOR,
    PLATFORM_COLLECTOR,
    PROCESS_COLLECTOR,
    CollectorRegistry,
    generate_latest,
)
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from reference.borglet.protocol import Phase
from reference.borglet.supervisor import Borglet

STATES = get_args(Phase)  # a report gives each task's phase as its "state"


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

        # Prometheus' conventions: base units (cores, bytes) in the name, one unit per metric,
        # _total on counters (a task id's restarts only grow).
        restarts = CounterMetricFamily(
            "minborg_borglet_task_restarts", "In-place restarts of each task",
            labels=["machine", "task_id"],
        )  # fmt: skip
        cpu = GaugeMetricFamily(
            "minborg_borglet_task_cpu_usage_cores", "CPU usage of each task in cores",
            labels=["machine", "task_id"],
        )  # fmt: skip
        ram = GaugeMetricFamily(
            "minborg_borglet_task_memory_usage_bytes", "Memory (RSS) of each task in bytes",
            labels=["machine", "task_id"],
        )  # fmt: skip
        for task in report["tasks"]:
            labels = [machine, task["task_id"]]
            restarts.add_metric(labels, task["restarts"])
            cpu.add_metric(labels, task["usage"]["cpu_milli"] / 1000)
            ram.add_metric(labels, task["usage"]["ram_bytes"])
        yield restarts
        yield cpu
        yield ram

        known = GaugeMetricFamily(
            "minborg_borglet_known_task_restarts",
            "In-place restarts summed over the tasks the borglet still knows (falls when it forgets one)",
            labels=["machine"],
        )
        known.add_metric([machine], sum(t["restarts"] for t in report["tasks"]))
        yield known

        for name, value, text in (
            ("minborg_borglet_cpu_usage_cores", report["usage"]["cpu_milli"] / 1000, "CPU usage of all tasks in cores"),
            ("minborg_borglet_memory_usage_bytes", report["usage"]["ram_bytes"], "Memory of all tasks in bytes"),
        ):
            usage = GaugeMetricFamily(name, text, labels=["machine"])
            usage.add_metric([machine], value)
            yield usage

        capacity = report["capacity"]
        for resource, name, scale, text in (
            ("cpu", "minborg_borglet_capacity_cpu_cores", 1000, "Declared CPU capacity in cores"),
            ("ram", "minborg_borglet_capacity_memory_bytes", 1, "Declared memory capacity in bytes"),
            ("disk", "minborg_borglet_capacity_disk_bytes", 1, "Declared disk capacity in bytes"),
        ):
            if resource in capacity:
                family = GaugeMetricFamily(name, text, labels=["machine"])
                family.add_metric([machine], capacity[resource] / scale)
                yield family
        others = {k: v for k, v in capacity.items() if k not in ("cpu", "ram", "disk")}
        if others:
            units = GaugeMetricFamily(
                "minborg_borglet_capacity_units", "Declared capacity of counted resources (GPUs, ports)",
                labels=["machine", "resource"],
            )  # fmt: skip
            for name, value in sorted(others.items()):
                units.add_metric([machine, name], value)
            yield units

        syncs = CounterMetricFamily(
            "minborg_borglet_syncs",
            "Syncs applied, and refused by reason (stale_epoch, stale_seq, stale_revision, need_full)",
            labels=["machine", "result"],
        )
        syncs.add_metric([machine, "applied"], self.borglet.table.syncs)
        for reason in ("stale_epoch", "stale_seq", "stale_revision", "need_full"):
            syncs.add_metric([machine, reason], self.borglet.table.refused[reason])
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
    # The standard process_* and python_* families, as on the masters (master/metrics.py).
    for standard in (PROCESS_COLLECTOR, PLATFORM_COLLECTOR, GC_COLLECTOR):
        registry.register(standard)
    return registry


def render(registry: CollectorRegistry) -> bytes:
    return generate_latest(registry)
