"""A scheduler process's pass over arriving tasks in a large cell: its view built afresh against
the view carried from the last pass (`reference/scheduler/carried.py`), in CPU seconds, with the
plans of both compared.

    python -m bench.scheduler.carried_pass --machines 10000 --tasks-per-machine 10 --passes 9

The cell is made through the spec's transitions (machines in 50 failure domains, jobs of 1,000
sleeping tasks spread over them); each pass plans one job of `--arrival` tasks, whose
placements are then committed one state at a time, each state followed as the process follows
the views it reads."""

from __future__ import annotations

import argparse
import statistics
import time

from reference.jobspec import parse_job
from reference.scheduler import SchedulerConfig
from reference.scheduler.adapter import plan_for
from reference.scheduler.carried import CarriedCell
from spec.actions import machine_add, schedule, submit
from spec.model import CellState, Job, Machine, Resources, TaskId, TaskState


def sleepers(name: str, count: int) -> Job:
    return parse_job({"name": name, "user": "scale", "priority": 100, "task_count": count,
                      "request": {"cpu": "1m", "ram": "1MiB"}, "command": ["/bin/sleep", "86400"],
                      "restart_policy": "never"}).to_spec_job()  # fmt: skip


def filled(machines: int, per_machine: int) -> CellState:
    state = CellState()
    for i in range(machines):
        state = machine_add(state, Machine(f"m{i:05d}", Resources.of(cpu=4000, ram=8 << 30), failure_domain=f"r{i % 50}")) or state
    k = 0
    for j in range(-(-machines * per_machine // 1000)):
        count = min(1000, machines * per_machine - k)
        state = submit(state, sleepers(f"fill{j}", count)) or state
        for i in range(count):
            state = schedule(state, TaskId(f"scale/fill{j}", i, 0), f"m{k % machines:05d}") or state
            k += 1
    return state


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--machines", type=int, default=10000)
    p.add_argument("--tasks-per-machine", type=int, default=10)
    p.add_argument("--arrival", type=int, default=100, help="tasks a pass plans")
    p.add_argument("--passes", type=int, default=9)
    args = p.parse_args(argv)
    state = filled(args.machines, args.tasks_per_machine)
    running = {tid for tid, t in state.tasks.items() if t.state is TaskState.RUNNING}
    carried = CarriedCell()
    carried.view(state, {})
    afresh_s, carried_s, same = [], [], 0
    for r in range(args.passes):
        state = submit(state, sleepers(f"arrive{r}", args.arrival)) or state
        carried.follow(state)
        pending = {TaskId(f"scale/arrive{r}", i, 0) for i in range(args.arrival)}
        t = time.process_time()
        plan = carried.plan(state, SchedulerConfig(), r, pending)
        carried_s.append(time.process_time() - t)
        t = time.process_time()
        fresh = plan_for(state, SchedulerConfig(), seed=r, pending_ids=pending, running_ids=running)
        afresh_s.append(time.process_time() - t)
        same += plan.placements == fresh.placements and plan.unschedulable == fresh.unschedulable
        for placement in plan.placements:
            state = schedule(state, placement.task, placement.machine) or state
            running.add(placement.task)
            carried.follow(state)
    a, c = statistics.median(afresh_s), statistics.median(carried_s)
    print(f"{args.machines} machines, {len(running)} running tasks, {args.passes} passes of {args.arrival} tasks; "
          f"CPU s a pass (median): view built afresh {a:.3f}, carried {c:.3f} ({a / c:.0f} times less); "
          f"the same plan in {same} of {args.passes}; views built {carried.built}, carried {carried.carried}, "
          f"rows redone {carried.rows_redone}")  # fmt: skip


if __name__ == "__main__":
    main()
