"""The rollout's pure parts: which stale tasks to replace now (master/rollout.py), the plan of a
new version and its history (master/jobhistory.py, master/versions.py), on hand-built cells."""

from __future__ import annotations

from dataclasses import replace

import pytest

from reference.jobspec import parse_job
from reference.master import jobhistory, rollout, versions
from reference.master.cell import Cell, Draft, TaskInfo, borglet_task_id
from reference.master.mutations import ApiError, submit_job, update_job
from spec.actions import machine_add, schedule
from spec.model import CellState, Machine, Resources, TaskId, TaskState

NOW = 1000.0
UP = TaskInfo(seen=True, borglet_state="RUNNING", pid=42, started_at=NOW - 10, healthy=True)
FILE = {"name": "web", "user": "alice", "task_count": 3, "command": ["sleep", "1000"], "request": {"cpu": "100m"}}


def cell_running(file: dict | None = None) -> Cell:
    """Machines m0 and m1 and job alice/web of 3 tasks, all placed and reported up."""
    state = CellState()
    for name in ("m0", "m1"):
        state = machine_add(state, Machine(name, Resources.of(cpu=4000)))
    d = Draft(Cell(state=state), NOW - 60)
    submit_job(d, file or FILE)
    for i in range(3):
        assert d.step("schedule", TaskId("alice/web", i), f"m{i % 2}")
    tasks = {tid: UP for tid in d.state.tasks}
    return Cell(state=d.state, jobs=dict(d.jobs.data), tasks=tasks)


def put(cell: Cell, file: dict) -> tuple[Cell, dict]:
    d = Draft(cell, NOW)
    body = jobhistory.put_job(d, "alice/web", file)
    return replace(cell, state=d.state, jobs=dict(d.jobs.data), tasks={**cell.tasks, **d.tasks.data}), body


def decide(cell: Cell, health_checked: bool = False) -> rollout.Rollout:
    found = rollout.decide(cell.state, "alice/web", cell.task_info, health_checked, NOW)
    assert found is not None
    return found


def test_the_same_file_is_unchanged_and_writes_nothing():
    cell = cell_running()
    d = Draft(cell, NOW)
    body = jobhistory.put_job(d, "alice/web", dict(FILE))
    assert body["unchanged"] and body["version"] == 0 and not d.changed


def test_a_new_command_is_a_version_whose_tasks_are_all_replaced():
    cell, body = put(cell_running(), {**FILE, "command": ["sleep", "2000"]})
    assert body["version"] == 1 and body["changed"] == ["command"]
    assert body["plan"]["replaced"] == [0, 1, 2] and body["plan"]["in_place"] == []
    r = decide(cell)
    assert r.state == "rolling" and r.stale == (0, 1, 2)
    assert r.replace == (TaskId("alice/web", 0),)  # max_unavailable 1 (the default): one at a time


def test_a_count_and_a_priority_within_the_band_apply_in_place():
    # priority 0 -> 50 stays in best effort; 3 -> 4 tasks adds one
    cell, body = put(cell_running(), {**FILE, "priority": 50, "task_count": 4})
    assert body["plan"] == {"replaced": [], "in_place": [0, 1, 2], "added": [3], "removed": []}
    assert decide(cell).state == "complete"
    assert cell.state.tasks[TaskId("alice/web", 0)].priority == 50


def test_the_next_replacement_waits_until_the_last_is_up():
    cell, _ = put(cell_running(), {**FILE, "env": {"V": "2"}})
    d = Draft(cell, NOW)
    assert rollout.roll(d, set(d.state.tasks), lambda n: n) == 1
    new = TaskId("alice/web", 0, 1)
    assert d.state.tasks[new].state is TaskState.PENDING and d.state.tasks[new].down_for == "roll"
    assert rollout.roll(d, set(d.state.tasks), lambda n: n) == 0  # one down = the budget
    placed = schedule(d.state, new, "m1")
    for info, more in (
        (TaskInfo(), 0),  # placed, its borglet has not reported it: not up
        (replace(UP, started_at=NOW - 0.2), 0),  # started 0.2 s ago: under MIN_READY_S (1 s)
        (UP, 1),  # up: the next is replaced
    ):
        view = replace(cell, state=placed, tasks={**cell.tasks, new: info})
        d = Draft(view, NOW)
        assert rollout.roll(d, set(d.state.tasks), lambda n: n) == more, info


