"""`minborg alloc`: submit, list, show and kill alloc sets (resources reserved on several machines, which jobs name)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from reference.cli.common import (
    EXIT_USAGE,
    JsonOpt,
    MasterOpt,
    OutputOpt,
    StateDirOpt,
    client,
    emitted,
    examples,
    fail,
    handles_errors,
    job_key,
    output_of,
)
from reference.cli.render import console, errors
from reference.resources import format_resources

alloc_app = typer.Typer(
    help="Submit, list, show and kill alloc sets: resources reserved on several machines that jobs run in.",
    no_args_is_help=True,
)

SetArg = Annotated[str, typer.Argument(metavar="USER/NAME", help="The alloc set, e.g. alice/logs.")]


def set_lines(view: dict[str, Any]) -> list[str]:
    """An alloc set as text: one line for the set, one for each alloc and what runs in it."""
    jobs = ", ".join(view.get("jobs") or []) or "no jobs"
    lines = [f"{view['key']:<32} {view['count']} x {format_resources(view['resources'])} "
             f"at priority {view['priority']}; {jobs}"]  # fmt: skip
    for a in view.get("allocs", []):
        lines.append(f"  {a['index']:>3} on {a['machine']:<16} used {format_resources(a['used'])}")
    return lines


@alloc_app.command("submit", epilog=examples(
    'minborg alloc submit examples/logsaver/alloc.yaml',
))
@handles_errors
def submit(
    file: Annotated[Path, typer.Argument(help="An alloc set file (YAML), e.g. examples/logsaver/alloc.yaml.")],
    master: MasterOpt = None,
    state_dir: StateDirOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Validate an alloc set file locally and reserve it: each alloc on its own machine, all or none."""
    from reference import allocspec  # pydantic: imported by the commands that read files
    from reference.cli.jobs import print_field_errors

    try:
        spec = allocspec.load_alloc_file(file)
    except allocspec.JobFileError as err:
        if len(err.errors) == 1 and not err.errors[0].get("field"):
            raise fail(str(err), EXIT_USAGE) from None
        print_field_errors(f"invalid alloc set file {file}", err.errors)
        raise typer.Exit(EXIT_USAGE) from None
    with client(master, state_dir) as cell:
        answer = cell.submit_alloc_set(spec.canonical())
    if as_json:
        emitted(answer, "json")
        return
    for line in set_lines(answer["alloc_set"]):
        console.print(line, soft_wrap=True, highlight=False)


@alloc_app.command("list", epilog=examples(
    'minborg alloc list',
    'minborg alloc list --user demo -o json',
))
@handles_errors
def list_sets(
    user: Annotated[str | None, typer.Option("--user", help="Only this user's alloc sets.")] = None,
    master: MasterOpt = None,
    state_dir: StateDirOpt = None,
    output: OutputOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """List the cell's alloc sets, each alloc's machine and what its tasks use."""
    fmt = output_of(output, as_json)
    with client(master, state_dir) as cell:
        sets = cell.alloc_sets(user)
    if emitted(sets, fmt):
        return
    if not sets:
        errors.print("no alloc sets")
    for view in sets:
        for line in set_lines(view):
            console.print(line, soft_wrap=True, highlight=False)


@alloc_app.command("show", epilog=examples(
    'minborg alloc show demo/logs',
))
@handles_errors
def show(
    key: SetArg, master: MasterOpt = None, state_dir: StateDirOpt = None, output: OutputOpt = None,
    as_json: JsonOpt = False,
) -> None:  # fmt: skip
    """Show one alloc set: its allocs, their machines, and the jobs that run in it."""
    fmt = output_of(output, as_json)
    with client(master, state_dir) as cell:
        view = cell.alloc_set(job_key(key))
    if emitted(view, fmt):
        return
    for line in set_lines(view):
        console.print(line, soft_wrap=True, highlight=False)


@alloc_app.command("kill", epilog=examples(
    'minborg alloc kill demo/logs',
))
@handles_errors
def kill(key: SetArg, master: MasterOpt = None, state_dir: StateDirOpt = None, as_json: JsonOpt = False) -> None:
    """Delete an alloc set: the jobs that run in it are killed first, then its reservations released."""
    with client(master, state_dir) as cell:
        answer = cell.delete_alloc_set(job_key(key))
    if as_json:
        emitted(answer, "json")
        return
    killed = ", ".join(answer.get("killed_jobs") or []) or "no jobs"
    console.print(f"alloc set {answer['deleted']} deleted: {answer['allocs']} alloc(s) released; killed {killed}")
