"""The `minborg` commands around the Fauxmaster: `cell checkpoint`, `cell whatif`, and `fauxmaster` itself."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from reference.cli.common import (
    EXIT_USAGE,
    JsonOpt,
    MasterOpt,
    StateDirOpt,
    client,
    fail,
    handles_errors,
)
from reference.cli.render import console, print_json
from reference.cli.views import answer_lines


def checkpoint(
    out: Annotated[Path, typer.Option("--out", help="The checkpoint file to write (JSON, docs/checkpoint.md).")],
    revision: Annotated[
        int | None, typer.Option("--revision", min=1, help="The cell as it was at this etcd revision (default: now).")
    ] = None,
    etcd: Annotated[
        str | None, typer.Option("--etcd", help="etcd client URLs, comma separated (default: the local cell's).")
    ] = None,
    cell_name: Annotated[str | None, typer.Option("--cell", help="The cell's name (default: the local cell's).")] = None,
    state_dir: StateDirOpt = None,
) -> None:
    """Write the cell's state at one etcd revision (machines, jobs, tasks, quotas, allocs) to a checkpoint file."""
    from reference.fauxmaster import CheckpointError
    from reference.fauxmaster import checkpoint as ckpt
    from reference.launcher.cellfile import CellInfo, LauncherError
    from reference.store.client import StoreClient, StoreError

    tls = None
    if etcd is None or cell_name is None:
        try:
            info = CellInfo.load(state_dir)
        except (LauncherError, OSError, ValueError, KeyError) as err:
            raise fail(f"no local cell to read ({err}); give --etcd and --cell", EXIT_USAGE) from None
        tls = info.etcd_tls if etcd is None else None  # the local cell's client certificate
        etcd = etcd or ",".join(info.etcd_urls)
        cell_name = cell_name or info.cell
    try:
        with StoreClient(etcd.split(","), timeout=10.0, tls=tls) as store:
            doc = ckpt.read_etcd(store, cell_name, revision)
    except (StoreError, CheckpointError, ValueError) as err:
        raise fail(f"cannot read the cell from etcd: {err}") from None
    ckpt.save(doc, out)
    console.print(
        f"checkpoint of cell {cell_name} at revision {doc['revision']}: {len(doc['machines'])} machines, "
        f"{len(doc['jobs'])} jobs, {len(doc['tasks'])} tasks -> {out}"
    )


@handles_errors
def whatif(
    remove_machine: Annotated[str, typer.Option("--remove-machine", help="The machine to imagine removed.")],
    master: MasterOpt = None,
    state_dir: StateDirOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Which tasks would move (to where) or stay pending if a machine were removed. Nothing is changed."""
    with client(master, state_dir) as cell:
        answer = cell.request("GET", "/v1/whatif", params={"remove_machine": remove_machine})
    if as_json:
        print_json(answer)
        return
    print_answer(answer, f"if {remove_machine} were removed (revision {answer.get('revision')})")


def print_answer(answer: dict[str, Any], title: str) -> None:
    """A dry run's, a what-if's or a Fauxmaster run's answer as lines (views.answer_lines)."""
    console.print(f"[bold]{title}[/bold]", soft_wrap=True)
    for line in answer_lines(answer):
        console.print(line, soft_wrap=True, markup=False)


def fauxmaster(
    checkpoint_file: Annotated[Path, typer.Option("--checkpoint", help="A checkpoint (`minborg cell checkpoint`).")],
    apply: Annotated[list[Path] | None, typer.Option("--apply", help="A job file to submit (repeatable).")] = None,
    fail_machine: Annotated[
        list[str] | None, typer.Option("--fail-machine", help="A machine to fail (repeatable).")
    ] = None,
    fail_rack: Annotated[
        list[str] | None, typer.Option("--fail-rack", help="A rack whose every machine fails (repeatable).")
    ] = None,
    schedule: Annotated[bool, typer.Option("--schedule", help="Then schedule every pending task once.")] = False,
    advance: Annotated[
        float, typer.Option("--advance", min=0.0, help="Then move the simulated clock on by this many seconds.")
    ] = 0.0,
    seed: Annotated[int, typer.Option("--seed", help="The scheduling pass's random seed.")] = 0,
    as_json: JsonOpt = False,
) -> None:
    """A checkpoint in a Fauxmaster: submit jobs, fail machines or racks, schedule, advance the clock; print placed, pending, preempted.

    Placed tasks with their machines, pending ones with the scheduler's reasons, preempted
    tasks by job and priority. Nothing touches a live cell."""
    from reference import jobspec
    from reference.fauxmaster import CheckpointError, Fauxmaster
    from reference.fauxmaster import checkpoint as ckpt
    from reference.master import answers
    from reference.master.mutations import ApiError

    try:
        fm = Fauxmaster(ckpt.load(checkpoint_file))
    except CheckpointError as err:
        raise fail(f"cannot read {checkpoint_file}: {err}", EXIT_USAGE) from None
    submitted: list[str] = []
    for path in apply or []:
        try:
            submitted.append(fm.apply_job(jobspec.load_job_file(path)))
        except jobspec.JobFileError as err:
            raise fail(f"invalid job file {path}: {err.errors}", EXIT_USAGE) from None
        except ApiError as err:
            raise fail(f"{path}: the cell refuses it ({err.status}): {err.error}") from None
    lost = []
    for name in fail_machine or []:
        try:
            lost += fm.fail_machine(name)
        except (KeyError, ValueError) as err:
            raise fail(f"--fail-machine {name}: {err}", EXIT_USAGE) from None
    for rack in fail_rack or []:
        try:
            lost += fm.fail_rack(rack)
        except KeyError as err:
            raise fail(f"--fail-rack {rack}: {err}", EXIT_USAGE) from None
    plans = [fm.schedule_all_pending(seed).plan] if schedule else []
    plans += [p.plan for p in fm.advance(advance, seed)] if advance else []
    state = fm.state
    answer = {
        "revision": fm.cell.revision,
        "submitted": submitted,
        "lost": [str(t) for t in lost],
        "placed": answers.placed(plans),
        "pending": answers.pending(state, plans[-1] if plans else None),
        "preempted": answers.preempted(state, plans),
    }
    if as_json:
        print_json(answer)
        return
    console.print(
        f"{len(answer['placed'])} placed, {len(answer['pending'])} pending, "
        f"{sum(v['tasks'] for v in answer['preempted'])} preempted, {len(lost)} lost"
    )
    print_answer({k: answer[k] for k in ("placed", "pending", "preempted")}, "the Fauxmaster's passes" if plans else "no pass (--schedule)")