def test_a_health_checked_job_waits_for_healthy():
    cell, _ = put(cell_running(), {**FILE, "env": {"V": "2"}})
    sick = replace(cell, tasks={**cell.tasks, TaskId("alice/web", 2): replace(UP, healthy=None)})
    assert decide(sick, health_checked=True).down == (2,)
    assert decide(sick, health_checked=True).replace == (TaskId("alice/web", 2),)  # down anyway: replaced first
    assert decide(sick, health_checked=False).down == ()


def test_a_failing_replacement_stops_the_rollout_and_says_why():
    cell, _ = put(cell_running(), {**FILE, "command": ["/no/such/program"]})
    d = Draft(cell, NOW)
    rollout.roll(d, set(d.state.tasks), lambda n: n)
    new = TaskId("alice/web", 0, 1)
    placed = schedule(d.state, new, "m0")
    crashed = TaskInfo(seen=True, borglet_state="STARTING", reason="spawn failed", last_exit="spawn: No such file", restarts=2)
    view = replace(cell, state=placed, tasks={**cell.tasks, new: crashed})
    r = decide(view)
    assert r.state == "stopped" and r.replace == ()
    assert "task 0" in r.reason and "spawn: No such file" in r.reason


def test_a_version_whose_every_task_was_replaced_and_fails_is_stopped_not_complete():
    # Every task already runs the current version (none stale: stale tasks that were down were
    # replaced at once), and each one crash-loops: the rollout has stopped, it is not complete.
    cell = cell_running()
    crashed = TaskInfo(seen=True, borglet_state="STARTING", reason="back-off", last_exit="exit code 3", restarts=4, failures=2)
    view = replace(cell, tasks={tid: crashed for tid in cell.state.tasks})
    r = decide(view)
    assert r.stale == () and r.state == "stopped", r
    assert "exit code 3" in r.reason


def test_a_replacement_caught_alive_between_restarts_in_place_is_not_up():
    # The borglet restarts a crashing replacement in place: a report taken while its process
    # lives shows RUNNING with a pid, started long enough ago. Its failures say it crash-loops:
    # the next task is not replaced, and the rollout has stopped.
    cell, _ = put(cell_running(), {**FILE, "command": ["python3", "-c", "raise SystemExit(3)"]})
    d = Draft(cell, NOW)
    rollout.roll(d, set(d.state.tasks), lambda n: n)
    new = TaskId("alice/web", 0, 1)
    placed = schedule(d.state, new, "m0")
    alive = replace(UP, restarts=6, failures=7, last_exit="exit code 3")
    view = replace(cell, state=placed, tasks={**cell.tasks, new: alive})
    d = Draft(view, NOW)
    assert rollout.roll(d, set(d.state.tasks), lambda n: n) == 0
    r = decide(view)
    assert r.state == "stopped" and r.down == (0,) and "exit code 3" in r.reason, r


def test_a_replacement_waiting_out_its_back_off_is_down_whatever_its_reason_says():
    # Between two exits its borglet reports it STARTING (a restart in place), pid gone, and
    # the start of its last process long ago: that counts as started for users, not as up.
    cell, _ = put(cell_running(), {**FILE, "env": {"V": "2"}})
    d = Draft(cell, NOW)
    rollout.roll(d, set(d.state.tasks), lambda n: n)
    new = TaskId("alice/web", 0, 1)
    placed = schedule(d.state, new, "m0")
    waiting = replace(UP, borglet_state="STARTING", pid=0, reason="", restarts=1)
    view = replace(cell, state=placed, tasks={**cell.tasks, new: waiting})
    d = Draft(view, NOW)
    assert rollout.roll(d, set(d.state.tasks), lambda n: n) == 0
    assert decide(view).down == (0,)


