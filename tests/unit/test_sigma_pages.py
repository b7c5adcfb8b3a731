"""Sigma's pages rendered from a small cell (no server): counts that add up after a job is killed, the owner's controls, the usage sample, the rollout section."""

from __future__ import annotations

import time
from dataclasses import replace

from reference.jobspec import parse_job
from reference.master import ui
from reference.master.access import Identity
from reference.master.cell import Cell, JobInfo, MachineInfo
from reference.master.sigma.history import UsageHistory
from reference.master.sigma.jobs import cell_page, job_page
from reference.master.sigma.rollouts import rollout_section
from spec.actions import kill_job, submit
from tests.unit.master_cells import placed_cell

OVERVIEW = {"cell": "c", "leader": "m0", "replicas": []}
BATCH = parse_job({"name": "batch", "user": "bob", "task_count": 3, "request": {"cpu": "100m"},
                   "command": ["sleep", "100"]})  # fmt: skip
RUNS = {"seen": True, "borglet_state": "RUNNING", "pid": 7, "started_at": 1.0,
        "usage": (("cpu_milli", 30), ("ram_bytes", 1000))}  # fmt: skip


def with_bob(cell: Cell) -> Cell:
    state = submit(cell.state, BATCH.to_spec_job())
    assert state is not None
    return replace(cell, state=state, jobs={**cell.jobs, "bob/batch": JobInfo(BATCH)})


def test_the_cells_counts_are_the_rows_sums_and_a_killed_jobs_tasks_are_apart() -> None:
    cell = with_bob(placed_cell(**RUNS))
    state = kill_job(cell.state, "alice/web")
    assert state is not None
    cell = replace(cell, state=state, jobs={"bob/batch": JobInfo(BATCH)})
    html = cell_page(cell, OVERVIEW, "m0", {}, "admin")
    # The cell holds 5 tasks: bob's 3 PENDING, alice's 2 DEAD of a job no longer there.
    # The line sums the rows (3 pending, 0 dead); the 2 are on their own line.
    tasks_line = html.split("<td>tasks</td><td>", 1)[1].split("</td>", 1)[0]
    assert "PENDING</span> 3" in tasks_line and "DEAD</span> 0" in tasks_line
    assert "tasks of removed jobs" in html and 'DEAD</span> 2 <span class="note">' in html
    assert "jobs 1-1 of 1" in html and "alice" not in html.split("<h2>Jobs</h2>", 1)[1].split("<h2>Master", 1)[0]


def test_only_the_owner_or_the_admin_gets_the_controls() -> None:
    cell = with_bob(placed_cell(**RUNS))
    history = UsageHistory(samples=2)
    for who, shown in ((Identity("alice"), True), (Identity("root", admin=True), True), (Identity("bob"), False), (None, False)):
        html = job_page(cell, "alice/web", "c", "m0", {}, who, history)
        assert html is not None
        assert ('id="kill-job"' in html) is shown and ('id="count-form"' in html) is shown, who
    assert job_page(cell, "nobody/ghost", "c", "m0", {}, None, history) is None


def test_a_usage_sample_sums_a_jobs_running_tasks_and_reads_each_machine() -> None:
    cell = with_bob(placed_cell(**RUNS))
    cell = replace(cell, machines={"m1": MachineInfo("http://127.0.0.1:1", usage=(("cpu_milli", 75), ("ram_bytes", 5)))})
    sample = ui.usage_sample(cell)
    # alice/web: 2 RUNNING tasks of 30m and 1000 bytes each; bob/batch: 3 PENDING, nothing used.
    assert sample == {"machine:m1": (75.0, 5.0), "job:alice/web": (60.0, 2000.0), "job:bob/batch": (0.0, 0.0)}


def test_the_job_page_draws_the_jobs_history_and_filters_its_tasks() -> None:
    cell = placed_cell(**RUNS)
    history = UsageHistory(samples=4)
    now = time.time()  # the page draws the hour before its own clock
    for ago in (120.0, 60.0, 0.0):
        history.record(now - ago, ui.usage_sample(cell))
    html = job_page(cell, "alice/web", "c", "m0", {"outcome": "bad"}, None, history)
    assert html is not None and "no tasks match" in html and "tasks" in html  # both run: none is red
    html = job_page(cell, "alice/web", "c", "m0", {}, None, history)
    assert html is not None and "<polyline" in html and "3 samples" in html
    assert "requested 200m" in html  # 2 running tasks of 100m


def test_the_rollout_section_names_the_state_and_the_versions() -> None:
    cell = placed_cell(**RUNS)
    html = rollout_section(cell, "alice/web", now=10.0)
    assert 'rollout</td><td><span class="ok">complete</span> to version 0: every task runs it' in html
    assert "<h2>Versions (newest first)</h2>" in html and '<span class="ok">current</span>' in html
    assert rollout_section(cell, "nobody/ghost", now=10.0) == ""
