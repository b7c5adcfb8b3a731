"""The master's and the borglet's metrics follow Prometheus' naming conventions, and the Grafana
dashboard in docs/ queries only metrics they expose."""

from __future__ import annotations

import json
import re
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from reference.borglet.metrics import make_registry
from reference.master.cell import Cell
from reference.master.metrics import MasterMetrics

REPO = Path(__file__).resolve().parents[2]


class FakeTable:  # borglet/core.py's TaskTable: the sync counts the collector reads
    syncs = 1
    refused = {"stale_epoch": 0, "stale_seq": 0, "stale_revision": 0, "need_full": 0}


class FakeBorglet:
    table = FakeTable()

    def report(self) -> dict:
        usage = {"cpu_milli": 250, "ram_bytes": 4096}
        return {"machine": "m1", "capacity": {"cpu": 4000, "ram": 2**30, "disk": 2**34, "gpu": 2}, "usage": usage,
                "tasks": [{"task_id": "a/b/0#0@1", "state": "RUNNING", "restarts": 2, "usage": usage}],
                "queued": 0, "epoch": 3}  # fmt: skip


def exposed() -> dict[str, str]:
    """Every sample name either exposes -> its metric type."""
    from prometheus_client import generate_latest

    master = MasterMetrics(lambda: Cell())
    master.requests.labels("/v1/jobs", "GET", "200").inc()
    master.latency.labels("/v1/jobs", "GET").observe(0.01)
    master.pass_seconds.observe(0.01)
    master.on_txn("committed", 2)
    master.on_poll("sent")
    master.on_poll("hold")
    master.on_poll("refused_stale_seq")
    master.streams.labels("events").inc()
    registry = make_registry(FakeBorglet())  # type: ignore[arg-type]
    names: dict[str, str] = {}
    for text in (master.render().decode(), generate_latest(registry).decode()):
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                names[sample.name] = family.type
    return names


def test_counters_end_in_total_and_units_are_base_units_in_the_name() -> None:
    names = exposed()
    for name, kind in names.items():
        if name.startswith(STANDARD):
            continue  # prometheus_client's own families, named by its conventions
        assert name.startswith("minborg_"), name
        if kind == "counter" and not name.endswith("_created"):
            assert name.endswith("_total"), name
        if kind == "histogram":
            assert re.search(r"_seconds(_bucket|_count|_sum)$", name), name
        assert "_milli" not in name and "_ram_" not in name, f"{name}: base units (cores, bytes) only"
    assert "minborg_borglet_cpu_usage_cores" in names and "minborg_api_request_duration_seconds_bucket" in names


STANDARD = ("process_", "python_")


def test_masters_and_borglets_expose_the_standard_process_and_python_families() -> None:
    from prometheus_client import generate_latest

    master = {f.name for f in text_string_to_metric_families(MasterMetrics(lambda: Cell()).render().decode())}
    borglet = {f.name for f in text_string_to_metric_families(generate_latest(make_registry(FakeBorglet())).decode())}  # type: ignore[arg-type]
    for names in (master, borglet):
        # process_* from /proc (this test runs on Linux, as the cell does), python_* everywhere.
        assert {"process_cpu_seconds", "process_resident_memory_bytes", "process_open_fds",
                "python_info", "python_gc_collections"} <= names, sorted(names)  # fmt: skip


def test_the_grafana_dashboard_queries_only_exposed_metrics() -> None:
    dashboard = json.loads((REPO / "docs" / "grafana" / "minborg.json").read_text())
    names = set(exposed())
    used: set[str] = set()
    for panel in dashboard["panels"]:
        for target in panel.get("targets", []):
            used |= set(re.findall(r"\bminborg_[a-z_]+", target["expr"]))
    assert used and used <= names, sorted(used - names)
    # Panels do not overlap on Grafana's 24-column grid.
    cells = set()
    for panel in dashboard["panels"]:
        g = panel["gridPos"]
        assert g["x"] + g["w"] <= 24
        for x in range(g["x"], g["x"] + g["w"]):
            for y in range(g["y"], g["y"] + g["h"]):
                assert (x, y) not in cells, panel["title"]
                cells.add((x, y))


def test_the_work_counters_are_exposed_and_read_back_by_the_scale_campaign() -> None:
    import httpx

    from loadtests.scale import leader_work
    from reference.master import work

    work.add("records_decoded", 7)
    before = work.snapshot()["records_decoded"]
    metrics = MasterMetrics(lambda: Cell())
    metrics.on_txn("committed", 40)
    metrics.on_txn("committed", 2)
    metrics.on_txn("conflict", 7)  # refused: it wrote nothing
    text = metrics.render().decode()
    families = {f.name: f for f in text_string_to_metric_families(text)}
    assert families["minborg_work"].type == "counter"
    samples = {s.labels["kind"]: s.value for s in families["minborg_work"].samples if s.name == "minborg_work_total"}
    assert samples["records_decoded"] == before

    def answer(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, text=text)

    with httpx.Client(transport=httpx.MockTransport(answer)) as http:
        read = leader_work(http, "http://leader")
    assert read["records_decoded"] == before and set(read) == set(samples) | {"records_written", "txns"}
    assert read["records_written"] == 42 and read["txns"] == 2  # the records its committed txns wrote
    with httpx.Client(transport=httpx.MockTransport(lambda r: httpx.Response(200, text="garbage"))) as http:
        assert leader_work(http, "http://leader") == {}
    assert leader_work(httpx.Client(), None) == {}


def test_the_task_gauge_reads_the_views_counts_without_walking_the_tasks() -> None:
    from dataclasses import replace

    cell = replace(Cell(), counts={"PENDING": 3, "RUNNING": 5, "DEAD": 1, "running_confirmed": 4}, job_counts={})
    text = MasterMetrics(lambda: cell).render().decode()
    tasks = {s.labels["state"]: s.value for f in text_string_to_metric_families(text) if f.name == "minborg_tasks" for s in f.samples}
    assert tasks == {"PENDING": 3, "RUNNING": 5, "DEAD": 1}