def test_a_budget_of_two_replaces_two():
    cell, _ = put(cell_running(), {**FILE, "max_unavailable": 2, "image": ""} | {"env": {"V": "2"}})
    assert decide(cell).replace == (TaskId("alice/web", 0), TaskId("alice/web", 1))


def test_history_keeps_each_version_and_what_changed():
    cell, _ = put(cell_running(), {**FILE, "env": {"V": "2"}})
    cell, _ = put(cell, {**FILE, "env": {"V": "2"}, "task_count": 2})
    found = jobhistory.history(cell, "alice/web")
    assert [v["version"] for v in found["versions"]] == [2, 1, 0]
    assert [v["changed"] for v in found["versions"][:2]] == [["task_count"], ["env"]]
    assert found["versions"][0]["current"] and not found["versions"][1]["current"]


def test_revert_runs_an_old_file_as_a_new_version():
    cell, _ = put(cell_running(), {**FILE, "command": ["sleep", "2000"]})
    d = Draft(cell, NOW)
    body = jobhistory.revert_job(d, "alice/web", {"version": 0})
    assert body["version"] == 2 and body["changed"] == ["command"]
    assert d.jobs["alice/web"].spec.command == ["sleep", "1000"]
    with pytest.raises(ApiError) as err:
        jobhistory.revert_job(Draft(cell, NOW), "alice/web", {"version": 9})
    assert err.value.status == 404 and err.value.field == "version"


@pytest.mark.parametrize(("file", "field"), [
    ({**FILE, "max_unavailable": 0}, "max_unavailable"),
    ({**FILE, "name": "other"}, "name"),
    ({**FILE, "user": "bob"}, "user"),
    ({**FILE, "commandd": ["x"]}, "commandd"),
])  # fmt: skip
def test_a_bad_file_is_a_422_naming_the_field(file, field):
    with pytest.raises(ApiError) as err:
        jobhistory.put_job(Draft(cell_running(), NOW), "alice/web", file)
    assert err.value.status == 422 and err.value.field == field


def test_versions_kept_are_bounded():
    info = versions.first(parse_job(FILE), 0.0)
    for v in range(1, versions.KEPT + 5):
        info = versions.recorded(info, parse_job({**FILE, "task_count": v}), float(v), v)
    assert len(info.versions) == versions.KEPT and info.versions[-1][0] == versions.KEPT + 4
    assert versions.find(info, 0) is None and versions.find(info, versions.KEPT + 4)["task_count"] == versions.KEPT + 4


def test_a_new_template_is_noticed_once_and_a_new_term_notices_nothing():
    cell = cell_running()
    seen: dict[str, str] = {}
    assert rollout.new_versions(cell.state, seen) == []  # first sight: nothing to forget
    changed, _ = put(cell, {**FILE, "command": ["sleep", "2"]})
    assert rollout.new_versions(changed.state, seen) == ["alice/web"]
    assert rollout.new_versions(changed.state, seen) == []
    in_place, _ = put(changed, {**FILE, "command": ["sleep", "2"], "task_count": 2})
    assert rollout.new_versions(in_place.state, seen) == []  # the count changes no program


def test_crash_memory_forgets_a_job():
    from reference.scheduler.pairing import CrashMemory

    memory = CrashMemory(clock=lambda: 0.0)
    for job, index in (("alice/web", 0), ("alice/web", 1), ("bob/db", 0)):
        memory.record(job, index, "m0")
    memory.forget("alice/web")
    assert memory.counts("alice/web", 0) == {} and memory.counts("bob/db", 0) == {"m0": 1}


