"""Sigma's pure parts: a listing's search, filters, sort and pages; the usage history's bounds; the charts; the job's one-word status and the counts that add up."""

from __future__ import annotations

import math

from reference.master.sigma.charts import chart
from reference.master.sigma.history import Point, UsageHistory
from reference.master.sigma.jobs import job_status
from reference.master.sigma.listing import Query, link, select

ROWS = [{"job": f"u{i % 3}/j{i}", "user": f"u{i % 3}", "tasks": i % 4} for i in range(120)]


def test_search_filter_sort_and_page() -> None:
    # j1, j10-j19, j100-j119: 31 names hold "j1"; user u1's (i % 3 == 1): 1, 10, 13, 16, 19, 100, 103, ..., 118: 12
    page = select(ROWS, Query(q="J1", filters=(("user", "u1"),), sort="-tasks", per_page=4), ["job"], ["job", "tasks"], "job")
    assert page.total == 120 and page.matched == 12 and page.pages == 3  # ceil(12 / 4)
    assert [r["tasks"] for r in page.rows] == [3, 3, 3, 2]  # tasks = i % 4, descending; ties by name
    assert [r["job"] for r in page.rows[:3]] == ["u1/j103", "u1/j115", "u1/j19"]
    assert page.first == 1 and page.sort == "-tasks" and page.note == ""


def test_a_page_past_the_last_shows_the_last_and_an_unknown_sort_says_so() -> None:
    page = select(ROWS, Query(sort="colour", page=99, per_page=50), ["job"], ["job", "tasks"], "job")
    assert page.page == 3 and page.first == 101 and len(page.rows) == 20  # 120 = 50 + 50 + 20
    assert page.sort == "job"
    assert "no column 'colour'" in page.note and "3 page(s)" in page.note
    empty = select([], Query(page=2), ["job"], ["job"], "job")
    assert empty.rows == [] and empty.pages == 1 and empty.page == 1 and empty.note == ""


def test_numbers_sort_as_numbers_and_links_keep_the_query() -> None:
    rows = [{"n": 10}, {"n": 9}, {"n": 100}]
    assert [r["n"] for r in select(rows, Query(sort="n"), [], ["n"], "n").rows] == [9, 10, 100]  # not "10" < "9"
    assert link("/ui", {"q": "web", "page": "3"}, page=1) == "/ui?q=web"  # page 1 is the default
    assert link("/ui/machines", {"state": "down"}, sort="-tasks") == "/ui/machines?state=down&sort=-tasks"


def test_usage_history_is_bounded_and_forgets_series_not_seen_for_a_window() -> None:
    h = UsageHistory(samples=3, max_series=2)
    h.record(0.0, {"job:a": (100, 1), "job:b": (5, 5)})
    h.record(1.0, {"job:a": (200, 2), "job:c": (7, 7)})  # c: over max_series, not kept
    h.record(2.0, {"job:a": (300, 3)})
    h.record(3.0, {"job:a": (400, 4)})  # the ring of 3 now holds t = 1, 2, 3
    assert [(p.at, p.cpu_milli) for p in h.points("job:a", since=0)] == [(1.0, 200), (2.0, 300), (3.0, 400)]
    assert h.points("job:a", since=2.5) == [Point(3.0, 400, 4)]
    assert h.points("job:c", since=0) == []
    # b was last in sample 0; 3 samples later (a whole ring) it is dropped, freeing its place.
    assert "job:b" not in h.series and len(h.times) == 3
    h.record(4.0, {"job:c": (9, 9)})
    assert h.points("job:c", since=0) == [Point(4.0, 9, 9)]
    # A series missing from a sample has no point there, not a stale one.
    assert [p.at for p in h.points("job:a", since=0)] == [2.0, 3.0]


def test_a_chart_scales_to_its_peak_and_dashes_a_limit_within_it() -> None:
    points = [Point(3000.0, 100, 0), Point(3300.0, 400, 0), Point(3600.0, 200, 0)]
    svg = chart("cpu used", points, lambda p: p.cpu_milli, lambda v: f"{v:.0f}m", 3600.0, 3600.0, 800)
    # The history is 600 s old, younger than the hour: the chart spans 600 s.
    # x: 4 + 512 * (1 - (3600 - at) / 600); top 400 * 1.25 = 500; y: 116 - 112 * v / 500:
    # 100 -> 93.6, 400 -> 26.4, 200 -> 71.2
    assert 'points="4.0,93.6 260.0,26.4 516.0,71.2"' in svg and "-10 min" in svg
    assert "now 200m, peak 400m, limit 800m" in svg and 'class="limit"' not in svg  # 800 is above the top
    near = chart("cpu used", points, lambda p: p.cpu_milli, lambda v: f"{v:.0f}m", 3600.0, 3600.0, 450, "requested")
    assert 'y1="15.2"' in near and "requested 450m" in near  # 116 - 112 * 450 / 500 = 15.2
    assert "no samples yet" in chart("ram used", [], lambda p: p.ram_bytes, str, 0.0, 3600.0)
    one = chart("ram used", [Point(10.0, 0, 5)], lambda p: p.ram_bytes, str, 10.0, 3600.0)
    assert "<circle" in one and not math.isnan(5.0)


def counts(**given: int) -> dict[str, int]:
    return {"RUNNING": 0, "PENDING": 0, "DEAD": 0, "running_confirmed": 0, **given}


def test_a_job_is_in_one_word_by_its_worst() -> None:
    assert job_status(counts(RUNNING=3, running_confirmed=3), loops=1) == "crash loop"
    assert job_status(counts(RUNNING=2, running_confirmed=2, PENDING=1), loops=0) == "pending"
    assert job_status(counts(RUNNING=2, running_confirmed=1), loops=0) == "starting"
    assert job_status(counts(RUNNING=2, running_confirmed=2, DEAD=4), loops=0) == "running"
    assert job_status(counts(DEAD=2), loops=0) == "done"
