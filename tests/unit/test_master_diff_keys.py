"""The writer's diff looks only at the keys a Draft names: over random steps and info writes
it must equal a diff that compares every entry of the cell, and `changed` must agree."""

from __future__ import annotations

import random
from dataclasses import replace

import pytest

from reference.jobspec import parse_job
from reference.master import codec
from reference.master.cell import Cell, Draft, JobInfo, MachineInfo, TaskInfo
from reference.master.writer import diff_ops
from reference.store import ops
from spec.actions import machine_add, schedule, submit
from spec.fmap import FMap
from spec.model import CellState, Machine, Resources, TaskId, TaskState
from tests.unit.master_cells import M2, SPEC, T0, placed_cell

KEYS = codec.Keys("c1")


def full_diff(base: Cell, draft: Draft) -> list[ops.Op]:
    """Every entry compared: the diff before the writer learnt which keys changed."""
    new, old = draft.state, base.state
    puts: list[ops.Op] = []
    deletes: list[ops.Op] = []
    for tid, task in new.tasks.items():
        info = draft.tasks.get(tid)
        if old.tasks.get(tid) is not task or base.tasks.get(tid) is not info:
            puts.append(ops.put(KEYS.task(tid), codec.encode_task(task, info or TaskInfo())))
    deletes += [ops.delete(KEYS.task(t)) for t in old.tasks if t not in new.tasks]
    for key, job in new.jobs.items():
        if old.jobs.get(key) is not job or base.jobs.get(key) is not draft.jobs.get(key):
            puts.append(ops.put(KEYS.job(key), codec.encode_job(job, draft.jobs[key])))
    deletes += [ops.delete(KEYS.job(k)) for k in old.jobs if k not in new.jobs]
    for name, m in new.machines.items():
        info = draft.machines.get(name)
        if old.machines.get(name) is not m or base.machines.get(name) is not info:
            puts.append(ops.put(KEYS.machine(name), codec.encode_machine(m, info or MachineInfo())))
    deletes += [ops.delete(KEYS.machine(n)) for n in old.machines if n not in new.machines]
    return puts + deletes


def spec(name: str, count: int):
    return parse_job({"name": name, "user": "u", "task_count": count, "request": {"cpu": "100m"},
                      "command": ["sleep", "1"], "restart_policy": "on_failure"})  # fmt: skip


def start_cell(rng: random.Random) -> Cell:
    state = CellState()
    machines = {}
    for i in range(3):
        state = machine_add(state, Machine(f"m{i}", Resources.of(cpu=1000, ram=2**30)))
        machines[f"m{i}"] = MachineInfo(f"http://127.0.0.1:{9000 + i}")
    jobs = {}
    for j in range(4):
        s = spec(f"j{j}", rng.randint(1, 3))
        state = submit(state, s.to_spec_job())
        jobs[s.to_spec_job().key] = JobInfo(s)
    for tid in list(state.tasks):
        if rng.random() < 0.6:
            state = schedule(state, tid, f"m{rng.randrange(3)}") or state
    return Cell(state, machines, jobs, {tid: TaskInfo() for tid in state.tasks}, 7)


def random_change(d: Draft, rng: random.Random) -> None:
    tids = list(d.state.tasks)
    kind = rng.randrange(9)
    tid = rng.choice(tids) if tids else TaskId("u/j0", 0)
    if kind == 0:
        d.step("schedule", tid, f"m{rng.randrange(3)}")
    elif kind == 1:
        d.step(rng.choice(["finish", "fail", "lost", "kill"]), tid)
    elif kind == 2:
        d.step("restart", tid)
    elif kind == 3 and d.state.jobs:
        key = rng.choice(list(d.state.jobs))
        d.step("kill_job", key)
        d.jobs.pop(key, None)
    elif kind == 4:
        s = spec(f"n{rng.randrange(1000)}", rng.randint(0, 2))
        job = s.to_spec_job()
        if job.key not in d.state.jobs:
            d.jobs[job.key] = JobInfo(s)
            d.step("submit", job)
    elif kind == 5:
        d.set_task_info(tid, replace(d.task_info(tid), port=rng.randrange(9000, 9100)))
    elif kind == 6:
        name = f"m{rng.randrange(3)}"
        d.machines[name] = replace(d.machine_info(name), usage=(("cpu", rng.randrange(100)),))
    elif kind == 7:
        d.step(rng.choice(["machine_down", "machine_up"]), f"m{rng.randrange(3)}")
    elif kind == 8 and d.state.jobs:
        key = rng.choice(list(d.state.jobs))
        d.step("update", key, rng.randint(0, 3), None)


