"""`python -m bench.draftcost`: what a writer's group of changes costs, by the size of the cell.

The leader's writer runs each change of a group on a Draft of the cell the change before left
(master/writer.py). Here a group of `--changes` changes, each writing `--writes` task records
(a submit of a 100-task job writes 100, a shard's batch its machines' tasks), runs on a cell of
each size in `--tasks`; the figure is CPU ms per change, median of `--repeats` groups. Work per
change, not per cell: the figures should not grow with the cell.
"""

from __future__ import annotations

import argparse
import statistics
import time

from reference.master.cell import Cell, Draft, TaskInfo
from spec.model import TaskId


def cell_of(tasks: int) -> Cell:
    """A cell whose task records number `tasks` (the records alone: what a draft copies)."""
    return Cell(tasks={TaskId("bench/fill", i, 0): TaskInfo(port=i) for i in range(tasks)})


def group_cpu_s(base: Cell, changes: int, writes: int, first: int) -> float:
    """CPU seconds of one group: `changes` drafts chained as the writer chains them, each
    writing `writes` records of new task ids from `first` on."""
    began = time.thread_time()
    cell = base
    for c in range(changes):
        draft = Draft(cell, 0.0)
        for i in range(writes):
            draft.tasks[TaskId("bench/arrive", first + c * writes + i, 0)] = TaskInfo(port=i)
        cell = Cell(base.state, draft.machines, draft.jobs, draft.tasks, base.revision)  # type: ignore[arg-type]
    return time.thread_time() - began


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--tasks", default="1000,10000,100000", help="cell sizes, in task records")
    p.add_argument("--changes", type=int, default=8)
    p.add_argument("--writes", type=int, default=100)
    p.add_argument("--repeats", type=int, default=15)
    args = p.parse_args(argv)
    print(f"a group of {args.changes} changes, {args.writes} records written each; CPU ms per change, median of {args.repeats}")
    figures = {}
    for size in (int(s) for s in args.tasks.split(",")):
        base = cell_of(size)
        runs = [group_cpu_s(base, args.changes, args.writes, r * args.changes * args.writes) for r in range(args.repeats)]
        figures[size] = 1000 * statistics.median(runs) / args.changes
        print(f"{size:>9,} tasks: {figures[size]:8.3f} ms per change")
    small, large = min(figures), max(figures)
    print(f"largest / smallest cell: {figures[large] / figures[small]:.2f}x")


if __name__ == "__main__":
    main()
