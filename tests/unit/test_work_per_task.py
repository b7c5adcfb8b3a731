"""The leader's work per task filled is the same in a cell of 100 machines as in one of
5,000 (issue 43: work per change, not per cell).

One process, no sockets: the watch cache is fed the records a fill writes, the poller decides
and sends the syncs through a link whose borglets answer at once, the shard reports what they
run, and a listing of the job is read after each commit. The same 300 tasks land on the same
60 machines in both cells; the bigger cell only has more idle machines, each running one task
of another job. Every kind of work the leader counts (`reference.master.work`) and the bytes
its syncs carry, per task filled, must be equal within 20% across the two sizes: a walk of
the whole cell on a per-event path makes its count grow fifty-fold.
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Any

from reference import fastjson
from reference.jobspec import parse_job
from reference.master import codec, views, work
from reference.master.cache import WatchCache
from reference.master.cell import JobInfo, MachineInfo, TaskInfo, borglet_task_id
from reference.master.poller import Poller
from reference.master.reclaimer import Reclaimer
from spec.model import Job, Machine, Resources, Task, TaskId, TaskState
from tests.unit.fakestore import Store

KEYS = codec.Keys("c1")
REQ = Resources.of(cpu=100, ram=100)
TASKS, BATCH, TARGETS = 300, 20, 60  # 300 tasks, 20 per commit, on machines m0..m59


def _spec(name: str, count: int) -> Any:
    return parse_job({"name": name, "user": "u", "task_count": count, "request": {"cpu": "100m"},
                      "command": ["sleep", "100"]})  # fmt: skip


class _Borglets:
    """Every machine's borglet: applies a sync (whole or delta) and reports what it runs."""

    def __init__(self) -> None:
        self.running: dict[str, dict[str, dict[str, Any]]] = {}
        self.bytes_sent = 0
        self.lingering: set[str] = set()  # processes whose kill takes its time: they stay running
        self.fence: dict[str, int] = {}  # machine -> the seq of the last sync it applied

    def owner(self, machine: str) -> str:
        return "r0"

    def report(self, machine: str) -> dict[str, Any]:
        return {
            "tasks": [{"task_id": t, "state": "RUNNING", "port": 1, "started_at": 1.0} for t in self.running[machine]],
            "fence": {"epoch": 1, "seq": self.fence.get(machine, 0)},
        }

    def relay(self, owner: str, items: list[dict[str, Any]]) -> list[dict[str, Any]]:
        out = []
        for item in items:
            self.bytes_sent += len(fastjson.dumps(item))
            body, machine = item["body"], item["machine"]
            mine = self.running.setdefault(machine, {})
            stay = {t: d for t, d in mine.items() if t in self.lingering}
            if "delta" in body:
                for tid in body["delta"]["remove"]:
                    mine.pop(tid, None)
                mine.update((d["task_id"], d) for d in body["delta"]["add"])
            else:
                self.running[machine] = mine = {d["task_id"]: d for d in body["tasks"]}
            mine.update(stay)
            self.fence[machine] = body["seq"]
            # As a shard answers: the fence alone; the state comes in the shard's report.
            out.append({"machine": machine, "status": 200, "body": {"fence": {"epoch": 1, "seq": body["seq"]}}})
        return out


class _Writer:
    """Takes the changes answers make; the records they write are fed by the test."""

    def submit(self, change: Any, done: Any) -> None:
        done(type("Done", (), {"error": None})())

    def mutate(self, change: Any) -> None:
        pass


class _Inline:
    def submit(self, fn: Any, *args: Any) -> None:
        fn(*args)

    def shutdown(self, **kwargs: Any) -> None:
        pass


