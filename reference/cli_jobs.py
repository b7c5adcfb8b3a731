"""The `minborg job`, `task`, `machine` and `bns` commands: a user's view of the cell's API."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import typer

from reference import jobspec
from reference.cli_common import (
    EXIT_USAGE,
    JobArg,
    JsonOpt,
    MasterOpt,
    StateDirOpt,
    client,
    fail,
    handles_errors,
    job_key,
)
from reference.cli_render import (
    console,
    errors,
    jobs_table,
    key_values,
    machines_table,
    print_json,
    resources,
    state_counts,
    tasks_table,
)

job_app = typer.Typer(help="Submit, inspect, resize and kill jobs.", no_args_is_help=True)
task_app = typer.Typer(help="Inspect and kill tasks.", no_args_is_help=True)
machine_app = typer.Typer(help="Inspect the cell's machines.", no_args_is_help=True)
bns_app = typer.Typer(
    help="Borg Name Service: <index>.<job>.<user>.<cell>.minborg.", no_args_is_help=True
)


def print_field_errors(title: str, field_errors: list[dict[str, str]]) -> None:
    errors.print(f"[bold red]error:[/bold red] {title}", soft_wrap=True)
    for item in field_errors:
        errors.print(
            f"  [bold]{item.get('field') or '(file)'}[/bold]: {item.get('error')}", soft_wrap=True
        )


@job_app.command("submit")
@handles_errors
def submit(
    file: Annotated[
        Path, typer.Argument(help="A job file (YAML), e.g. examples/hello_world.yaml.")
    ],
    master: MasterOpt = None,
    state_dir: StateDirOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Validate a job file locally, then submit it to the cell."""
    try:
        spec = jobspec.load_job_file(file)
    except jobspec.JobFileError as err:
        if len(err.errors) == 1 and not err.errors[0].get("field"):
            raise fail(str(err), EXIT_USAGE) from None  # unreadable, or not YAML at all
        print_field_errors(f"invalid job file {file}", err.errors)
        raise typer.Exit(EXIT_USAGE) from None
    with client(master, state_dir) as cell:
        answer = cell.submit(spec.canonical())
    if as_json:
        print_json(answer)
        return
    console.print(
        f"submitted [bold]{spec.key}[/bold]: {spec.task_count} task(s) of {resources(spec.request)} "
        f"at priority {spec.priority} (revision {answer.get('revision', '?')})"
    )