AUTOSCALED = {**FILE, "autoscale": {"min": 2, "max": 6, "metric": "cpu", "target": 70}}


def resized(cell: Cell, count: int) -> Cell:
    """`cell` after the autoscaler (or a PATCH) set alice/web's count: the path both take."""
    d = Draft(cell, NOW)
    update_job(d, "alice/web", {"task_count": count})
    return replace(cell, state=d.state, jobs=dict(d.jobs.data), tasks={**cell.tasks, **d.tasks.data})


def test_a_put_that_declares_the_count_again_keeps_the_autoscalers():
    cell = resized(cell_running(AUTOSCALED), 5)
    same = jobhistory.put_job(Draft(cell, NOW), "alice/web", dict(AUTOSCALED))
    assert same["unchanged"] and same["task_count_kept"] == 5  # the file as sent before: nothing to do
    cell, body = put(cell, {**AUTOSCALED, "env": {"V": "2"}})
    assert body["changed"] == ["env"] and body["task_count_kept"] == 5 and body["plan"]["removed"] == []
    assert cell.state.jobs["alice/web"].task_count == 5 and body["file"]["task_count"] == 5
    cell, body = put(cell, {**AUTOSCALED, "env": {"V": "3"}})  # declared 3 still: kept again
    assert cell.state.jobs["alice/web"].task_count == 5


def test_a_put_that_changes_the_count_sets_it():
    cell, body = put(resized(cell_running(AUTOSCALED), 5), {**AUTOSCALED, "task_count": 4})
    assert body["task_count_kept"] is None and cell.state.jobs["alice/web"].task_count == 4
    cell, body = put(resized(cell, 6), {**AUTOSCALED, "task_count": 4, "env": {"V": "2"}})
    assert body["task_count_kept"] == 6  # 4 is now what the file declares: the autoscaler's 6 stands


def test_a_kept_count_stays_within_the_new_bounds_and_only_for_autoscaled_jobs():
    cell = resized(cell_running(AUTOSCALED), 5)
    _, body = put(cell, {**AUTOSCALED, "autoscale": {**AUTOSCALED["autoscale"], "max": 4}})
    assert body["task_count_kept"] == 4 and body["file"]["task_count"] == 4
    cell, body = put(cell, {**FILE})  # autoscale taken away: the file's count is the job's
    assert body["task_count_kept"] is None and cell.state.jobs["alice/web"].task_count == 3
    plain = resized(cell_running(), 5)
    plain, body = put(plain, {**FILE, "env": {"V": "2"}})  # never autoscaled: a PUT sets its count
    assert body["task_count_kept"] is None and plain.state.jobs["alice/web"].task_count == 3


def test_the_declared_count_survives_the_store():
    from reference.master.codec import decode_job, encode_job

    cell = resized(cell_running(AUTOSCALED), 5)
    job, info = decode_job(encode_job(cell.state.jobs["alice/web"], cell.jobs["alice/web"]))
    assert info.declared_count == 3 and job.task_count == 5


def test_a_dry_run_says_where_each_replacement_would_go_and_writes_nothing():
    cell = cell_running()
    d = Draft(cell, NOW)
    body = jobhistory.planned(d, "alice/web", {**FILE, "command": ["sleep", "2000"], "task_count": 4})
    assert cell.state.jobs["alice/web"].version == 0  # the cell itself is untouched
    went = {p["index"]: p for p in body["placements"]}
    assert sorted(went) == [0, 1, 2, 3]
    assert [went[i]["was_on"] for i in range(4)] == ["m0", "m1", "m0", None]  # 3 is added: it replaces nothing
    assert all(p["machine"] in ("m0", "m1") and p["reason"] == "" for p in went.values())
    assert went[0]["task"] == "alice/web/0#1" and went[3]["task"] == "alice/web/3#0"


