"""The Fauxmaster decides as the live leader does: on a checkpoint of a live cell taken just as
jobs were submitted, its pass makes the leader's placements, preemptions and pending reasons;
and a dry run or a what-if writes nothing (the etcd revision does not move)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from reference.fauxmaster import Fauxmaster
from reference.fauxmaster import checkpoint as ckpt
from reference.master.cell import Cell
from reference.store.client import StoreClient
from spec.model import TaskId, TaskState
from tests.integration.cellkit import LocalCell, sleeper_job, wait_for

pytestmark = pytest.mark.integration

# The leader's seed is its pass count since it was elected, which the test cannot read: the
# Fauxmaster tries each seed up to this many (a pass on this cell costs about a millisecond).
SEEDS = 400


def decisions(before: Cell, after: Cell) -> dict[str, Any]:
    """What one pass decided: tasks placed (and where), tasks preempted, pending reasons."""
    placed, preempted, pending = {}, set(), {}
    for tid, t in after.state.tasks.items():
        old = before.state.tasks.get(tid)
        if t.state is TaskState.RUNNING and (old is None or old.state is not TaskState.RUNNING):
            placed[tid] = t.machine
        if t.state is TaskState.PENDING and old is not None and old.state is TaskState.RUNNING:
            preempted.add(tid)
        if t.state is TaskState.PENDING and after.task_info(tid).pending:
            pending[tid] = after.task_info(tid).pending
    return {"placed": placed, "preempted": preempted, "pending": pending}


def spec_tasks(cell: Cell) -> dict[TaskId, tuple[str, str | None, str]]:
    """Each task's state, machine and pending reason: what a pass writes."""
    return {tid: (t.state.value, t.machine, cell.task_info(tid).pending) for tid, t in cell.state.tasks.items()}


def leaders_pass(store: StoreClient, cell_name: str, submitted: int, settled: Any) -> tuple[Cell, Cell]:
    """The cell at the submit's revision, and at the first later revision where a task's
    state, machine or pending reason changed: the leader's pass (a pass is one transaction)."""
    at_submit = ckpt.to_cell(ckpt.read_etcd(store, cell_name, submitted))
    wait_for(lambda: settled(ckpt.to_cell(ckpt.read_etcd(store, cell_name))) or None, 30, "the leader's pass")
    now = store.revision()
    for rev in range(submitted + 1, now + 1):
        cell = ckpt.to_cell(ckpt.read_etcd(store, cell_name, rev))
        if spec_tasks(cell) != spec_tasks(at_submit):
            return at_submit, cell
    raise AssertionError(f"no task changed between revisions {submitted} and {now}")


def quiet(store: StoreClient, for_s: float = 2.0) -> int:
    """The revision once no write came for `for_s` (placements started, reports settled)."""
    seen = {"rev": -1, "since": 0.0}

    def still() -> int | None:
        rev, now = store.revision(), time.monotonic()
        if rev != seen["rev"]:
            seen["rev"], seen["since"] = rev, now
            return None
        return rev if now - seen["since"] >= for_s else None

    return wait_for(still, 30, "a quiet cell", every=0.2)


def test_the_fauxmaster_makes_the_leaders_decisions_and_dry_runs_write_nothing(tmp_path: Path) -> None:
    # 3 machines of 2000m: low (5 x 1000m, priority 0) fills 5000m; prod (2 x 1500m, priority
    # 200) must preempt low tasks; huge (1 x 3000m) fits on no machine.
    with LocalCell(tmp_path, masters=1, borglets=3, capacity="cpu=2000m,ram=2GiB") as cell:
        store = cell.store()
        try:
            jobs = [
                sleeper_job("low", priority=0, count=5, request={"cpu": "1000m", "ram": "64MiB"}),
                sleeper_job("prod", priority=200, count=2, request={"cpu": "1500m", "ram": "64MiB"}),
                sleeper_job("huge", priority=100, count=1, request={"cpu": "3000m", "ram": "64MiB"}),
            ]
            for job in jobs:
                key = f"bob/{job['name']}"
                # A dry run first: it answers from the cache, and writes nothing (on the first
                # job the cell is quiet, so etcd's revision itself does not move).
                before = quiet(store) if job is jobs[0] else None
                dry = cell.request("POST", "/v1/jobs", params={"dry_run": "true"}, json=job)
                assert dry.status_code == 200, dry.text
                assert dry.json()["job"] == key
                assert before is None or store.revision() == before
                started = time.monotonic()

                r = cell.submit(job)
                assert r.status_code == 201, r.text

                def settled(now: Cell, key: str = key) -> bool:
                    tasks = [t for t in now.state.tasks.values() if t.id.job == key]
                    return bool(tasks) and all(
                        t.state is not TaskState.PENDING or now.task_info(t.id).pending for t in tasks
                    )

                at_submit, after = leaders_pass(store, cell.cell, int(r.json()["revision"]), settled)
                live = decisions(at_submit, after)
                assert live["placed"] or live["pending"], live
                tried = []
                for seed in range(SEEDS):
                    faux = Fauxmaster(at_submit)
                    faux.schedule_all_pending(seed)
                    tried.append(decisions(at_submit, faux.cell))
                    if tried[-1] == live:
                        break
                else:
                    raise AssertionError(f"no seed below {SEEDS} makes the leader's pass {live}; seed 0: {tried[0]}")
                # What the seed cannot change: which tasks found a place, and why the others did not.
                assert all(set(t["placed"]) == set(live["placed"]) for t in tried), key
                assert all(t["pending"] == live["pending"] for t in tried), key
                print(f"{key}: the leader's pass is the Fauxmaster's with seed {len(tried) - 1} "
                      f"({time.monotonic() - started:.1f} s): {live}")

            # What if a machine were removed: answered, and nothing is written.
            before = quiet(store)
            answer = cell.get("/v1/whatif", params={"remove_machine": "b0"})
            assert answer["remove_machine"] == "b0" and store.revision() == before
        finally:
            store.close()
