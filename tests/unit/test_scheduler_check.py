"""`Feasibility.check` as a table: one machine, what runs on it, one class asking; the verdict
is the victims (a list, [] when it fits as it is) or the reason it is rejected where it is.

Each machine has 4000m of CPU and 8 GiB of RAM (and GPUs where a case says so); the
arithmetic of each case is in its comment, in the style of Kubernetes' Filter tables.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from reference.scheduler.cellview import CellView
from reference.scheduler.classes import class_key, make_class
from reference.scheduler.feasibility import DOWN, HELD_BACK, Feasibility, Rejection
from reference.scheduler.snapshot import PendingTask, RunningTask, Snapshot
from spec.model import Constraint, ConstraintOp, Machine, Resources, TaskId

GiB = 2**30
CPU, RAM = 0, 1  # the cell's first two dimensions, always
ZONE_X = Constraint("zone", ConstraintOp.EQ, ("x",))
RACK_R1_R2 = Constraint("rack", ConstraintOp.IN, ("r1", "r2"))


def run(name: str, prio: int, cpu: int, ram: int = 0, gpu: int = 0, reserve_cpu: int | None = None) -> RunningTask:
    reservation = None if reserve_cpu is None else Resources.of(cpu=reserve_cpu, ram=ram)
    return RunningTask(TaskId(f"r/{name}", 0), "m", prio, Resources.of(cpu=cpu, ram=ram, gpu=gpu), reservation=reservation)


@dataclass
class Case:
    name: str
    ask: dict[str, int]  # the class's request
    want: list[str] | Rejection  # victims' job names, or the rejection
    prio: int = 100
    running: tuple[RunningTask, ...] = ()
    constraints: tuple[Constraint, ...] = ()
    gpu: int = 0  # the machine's GPUs, milli
    attrs: dict[str, str] = field(default_factory=lambda: {"zone": "x", "rack": "r1"})
    up: bool = True
    schedulable: bool = True
    preempt: bool = True
    limit: int | None = None  # max_disruptions_per_job


CASES = [
    # 4000 - 1000 = 3000m free >= 2000m asked.
    Case("fits as it is", {"cpu": 2000}, [], running=(run("a", 100, 1000),)),
    Case("down", {"cpu": 100}, DOWN, up=False),
    # A drained machine takes nothing new: it reads as down to the scheduler.
    Case("drained", {"cpu": 100}, DOWN, schedulable=False),
    # zone=x holds; rack r3 is not in (r1, r2): the second constraint, numbered 1.
    Case("one constraint unmet", {"cpu": 100}, Rejection(unmet=(1,)), constraints=(ZONE_X, RACK_R1_R2),
         attrs={"zone": "x", "rack": "r3"}),  # fmt: skip
    # Neither holds; the 9000m asked is short too, but the constraints fail first.
    Case("constraints before resources", {"cpu": 9000}, Rejection(unmet=(0, 1)), constraints=(ZONE_X, RACK_R1_R2),
         attrs={"zone": "y"}),  # fmt: skip
    # 4000 - 3000 = 1000m free < 2000m; 8 - 1 = 7 GiB free >= 1 GiB.
    Case("cpu short", {"cpu": 2000, "ram": GiB}, Rejection(short=(CPU,)), running=(run("a", 100, 3000, GiB),)),
    # 1000m < 2000m and 8 - 6 = 2 GiB < 4 GiB: every short resource is named.
    Case("cpu and ram short", {"cpu": 2000, "ram": 4 * GiB}, Rejection(short=(CPU, RAM)),
         running=(run("a", 100, 3000, 6 * GiB),)),  # fmt: skip
    # Two GPUs with 600 milli used on each: 400 + 400 = 800 free, but no one GPU has 500.
    Case("a GPU share fits on one GPU only", {"cpu": 100, "gpu": 500}, Rejection(gpus=True), gpu=2000,
         running=(run("a", 100, 10, gpu=600), run("b", 100, 10, gpu=600))),  # fmt: skip
    # 300 milli used on one of two GPUs: 1 untouched GPU < the 2 whole ones asked.
    Case("whole GPUs are untouched ones", {"cpu": 100, "gpu": 2000}, Rejection(gpus=True), gpu=2000,
         running=(run("a", 100, 10, gpu=300),)),  # fmt: skip
    # 4000 - 3000 = 1000m free < 2000m; evicting be (priority 0 < 100): 1000 + 3000 = 4000m >= 2000m.
    Case("fits by preempting", {"cpu": 2000}, ["r/be"], running=(run("be", 0, 3000),)),
    Case("fits only by preempting, not preempting", {"cpu": 2000}, Rejection(short=(CPU,)),
         running=(run("be", 0, 3000),), preempt=False),  # fmt: skip
    # 1000m free; lo (priority 0) frees 1500: 2500m >= 2000m, so mid (priority 50) is spared.
    Case("the lowest victim that is enough", {"cpu": 2000}, ["r/lo"],
         running=(run("lo", 0, 1500), run("mid", 50, 1500))),  # fmt: skip
    # Prod (200) never preempts prod (250): 4000 - 3000 = 1000m is all it may use.
    Case("prod never preempts prod", {"cpu": 2000}, Rejection(short=(CPU,)), prio=250, running=(run("p", 200, 3000),)),
    # 1000m free + 1000m of be (priority 0) = 2000m < 3000m: short even counting what it could evict.
    Case("short counting preemptible tasks", {"cpu": 3000}, Rejection(short=(CPU,)),
         running=(run("be", 0, 1000), run("p", 200, 2000))),  # fmt: skip
    # be would free enough, but its job may lose no more tasks (limit 0): nothing is short.
    Case("victims held back", {"cpu": 2000}, HELD_BACK, running=(run("be", 0, 3000),), limit=0),
    # Prod p requests 3000m and reserves 1000m: 2000m of slack. Batch: 1000 + 2000 = 3000m >= 2000m.
    Case("batch uses reclaimed slack", {"cpu": 2000}, [], running=(run("p", 200, 3000, reserve_cpu=1000),)),
    # Prod may not use slack: 4000 - 3000 = 1000m < 2000m, and prod never preempts prod.
    Case("prod does not use slack", {"cpu": 2000}, Rejection(short=(CPU,)), prio=200,
         running=(run("p", 200, 3000, reserve_cpu=1000),)),  # fmt: skip
]


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_check(case: Case) -> None:
    cap = Resources.of(cpu=4000, ram=8 * GiB, gpu=case.gpu)
    m = Machine("m", cap, tuple(sorted(case.attrs.items())), up=case.up, schedulable=case.schedulable)
    task = PendingTask(TaskId("u/new", 0), "u", case.prio, Resources.of(case.ask), case.constraints)
    cell = CellView(Snapshot((m,), case.running, (task,)), 0)
    cls = make_class(task, cell, class_key(task))
    got = Feasibility(cell, True, case.limit, {}).check(cls, 0, case.preempt)
    if isinstance(case.want, Rejection):
        assert got == case.want
    else:
        assert isinstance(got, list) and [v.job for v in got] == case.want