def _fill(machines: int) -> dict[str, float]:
    """Fill TASKS tasks into a cell of `machines` machines; the leader's work per task."""
    store, borglets, now = Store(), _Borglets(), [100.0]
    records: list[tuple[str, bytes]] = []
    bg = Job("u", "bg", 100, machines, REQ)
    records.append((KEYS.job(bg.key), codec.encode_job(bg, JobInfo(_spec("bg", machines)))))
    for i in range(machines):
        name = f"m{i}"
        m = Machine(name, Resources.of(cpu=64000, ram=1 << 20))
        records.append((KEYS.machine(name), codec.encode_machine(m, MachineInfo(address=f"http://{name}"))))
        t = Task(TaskId(bg.key, i), TaskState.RUNNING, name, 100, REQ)
        records.append((KEYS.task(t.id), codec.encode_task(t, TaskInfo(seen=True, borglet_state="RUNNING", port=1))))
        borglets.running[name] = {borglet_task_id(t.id, TaskInfo()): {}}
    for key, value in records:
        store.kv[key.encode()] = value
    cache = WatchCache(store, KEYS)  # type: ignore[arg-type]
    cache._reload()
    store.cache = cache
    poller = Poller(cache, _Writer(), cell_name="c1", master_name="leader", epoch=1, link=borglets,  # type: ignore[arg-type]
                    clock=lambda: now[0])  # fmt: skip
    poller._pool = _Inline()  # type: ignore[assignment]

    def report(names: list[str]) -> None:
        poller.accept({"shard": "r0", "reports": {n: {"version": 1, "report": borglets.report(n)} for n in names}})

    def turn() -> None:
        now[0] += 0.05
        poller._rebuild_after = -math.inf  # pacing is a matter of time; this counts work
        poller._turn()

    # The reclaimer's ticks: one after each commit, none of them its periodic walk of every task.
    reclaimer = Reclaimer(cache, _Writer(), lambda: poller.usage, clock=lambda: now[0] * 100,  # type: ignore[arg-type]
                          moved=poller.take_usage_moved, full_walk_every=10**6)  # fmt: skip

    report([f"m{i}" for i in range(machines)])
    turn()  # the cell as it stands is synced,
    turn()  # and its answers looked at: the fill starts from here
    reclaimer.tick()  # its first tick walks every task: nothing is known yet
    work.counts.clear()
    borglets.bytes_sent = 0

    web = Job("u", "web", 100, TASKS, REQ)
    store.put([(KEYS.job(web.key), codec.encode_job(web, JobInfo(_spec("web", TASKS))))])
    for start in range(0, TASKS, BATCH):
        placed = [Task(TaskId(web.key, i), TaskState.RUNNING, f"m{i % TARGETS}", 100, REQ)
                  for i in range(start, start + BATCH)]  # fmt: skip
        store.put([(KEYS.task(t.id), codec.encode_task(t, TaskInfo(placement=1))) for t in placed])
        turn()  # the placements go out
        names = sorted({str(t.machine) for t in placed})
        report(names)  # the shard's report of what now runs there
        store.put([(KEYS.task(t.id), codec.encode_task(t, TaskInfo(placement=1, seen=True, borglet_state="RUNNING",
                                                                    port=1, started_at=1.0))) for t in placed])  # fmt: skip
        turn()
        reclaimer.tick()
        assert len(views.job_tasks(cache.cell(), web.key)) == start + BATCH  # a listing of the job
    cell = cache.cell()
    assert all(borglet_task_id(t.id, cell.task_info(t.id)) in borglets.running[str(t.machine)]
               for t in views.job_tasks(cell, web.key))  # fmt: skip
    out = {kind: n / TASKS for kind, n in work.counts.items()}
    out["bytes_sent"] = borglets.bytes_sent / TASKS
    return out


def test_the_leaders_work_per_task_does_not_grow_with_the_cell() -> None:
    small, big = _fill(100), _fill(5000)
    print({k: (round(small.get(k, 0), 2), round(big.get(k, 0), 2)) for k in sorted({*small, *big})})
    assert small["desired_entries"] > 0 and small["bytes_sent"] > 0 and small["records_decoded"] >= 2
    grown = {
        kind: (small.get(kind, 0.0), big.get(kind, 0.0))
        for kind in sorted({*small, *big} - {"full_rebuilds", "reservation_full_walks"})
        if abs(big.get(kind, 0.0) - small.get(kind, 0.0)) > 0.2 * max(small.get(kind, 0.0), big.get(kind, 0.0))
    }
    assert not grown, f"work per task, 100 machines vs 5,000: {grown}"
    # The safety net (a rebuild from the whole cell) does not run on the fill's path.
    assert big.get("full_rebuilds", 0) == 0
    # The reclaimer looked at the tasks each commit changed, never walking every task.
    assert small["reservation_checks"] > 0 and "reservation_full_walks" not in big