def test_a_dry_run_says_why_a_replacement_would_wait():
    # 3000m each: the first two replacements take the room their old tasks leave on m0 and m1;
    # the third finds 1000m free on either machine, so it would wait.
    body = jobhistory.planned(Draft(cell_running(), NOW), "alice/web", {**FILE, "request": {"cpu": "3000m"}})
    went = {p["index"]: p for p in body["placements"]}
    assert sorted(p["machine"] for p in went.values() if p["machine"]) == ["m0", "m1"]
    waiting = [p for p in went.values() if p["machine"] is None]
    assert len(waiting) == 1 and "cpu" in waiting[0]["reason"]


def test_an_unchanged_file_has_nothing_to_place():
    body = jobhistory.planned(Draft(cell_running(), NOW), "alice/web", dict(FILE))
    assert body["unchanged"] and body.get("placements") is None


def test_the_dry_run_route_answers_placements_in_its_declared_shape():
    import warnings

    from reference.master.access import AccessConfig, hash_token
    from reference.master.api import make_app
    from reference.master.leader import LeaderConfig
    from reference.master.replica import Replica

    with warnings.catch_warnings():  # starlette's TestClient warns about its httpx
        warnings.simplefilter("ignore")
        from fastapi.testclient import TestClient

    # Never started: its cache holds an empty cell, so the new job's tasks would all wait.
    replica = Replica(name="m0", url="http://127.0.0.1:1", etcd=["http://127.0.0.1:9"],
                      config=LeaderConfig(cell_name="c", master_name="m0"))  # fmt: skip
    app = make_app(replica, AccessConfig(admin_hash=hash_token("mbt_plan-test")))
    with TestClient(app, headers={"Authorization": "Bearer mbt_plan-test"}) as client:
        r = client.put("/v1/jobs/alice/web", params={"dry_run": "true"}, json=FILE)
    assert r.status_code == 200, r.text
    answer = jobhistory.JobChange.model_validate(r.json())
    assert answer.dry_run and answer.created and [p.index for p in answer.placements or []] == [0, 1, 2]
    assert all(p.machine is None and p.reason.startswith("0 of 0 machines fit") for p in answer.placements or [])


def test_a_replacement_restarted_after_its_machine_was_lost_counts_up_once_it_runs():
    # Its first incarnation was lost with its machine (a loss counts as a failure for the
    # restart back-off, failures 1), and the new one has run steadily since, with no exit of
    # its own: the version has not failed, and the next stale task is replaced.
    cell, _ = put(cell_running(), {**FILE, "env": {"V": "2"}})
    d = Draft(cell, NOW)
    rollout.roll(d, set(d.state.tasks), lambda n: n)
    new = TaskId("alice/web", 0, 1)
    placed = schedule(d.state, new, "m0")
    after_loss = replace(UP, failures=1, restarts=0, last_exit="")
    view = replace(cell, state=placed, tasks={**cell.tasks, new: after_loss})
    r = decide(view)
    assert r.state == "rolling" and r.failing == () and 0 not in r.down, r
    d = Draft(view, NOW)
    assert rollout.roll(d, set(d.state.tasks), lambda n: n) == 1
    # The same task with an exit of its own, restarted 10 s ago, crash-loops: not up, stopped.
    crashed = replace(after_loss, last_exit="exit code 3")
    r = decide(replace(view, tasks={**cell.tasks, new: crashed}))
    assert r.state == "stopped" and 0 in r.down, r