def test_diff_over_named_keys_equals_the_full_diff() -> None:
    for seed in range(300):
        rng = random.Random(seed)
        base = start_cell(rng)
        d = Draft(base, 1.0)
        for _ in range(rng.randint(0, 8)):
            random_change(d, rng)
        written: list = []
        fast, slow = diff_ops(base, d, KEYS, written), full_diff(base, d)
        assert sorted(map(repr, fast)) == sorted(map(repr, slow)), seed
        # What the writer hands the watch cache as each record's objects is what a reader of
        # the record decodes, to the type of every field (repr): the leader's cache takes them
        # instead of decoding, and must hold what the followers' caches hold.
        puts = [ops.unb64(op["request_put"]["key"]) for op in fast if "request_put" in op]
        assert [k for k, _, _ in written] == [k for k in puts if k.startswith(KEYS.tasks.encode())], seed
        for key, value, objects in written:
            assert repr(codec.decode_task(value)) == repr(objects), (seed, key)
        assert d.changed == bool(slow), seed
        # Task records are written before job records, and deletes come last.
        kinds = ["t" if "/tasks/" in repr(op) and "request_put" in op else
                 ("d" if "request_delete_range" in op else "o") for op in fast]  # fmt: skip
        assert kinds == sorted(kinds, key="tod".index), seed


def test_fmap_names_what_one_step_changed() -> None:
    a = FMap({1: "a", 2: "b"})
    b = a.set(3, "c")
    assert b.changed_since(a) == (3,) and a.changed_since(a) == ()
    assert b.update({1: "x"}).changed_since(b) == (1,)
    assert b.remove(2).changed_since(b) == (2,)
    assert b.set(4, "d").changed_since(a) is None  # two steps away: unknown
    assert FMap(dict(b.items())).changed_since(b) is None


def test_draft_tracks_dead_tasks_of_a_killed_job() -> None:
    rng = random.Random(1)
    base = start_cell(rng)
    d = Draft(base, 1.0)
    key = next(iter(base.state.jobs))
    d.step("kill_job", key)
    d.jobs.pop(key)
    assert {t for t in d.task_keys} == {t.id for t in base.state.tasks_of(key)}
    assert all(d.state.tasks[t].state is TaskState.DEAD for t in d.task_keys)
    assert key in d.job_keys


def test_tracked_never_copies_its_base() -> None:
    from reference.master.cell import Tracked

    base = {1: "a", 2: "b"}
    t = Tracked(base)
    assert t.data is base and t[1] == "a" and t.get(3) is None and 2 in t and len(t) == 2
    assert t.pop(3, None) is None and 3 in t.written and t.data is base  # nothing to remove
    t[3] = "c"
    assert base == {1: "a", 2: "b"} and t == {1: "a", 2: "b", 3: "c"} and t._base is base
    del t[1]
    t.setdefault(4, "d")
    assert t.written == {1, 3, 4} and dict(t) == {2: "b", 3: "c", 4: "d"} and t._base is base
    chained = Tracked(t)  # a draft made from the last draft of a group: the same base, no copy
    assert chained._base is base and dict(chained) == dict(t) and chained.written == set()
    chained.pop(2)
    assert 2 in t and 2 not in chained and chained.written == {2} and base == {1: "a", 2: "b"}