def test_a_new_incarnation_waits_for_the_old_process_and_starts_once_it_is_gone() -> None:
    """The hold-back decided from the changed keys and the index of where each task index has
    a process: the new incarnation of web/0 on m1 is held while m0 still reports the old one,
    and sent once m0's report no longer shows it (reports.hold_back's rule, kept per change)."""
    store, borglets, now = Store(), _Borglets(), [100.0]
    web = Job("u", "web", 100, 1, REQ)
    store.kv[KEYS.job(web.key).encode()] = codec.encode_job(web, JobInfo(_spec("web", 1)))
    for name in ("m0", "m1", "m2"):
        m = Machine(name, Resources.of(cpu=64000, ram=1 << 20))
        store.kv[KEYS.machine(name).encode()] = codec.encode_machine(m, MachineInfo(address=f"http://{name}"))
        borglets.running[name] = {}
    old = Task(TaskId(web.key, 0, 0), TaskState.RUNNING, "m0", 100, REQ)
    seen = TaskInfo(placement=1, seen=True, borglet_state="RUNNING", port=1)
    store.kv[KEYS.task(old.id).encode()] = codec.encode_task(old, seen)
    old_id = borglet_task_id(old.id, seen)
    borglets.running["m0"][old_id] = {}
    cache = WatchCache(store, KEYS)  # type: ignore[arg-type]
    cache._reload()
    store.cache = cache
    poller = Poller(cache, _Writer(), cell_name="c1", master_name="leader", epoch=1, link=borglets,  # type: ignore[arg-type]
                    clock=lambda: now[0])  # fmt: skip
    poller._pool = _Inline()  # type: ignore[assignment]

    def step() -> None:
        poller.accept({"shard": "r0", "reports": {n: {"version": 1, "report": borglets.report(n)} for n in borglets.running}})
        now[0] += 0.05
        poller._rebuild_after = -math.inf
        poller._turn()

    step()
    assert set(borglets.running["m0"]) == {old_id}
    # m0 is lost from under the task; its borglet has not killed the old process yet.
    borglets.lingering.add(old_id)
    new = Task(TaskId(web.key, 0, 1), TaskState.RUNNING, "m1", 100, REQ)
    store.put([(KEYS.task(old.id), codec.encode_task(replace(old, state=TaskState.DEAD, machine=None), seen)),
               (KEYS.task(new.id), codec.encode_task(new, TaskInfo(placement=1)))])  # fmt: skip
    new_id = borglet_task_id(new.id, TaskInfo(placement=1))
    for _ in range(3):
        step()
    assert new_id not in borglets.running["m1"]
    assert poller.holds[new_id].blocker == old_id and poller.holds[new_id].machine == "m0"
    borglets.lingering.clear()  # the old process is gone with m0's next sync (a blocker's
    for _ in range(6):  # comes every pollclock.HOLD_POLL_S), and the new one goes out after
        step()
    assert new_id in borglets.running["m1"] and not poller.holds


def test_the_index_of_where_each_task_index_runs_agrees_with_a_walk_of_every_report() -> None:
    """Poller._live, read from the index kept as reports and syncs change, gives what
    reports.live_by_index gives from every up machine's report and last sync (random steps)."""
    import random
    from types import SimpleNamespace

    from reference.master import reports

    rng = random.Random(7)
    poller = Poller(None, _Writer(), cell_name="c1", master_name="leader", epoch=1, link=_Borglets())  # type: ignore[arg-type]
    names = [f"m{i}" for i in range(6)]
    ids = [f"u/j{j}/{i}#{inc}@1" for j in range(2) for i in range(3) for inc in range(3)]
    states = ["QUEUED", "STARTING", "RUNNING", "FINISHED", "KILLED"]
    for _ in range(300):
        name = rng.choice(names)
        if rng.random() < 0.5:
            reply = {"tasks": [{"task_id": t, "state": rng.choice(states)} for t in rng.sample(ids, rng.randrange(4))]}
            poller._record_report(name, reply)
        else:
            with poller._lock:
                st = poller._machines.setdefault(name, SimpleNamespace(signature=frozenset()))  # type: ignore[arg-type]
                after = frozenset(rng.sample(ids, rng.randrange(3)))
                poller._sites_sent(name, st.signature, after)
                st.signature = after
        machines = {n: SimpleNamespace(up=rng.random() < 0.8) for n in names[:5]}  # m5 was removed
        departed = {"m5": {}} if rng.random() < 0.5 else {}
        keys = {(f"u/j{j}", i) for j in range(2) for i in range(3)}
        known = {n: reports.with_sent(poller._reported.get(n, {}), st.signature)
                 for n, st in poller._machines.items()}  # fmt: skip
        known.update({n: r for n, r in poller._reported.items() if n not in known})
        up = [n for n, m in machines.items() if m.up] + list(departed)
        with poller._lock:
            assert poller._live(keys, machines, departed) == reports.live_by_index(known, up)
    poller._pool.shutdown(wait=False)
