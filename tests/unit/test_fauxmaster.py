"""The Fauxmaster's operations on small cells: each one the master's own decision, on a simulated clock."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from reference.cli.app import app
from reference.fauxmaster import CheckpointError, Fauxmaster, pack
from reference.fauxmaster import checkpoint as ckpt
from reference.master import dryrun
from reference.master.leader import commit_plan
from reference.master.mutations import ApiError
from reference.scheduler import plan_for
from spec.invariants import check_state
from spec.model import (
    Alloc,
    Band,
    Job,
    Machine,
    QuotaKey,
    Resources,
    RestartPolicy,
    TaskId,
    TaskState,
)

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
CPU4 = Resources.of({"cpu": 4000, "ram": 4 << 30})


def machines(n: int, rack_of: int = 2) -> list[Machine]:
    return [Machine(name=f"m{i}", capacity=CPU4, attrs=(("rack", f"r{i % rack_of}"),)) for i in range(n)]


def job(name: str, count: int, cpu: int, priority: int = 100, **kw: object) -> Job:
    return Job("alice", name, priority, count, Resources.of({"cpu": cpu, "ram": 1 << 28}), **kw)  # type: ignore[arg-type]


def holds(fm: Fauxmaster) -> None:
    assert check_state(fm.state) == []


def test_pack_places_what_fits_and_nothing_else() -> None:
    # 3 machines of 4000m; 7 tasks of 2000m: 6 fit (2 per machine), 1 does not.
    placed = pack(machines(3), [job("web", 7, 2000)], seed=0)
    assert len(placed) == 6
    assert sorted(placed.values()).count("m0") == 2


def test_schedule_all_pending_is_the_leaders_plan_committed() -> None:
    fm = Fauxmaster.from_workload(machines(3), [job("web", 4, 1500), job("batch", 3, 3000, priority=0)])
    expected = plan_for(fm.state, fm.config, seed=7)
    result = fm.schedule_all_pending(seed=7)
    assert result.plan.placements == expected.placements
    assert result.conflicts == 0
    on = {tid: t.machine for tid, t in fm.state.tasks.items() if t.state is TaskState.RUNNING}
    assert on == {p.task: p.machine for p in expected.placements}
    holds(fm)


def test_pending_tasks_get_the_schedulers_reasons() -> None:
    fm = Fauxmaster.from_workload(machines(2), [job("big", 1, 8000)])
    result = fm.schedule_all_pending()
    assert result.placed == 0
    info = fm.cell.task_info(TaskId("alice/big", 0, 0))
    assert info.pending.startswith("0 of 2 machines fit: cpu: 0 of 2 machines have 8000m free")


def test_apply_job_is_the_apis_submit_with_admission() -> None:
    quota = {QuotaKey("alice", Band.PRODUCTION): Resources.of({"cpu": 3000, "ram": 8 << 30})}
    fm = Fauxmaster.from_workload(machines(2), quotas=quota)
    body = {"name": "web", "user": "alice", "priority": 200, "task_count": 2, "request": {"cpu": "1", "ram": "256Mi"},
            "command": ["sleep", "1"]}  # fmt: skip
    assert fm.apply_job(body) == "alice/web"
    with pytest.raises(ApiError) as refused:
        fm.apply_job({**body, "name": "more"})  # 2 more cores: 4000m > 3000m
    assert refused.value.status == 403 and "quota is exceeded" in refused.value.error
    with pytest.raises(ApiError) as dup:
        fm.apply_job(body)
    assert dup.value.status == 409
    assert fm.schedule_all_pending().placed == 2


def test_preemption_goes_through_the_spec_and_is_reported() -> None:
    fm = Fauxmaster.from_workload(machines(1), [job("low", 2, 2000, priority=0)])
    fm.schedule_all_pending()
    fm.change(lambda d: d.step("submit", job("prod", 1, 2000, priority=200), reason="submitted"))
    result = fm.schedule_all_pending()
    (p,) = result.plan.placements
    assert p.task.job == "alice/prod" and len(p.victims) == 1
    assert fm.state.tasks[p.victims[0]].state is TaskState.PENDING
    holds(fm)


def test_fail_machine_loses_its_tasks_and_the_next_pass_restarts_them_elsewhere() -> None:
    fm = Fauxmaster.from_workload(machines(2), [job("web", 2, 1000, restart_policy=RestartPolicy.ALWAYS)])
    fm.schedule_all_pending()
    victim = next(t.machine for t in fm.state.tasks.values() if t.state is TaskState.RUNNING)
    lost = fm.fail_machine(victim)
    assert lost and all(fm.state.tasks[t].state is TaskState.DEAD for t in lost)
    result = fm.schedule_all_pending()
    assert result.restarted == len(lost) and result.placed == len(lost)
    assert {t.machine for t in fm.state.tasks.values() if t.state is TaskState.RUNNING} == {"m0", "m1"} - {victim}
    with pytest.raises(ValueError):
        fm.fail_machine(victim)
    with pytest.raises(KeyError):
        fm.fail_machine("nowhere")


def test_fail_rack_takes_down_every_machine_of_the_rack() -> None:
    fm = Fauxmaster.from_workload(machines(4), [job("web", 4, 1000)])
    fm.schedule_all_pending()
    fm.fail_rack("r0")
    assert sorted(m.name for m in fm.state.machines.values() if not m.up) == ["m0", "m2"]


def test_advance_starts_tasks_after_the_delay_and_ends_them_on_schedule() -> None:
    fm = Fauxmaster.from_workload(machines(1), [job("a", 2, 2000, restart_policy=RestartPolicy.NEVER),
                                                 job("b", 1, 2000)],
                                  start_delay_s=5.0, runtimes={"alice/a": 60.0})  # fmt: skip
    fm.schedule_all_pending()
    a0 = TaskId("alice/a", 0, 0)
    assert fm.cell.task_info(a0).borglet_state == ""
    fm.advance(5.0)
    assert fm.cell.task_info(a0).borglet_state == "RUNNING" and fm.now == 5.0
    # At 65 s a's tasks finish (5 s start + 60 s run): b, pending for lack of room, is placed.
    passes = fm.advance(100.0)
    assert fm.state.tasks[a0].state is TaskState.DEAD
    assert fm.state.tasks[TaskId("alice/b", 0, 0)].state is TaskState.RUNNING
    assert passes and passes[0].at == 65.0 and fm.now == 105.0


def test_checkpoint_round_trips_through_the_codec_records() -> None:
    fm = Fauxmaster.from_workload(machines(2), [job("web", 3, 1000)])
    fm.schedule_all_pending()
    set_ = Alloc("alice/logs", 0, "m1", Resources.of({"cpu": 500, "ram": 1 << 28}), 100, "alice")
    assert fm.change(lambda d: d.step("alloc_create", set_, reason="alloc set"))
    cell = fm.cell
    doc = json.loads(json.dumps(ckpt.from_cell(cell, "test")))
    back = ckpt.to_cell(doc)
    assert back.state.machines == cell.state.machines and back.state.tasks == cell.state.tasks
    assert dict(back.state.allocs) == {set_.name: set_}
    assert doc["format"] == 1 and back.revision == cell.revision
    with pytest.raises(CheckpointError, match="format"):
        ckpt.to_cell({"format": 2})
    with pytest.raises(CheckpointError, match="tasks"):
        ckpt.to_cell({**doc, "tasks": [{"schema": 1}]})


def test_whatif_remove_machine_moves_its_tasks_and_changes_nothing() -> None:
    fm = Fauxmaster.from_workload(machines(2), [job("web", 3, 1500)])
    fm.schedule_all_pending()
    before = fm.cell
    # m0 holds 2 tasks (3000m of 4000m), m1 one: of m0's two, one more fits on m1.
    busy = max(("m0", "m1"), key=lambda m: len(before.state.running_on(m)))
    answer = dryrun.remove_machine(before, busy)
    assert len(answer["moves"]) == 1 and answer["moves"][0]["to"] != busy
    assert len(answer["pending"]) == 1 and "machines have 1500m free" in answer["pending"][0]["reason"]
    assert fm.cell is before and before.state.machines[busy].up
    with pytest.raises(ApiError):
        dryrun.remove_machine(before, "nowhere")


def test_commit_of_a_fauxmaster_plan_on_the_same_state_has_no_conflict() -> None:
    fm = Fauxmaster.from_workload(machines(3), [job("web", 5, 1000)])
    plan = plan_for(fm.state, fm.config, seed=3)
    assert fm.change(lambda d: commit_plan(d, plan)) == (5, 0)


def test_the_fauxmaster_command_runs_a_checkpoint_without_a_cell(tmp_path: Path) -> None:
    fm = Fauxmaster.from_workload(machines(2), [job("web", 2, 1000, restart_policy=RestartPolicy.ALWAYS)])
    fm.schedule_all_pending()
    ckpt.save(ckpt.from_cell(fm.cell, "test"), tmp_path / "c.json")
    busy = next(t.machine for t in fm.state.tasks.values() if t.state is TaskState.RUNNING)
    r = CliRunner().invoke(app, [
        "fauxmaster", "--checkpoint", str(tmp_path / "c.json"), "--apply", str(EXAMPLES / "hello_world.yaml"),
        "--fail-machine", busy, "--schedule", "--json",
    ])  # fmt: skip
    assert r.exit_code == 0, r.output
    answer = json.loads(r.output)
    # hello_world: 3 tasks of 100m, and the lost tasks of web restarted, all on the machine left.
    assert answer["submitted"] == ["demo/hello_world"] and answer["lost"]
    assert {p["machine"] for p in answer["placed"]} == {"m0", "m1"} - {busy}
    assert len(answer["placed"]) == 3 + len(answer["lost"]) and answer["pending"] == []
    r = CliRunner().invoke(app, ["fauxmaster", "--checkpoint", str(tmp_path / "c.json"), "--fail-machine", "m9"])
    assert r.exit_code == 2 and "m9" in r.output



def test_reclaim_runs_the_leaders_reclaimer_tick_on_the_stub_borglets_usage() -> None:
    # One machine of 4000m. A prod task asks 3000m: a batch task of 2000m does not fit beside it
    # until the reclaimer lowers the prod task's reservation toward its usage (1000m + margin).
    # The clock starts past 0: a task info's start time of 0 reads as "never started".
    fm = Fauxmaster.from_workload(machines(1), [job("web", 1, 3000, priority=200)], now=100.0)
    fm.schedule_all_pending()
    web, batch = TaskId("alice/web", 0, 0), TaskId("alice/batch", 0, 0)
    fm.advance(11.0)  # past the reclaimer's warm-up of a task's first 10 s
    assert fm.reclaim({web: {"cpu_milli": 1000, "ram_bytes": 1 << 27}}, half_life=0.001) == 1
    assert fm.state.tasks[web].reserved.get("cpu") < 2000
    fm.apply_job({
        "name": "batch", "user": "alice", "priority": 100, "task_count": 1,
        "request": {"cpu": "2000m", "ram": "256MiB"}, "command": ["true"],
    })  # fmt: skip
    fm.schedule_all_pending()
    assert fm.state.tasks[batch].state is TaskState.RUNNING  # in the reclaimed room
    holds(fm)
    # The prod task's usage grows back: its reservation must grow, and the batch task in the
    # room it needs is evicted, as the leader's reclaimer does.
    fm.advance(5.0, schedule=False)
    assert fm.reclaim({web: {"cpu_milli": 3000, "ram_bytes": 1 << 27}}, half_life=0.001) == 1
    assert fm.state.tasks[batch].state is TaskState.PENDING
    assert fm.state.tasks[web].reserved.get("cpu") == 3000
    holds(fm)


def test_arrivals_from_a_trace_are_submitted_at_their_moment_and_depart_after_their_runtime() -> None:
    # One machine of 4000m; job a (3000m) arrives at 10 s and runs 20 s; job b (3000m) arrives
    # at 15 s: it waits for a's departure at 30 s, then runs. A duplicate of a is refused.
    fm = Fauxmaster.from_workload(machines(1))
    fm.arrive(10.0, job("a", 1, 3000), runtime=20.0)
    fm.arrive(15.0, job("b", 1, 3000))
    fm.arrive(16.0, job("a", 1, 1000))
    a, b = TaskId("alice/a", 0, 0), TaskId("alice/b", 0, 0)
    fm.advance(9.0)
    assert a not in fm.state.tasks
    fm.advance(7.0)  # now 16
    assert fm.state.tasks[a].state is TaskState.RUNNING and fm.state.tasks[b].state is TaskState.PENDING
    assert fm.refused == [(16.0, "alice/a")]
    fm.advance(14.0)  # now 30: a departs, b takes its room
    assert fm.state.tasks[a].state is TaskState.DEAD and fm.state.tasks[b].state is TaskState.RUNNING
    holds(fm)
    with pytest.raises(ValueError, match="before now"):
        fm.arrive(1.0, job("late", 1, 10))