def test_tracked_reads_and_iterates_as_a_copied_dict_changed_the_same_way() -> None:
    # The model: a dict copied from the base at each draft and changed by the same writes.
    # Random writes, removals (of present and absent keys), pops, set-agains after removal and
    # drafts chained on drafts: every read, the length and the iteration order agree, and the
    # base is never changed.
    import random

    from reference.master.cell import Tracked

    for seed in range(40):
        rng = random.Random(seed)
        base = {k: f"b{k}" for k in rng.sample(range(40), 25)}
        frozen = dict(base)
        tracked: Tracked = Tracked(base)
        model = dict(base)
        for step in range(300):
            if rng.random() < 0.05:
                tracked, model = Tracked(tracked), dict(model)  # the next draft of a group
            key, op = rng.randrange(50), rng.random()
            if op < 0.45:
                tracked[key] = model[key] = f"v{step}"
            elif op < 0.6:
                if key in model:
                    del tracked[key]
                    del model[key]
                else:
                    with pytest.raises(KeyError):
                        del tracked[key]
            elif op < 0.75:
                assert tracked.pop(key, None) == model.pop(key, None)
            elif op < 0.8:
                assert tracked.setdefault(key, "d") == model.setdefault(key, "d")
            probe = rng.randrange(50)
            assert tracked.get(probe) == model.get(probe) and (probe in tracked) == (probe in model)
            assert len(tracked) == len(model)
            if step % 10 == 0:
                assert list(tracked) == list(model) and list(tracked.items()) == list(model.items())
        assert list(tracked) == list(model) and dict(tracked.data) == model and tracked == model
        assert base == frozen


# --- Draft.changed: one row per kind of change ----------------------------------------------------


def _state_step(d: Draft) -> None:
    d.step("machine_add", M2)


def _quota(d: Draft) -> None:
    d.quotas[("alice", "prod")] = Resources.of(cpu=1)  # type: ignore[index]  # any key


def _new_machine(d: Draft) -> None:
    d.machines["m1"] = MachineInfo("http://127.0.0.1:2")


def _drop_machine(d: Draft) -> None:
    del d.machines["m1"]


def _new_job(d: Draft) -> None:
    d.jobs["alice/web"] = JobInfo(SPEC, submitted_at=9.0)


def _drop_job(d: Draft) -> None:
    del d.jobs["alice/web"]


def _new_task(d: Draft) -> None:
    d.tasks[T0] = replace(d.tasks[T0], port=1)


def _drop_task(d: Draft) -> None:
    del d.tasks[T0]


def _same_objects(d: Draft) -> None:
    d.machines["m1"] = d.base.machines["m1"]  # the very same object: not a change


@pytest.mark.parametrize(
    ("edit", "changed"),
    [
        (lambda d: None, False),
        (_same_objects, False),
        (_state_step, True),
        (_quota, True),
        (_new_machine, True),
        (_drop_machine, True),  # 0 machines != 1
        (_new_job, True),
        (_drop_job, True),  # 0 jobs != 1
        (_new_task, True),
        (_drop_task, True),  # 1 task != 2
    ],
)
def test_draft_changed(edit, changed):
    d = Draft(placed_cell(), 1.0)
    edit(d)
    assert d.changed is changed


def test_a_tracked_map_pops_a_missing_key_to_its_default_and_records_it():
    from reference.master.cell import Tracked

    t = Tracked({"a": 1})
    assert t.pop("x", 5) == 5 and t.written == {"x"}
    assert t.pop("a") == 1 and "a" not in t


def test_changed_keys_of_maps_made_apart_are_found_by_comparison():
    # Maps not made from one another by one step have no record of their change: their keys
    # are compared entry by entry (by identity), both ways.
    from reference.master.cell import changed_keys
    from spec.fmap import FMap

    one, two, three = object(), object(), object()
    before = FMap({"a": one, "b": two})
    assert changed_keys(before, before) == set()
    assert changed_keys(before, FMap({"a": one, "c": three})) == {"b", "c"}
    assert changed_keys(before, before.set("a", three)) == {"a"}