def test_a_replacement_that_crashes_within_min_ready_stops_the_rollout_at_one_task():
    # Sigma's cell: a job of 2 tasks whose new command exits 3. Its first replacement goes
    # through these borglet reports, and none of them lets the second task be replaced.
    cell, _ = put(cell_running(), {**FILE, "task_count": 2, "command": ["python3", "-c", "raise SystemExit(3)"]})
    d = Draft(cell, NOW)
    assert rollout.roll(d, set(d.state.tasks), lambda n: n) == 1
    new = TaskId("alice/web", 0, 1)
    placed = schedule(d.state, new, "m0")
    first = replace(UP, pid=43, started_at=NOW - 0.03)  # its first process, 30 ms old
    backing_off = replace(first, borglet_state="STARTING", pid=0, reason="exit 3", last_exit="exit 3", started_at=NOW - 0.2)
    restarted = replace(first, restarts=1, last_exit="exit 3", started_at=NOW - 1.5)  # restarted in place
    for info, state in ((first, "rolling"), (backing_off, "rolling"), (restarted, "stopped")):
        view = replace(cell, state=placed, tasks={**cell.tasks, new: info})
        r = decide(view)
        assert r.state == state and r.stale == (1,) and r.down == (0,) and r.replace == (), (info, r)
        d = Draft(view, NOW)
        assert rollout.roll(d, set(d.state.tasks), lambda n: n) == 0, info
    assert r.reason.startswith("task 0 of version 1 fails (exit 3)"), r.reason
    # The first process's report with its start read 0.97 s early (psutil's create_time on a
    # host booted 0.97 s past a second): it looks 1 s old, up, and the second task is replaced.
    # A report of RUNNING made after the process ended (its exit seen late) is the same fact.
    # The rollout trusts its borglet's report: the start is read from the kernel
    # (borglet/processes.start_time) and an exit wakes the borglet at once (SIGCHLD).
    early = replace(first, started_at=first.started_at - 0.97)
    r = decide(replace(cell, state=placed, tasks={**cell.tasks, new: early}))
    assert r.down == () and r.replace == (TaskId("alice/web", 1),), r


def test_the_leader_counts_a_replacement_up_on_its_borglets_word_not_its_own_clock():
    """The leader's roll asks its borglets (`ready`, their reports' "ready"): a replacement
    whose reported start is 2 s old by the leader's clock is still down while its borglet has
    not said it ran MIN_READY_S (its exit not reported yet, or the borglet's clock behind), and
    one whose start looks 0.2 s old is up once its borglet says so (the leader's clock ahead)."""
    cell, _ = put(cell_running(), {**FILE, "env": {"V": "2"}})
    d = Draft(cell, NOW)
    assert rollout.roll(d, set(d.state.tasks), lambda n: n) == 1
    new = TaskId("alice/web", 0, 1)
    placed = schedule(d.state, new, "m1")
    said: set[tuple[str, str]] = set()
    new_id = borglet_task_id(new, UP)

    def ready(machine: str | None, borglet_id: str) -> bool | None:
        if borglet_id != new_id:
            return True  # the old tasks: up by their borglets' word
        return (machine, borglet_id) in said if machine is not None else None

    for info, word, more in (
        (replace(UP, started_at=NOW - 2), set(), 0),  # 2 s by the leader's clock; its borglet: not yet
        (replace(UP, started_at=NOW - 2), {("m0", new_id)}, 0),  # a word of another machine
        (replace(UP, started_at=NOW - 0.2), {("m1", new_id)}, 1),  # its borglet says it ran 1 s
    ):
        said.clear()
        said.update(word)
        view = replace(cell, state=placed, tasks={**cell.tasks, new: info})
        d = Draft(view, NOW)
        assert rollout.roll(d, set(d.state.tasks), lambda n: n, ready) == more, (info, word)
        found = rollout.decide(view.state, "alice/web", view.task_info, False, NOW, ready)
        assert (found.down == (0,)) is (more == 0), found
    # No word of the machine yet (a new leader's first moments): the estimate, both ways.
    view = replace(cell, state=placed, tasks={**cell.tasks, new: replace(UP, started_at=NOW - 2)})
    assert rollout.decide(view.state, "alice/web", view.task_info, False, NOW, lambda m, b: None).down == ()
    view = replace(cell, state=placed, tasks={**cell.tasks, new: replace(UP, started_at=NOW - 0.2)})
    assert rollout.decide(view.state, "alice/web", view.task_info, False, NOW, lambda m, b: None).down == (0,)
