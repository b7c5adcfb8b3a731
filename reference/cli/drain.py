"""`minborg machine drain` and `machine uncordon`: maintenance of one machine within each job's budget (the admin's commands)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Annotated, Any
from urllib.parse import quote

import typer

from reference.cli.common import (
    EXIT_FAILED,
    JsonOpt,
    MasterOpt,
    StateDirOpt,
    client,
    emitted,
    examples,
    fail,
    handles_errors,
    output_of,
)

MachineArg = Annotated[str, typer.Argument(metavar="NAME", help="The machine, as `minborg machine list` names it.")]
POLL_S = 1.0


def progress_line(machine: dict[str, Any]) -> str:
    """'machine1: draining, 3 task(s) left' / 'machine1: drained, empty' from a machine's view."""
    drain = machine.get("drain") or {}
    left = drain.get("tasks_left", len(machine.get("tasks") or ()))
    name = machine.get("name", "?")
    if machine.get("schedulable", True):
        return f"{name}: schedulable"
    if not left:
        return f"{name}: drained, empty (remove it, or `minborg machine uncordon {name}`)"
    deadline = drain.get("deadline")
    due = f", the rest evicted in {max(deadline - time.time(), 0):.0f}s" if deadline else ""
    return f"{name}: draining, {left} task(s) left{due}"


def watch_drain(
    read: Callable[[], dict[str, Any]],
    say: Callable[[str], None],
    *,
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.monotonic,
    for_s: float | None = None,
) -> bool:
    """Print the drain's progress each time it moves until the machine is empty; False when
    `for_s` passed first (or the machine was uncordoned meanwhile)."""
    started, last = clock(), ""
    while True:
        machine = read()
        line = progress_line(machine)
        if line != last:
            say(line)
            last = line
        if machine.get("schedulable", True):
            return False
        if not (machine.get("drain") or {}).get("tasks_left"):
            return True
        if for_s is not None and clock() - started >= for_s:
            return False
        sleep(POLL_S)


def machine_of(cell: Any, name: str) -> dict[str, Any]:
    for m in cell.request("GET", "/v1/machines")["machines"]:
        if m.get("name") == name:
            return m
    raise fail(f"machine {name} is no longer in the cell")


def register(machine_app: typer.Typer) -> None:
    """Add `drain` and `uncordon` to `minborg machine`."""

    @machine_app.command("drain", epilog=examples(
        "minborg machine drain machine2",
        "minborg machine drain machine2 --deadline 600",
        "minborg machine drain machine2 --detach",
    ))  # fmt: skip
    @handles_errors
    def drain(
        name: MachineArg,
        deadline: Annotated[
            float | None,
            typer.Option("--deadline", min=1, metavar="S",
                         help="After S seconds, evict the tasks still there whatever their jobs' budgets."),
        ] = None,  # fmt: skip
        detach: Annotated[bool, typer.Option("--detach", help="Return once the machine is marked; do not watch.")] = False,
        master: MasterOpt = None,
        state_dir: StateDirOpt = None,
        as_json: JsonOpt = False,
    ) -> None:
        """Mark NAME unschedulable and move its tasks off, no faster than each job's max_unavailable
        allows (a task is down until its replacement runs elsewhere); watch until it is empty."""
        body = {} if deadline is None else {"deadline_s": deadline}
        with client(master, state_dir) as cell:
            answer = cell.request("POST", f"/v1/machines/{quote(name, safe='')}/drain", json=body)
            if emitted(answer, output_of(None, as_json)):
                return
            if detach:
                print(progress_line(answer["machine"]))
                return
            if not watch_drain(lambda: machine_of(cell, name), lambda text: print(text, flush=True)):
                raise fail(f"machine {name} was uncordoned before it was empty", EXIT_FAILED)

    @machine_app.command("uncordon", epilog=examples("minborg machine uncordon machine2"))
    @handles_errors
    def uncordon(name: MachineArg, master: MasterOpt = None, state_dir: StateDirOpt = None, as_json: JsonOpt = False) -> None:
        """Make a drained machine schedulable again (tasks do not move back by themselves)."""
        with client(master, state_dir) as cell:
            answer = cell.request("POST", f"/v1/machines/{quote(name, safe='')}/uncordon")
        if emitted(answer, output_of(None, as_json)):
            return
        print(f"{name}: schedulable")