@job_app.command("list")
@handles_errors
def list_jobs(
    user: Annotated[str | None, typer.Option("--user", help="Only this user's jobs.")] = None,
    master: MasterOpt = None,
    state_dir: StateDirOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """List the cell's jobs."""
    with client(master, state_dir) as cell:
        jobs = cell.jobs(user)
    if as_json:
        print_json(jobs)
    elif not jobs:
        console.print("no jobs")
    else:
        console.print(jobs_table(jobs))


@job_app.command("show")
@handles_errors
def show(
    job: JobArg, master: MasterOpt = None, state_dir: StateDirOpt = None, as_json: JsonOpt = False
) -> None:
    """Show one job and how many of its tasks are in each state."""
    key = job_key(job)
    with client(master, state_dir) as cell:
        answer = cell.job(key)
    if as_json:
        print_json(answer)
        return
    spec = answer.get("job", {})
    pairs: list[tuple[str, Any]] = [
        ("job", spec.get("key", key)),
        ("priority", str(spec.get("priority"))),
        ("tasks wanted", str(spec.get("task_count"))),
        ("tasks", state_counts(answer.get("tasks"))),
        ("request", resources(spec.get("request"))),
        ("command", " ".join(spec.get("command", []))),
        ("restart policy", str(spec.get("restart_policy"))),
        ("appclass", str(spec.get("appclass"))),
        ("version", str(spec.get("version"))),
        ("revision", str(answer.get("revision"))),
    ]
    if spec.get("constraints"):
        pairs.append(("constraints", json.dumps(spec["constraints"])))
    console.print(key_values(None, pairs))


@job_app.command("update")
@handles_errors
def update(
    job: JobArg,
    tasks: Annotated[int | None, typer.Option("--tasks", min=0, help="New task count.")] = None,
    cpu: Annotated[
        str | None, typer.Option("--cpu", help="New CPU request per task, e.g. 500m.")
    ] = None,
    ram: Annotated[
        str | None, typer.Option("--ram", help="New RAM request per task, e.g. 256MiB.")
    ] = None,
    master: MasterOpt = None,
    state_dir: StateDirOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Resize a job or change its per-task request (a rolling update)."""
    key = job_key(job)
    new_request: dict[str, int] = {}
    for name, text in (("cpu", cpu), ("ram", ram)):
        if text is not None:
            try:
                new_request[name] = jobspec.parse_request_value(name, text)
            except ValueError as err:
                raise typer.BadParameter(str(err), param_hint=f"--{name}") from None
    if tasks is None and not new_request:
        raise fail("nothing to change: give --tasks, --cpu and/or --ram", EXIT_USAGE)
    changes: dict[str, Any] = {}
    if tasks is not None:
        changes["task_count"] = tasks
    with client(master, state_dir) as cell:
        if new_request:
            # The whole request is sent, so resources not named here keep their value.
            current = dict(cell.job(key).get("job", {}).get("request") or {})
            merged = {**current, **new_request}
            changes["request"] = {
                k: (f"{v}m" if k == "cpu" and isinstance(v, int) else v) for k, v in merged.items()
            }
        answer = cell.update(key, changes)
    if as_json:
        print_json(answer)
        return
    spec = answer.get("job", {})
    console.print(
        f"updated [bold]{key}[/bold] to version {spec.get('version', '?')}: "
        f"{spec.get('task_count', '?')} task(s) of {resources(spec.get('request'))} "
        f"(revision {answer.get('revision', '?')})"
    )


@job_app.command("kill")
@handles_errors
def kill(
    job: JobArg, master: MasterOpt = None, state_dir: StateDirOpt = None, as_json: JsonOpt = False
) -> None:
    """Kill a job: all its tasks stop and the job is removed."""
    key = job_key(job)
    with client(master, state_dir) as cell:
        answer = cell.kill(key)
    if as_json:
        print_json(answer)
    else:
        console.print(f"killed [bold]{key}[/bold]: {answer.get('killed', '?')} task(s)")


@job_app.command("schema")
def schema() -> None:
    """Print the JSON Schema of a job file (for editors and validators)."""
    print(json.dumps(jobspec.json_schema(), indent=2))


@task_app.command("list")
@handles_errors
def list_tasks(
    job: JobArg, master: MasterOpt = None, state_dir: StateDirOpt = None, as_json: JsonOpt = False
) -> None:
    """List a job's tasks: index, incarnation, state, machine, address, restarts, health."""
    key = job_key(job)
    with client(master, state_dir) as cell:
        tasks = cell.tasks(key)
    if as_json:
        print_json(tasks)
    else:
        console.print(tasks_table(tasks, title=f"tasks of {key}"))


@task_app.command("kill")
@handles_errors
def kill_task(
    job: JobArg,
    index: Annotated[int, typer.Argument(min=0, help="The task's index in its job.")],
    master: MasterOpt = None,
    state_dir: StateDirOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Kill one task of a job; its restart policy decides what happens next."""
    key = job_key(job)
    with client(master, state_dir) as cell:
        answer = cell.kill_task(key, index)
    if as_json:
        print_json(answer)
    else:
        task = answer.get("task", {})
        console.print(f"killed task {index} of [bold]{key}[/bold]: now {task.get('state', '?')}")


@machine_app.command("list")
@handles_errors
def list_machines(
    master: MasterOpt = None, state_dir: StateDirOpt = None, as_json: JsonOpt = False
) -> None:
    """List machines: capacity, reserved, usage, state, isolation."""
    with client(master, state_dir) as cell:
        machines = cell.machines()
    if as_json:
        print_json(machines)
    elif not machines:
        console.print("no machines")
    else:
        console.print(machines_table(machines))


@bns_app.command("resolve")
@handles_errors
def resolve(
    name: Annotated[str, typer.Argument(help="e.g. 0.hello_world.demo.local.minborg")],
    master: MasterOpt = None,
    state_dir: StateDirOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Resolve a BNS name to the host:port of the task behind it."""
    with client(master, state_dir) as cell:
        answer = cell.resolve(name)
    if as_json:
        print_json(answer)
        return
    healthy = {True: "healthy", False: "unhealthy"}.get(answer.get("healthy"), "health unknown")
    console.print(
        f"{answer.get('name', name)} -> {answer.get('host')}:{answer.get('port')} ({answer.get('task', '?')}, {healthy})"
    )
