"""The `minborg job`, `task`, `machine` and `bns` commands: a user's view of the cell's API."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated, Any

import typer

from reference.cli.common import (
    EXIT_USAGE,
    JobArg,
    JsonOpt,
    MasterOpt,
    OutputOpt,
    ReadJobArg,
    StateDirOpt,
    WatchForOpt,
    WatchOpt,
    client,
    emitted,
    examples,
    fail,
    handles_errors,
    job_key,
    output_of,
)
from reference.cli.plain import color_on, job_counts, job_rows, render, task_rows
from reference.cli.render import console, errors, print_json
from reference.cli.views import (
    job_text,
    killed_line,
    machine_rows,
    resolved_line,
    submitted_line,
    task_text,
    updated_line,
)
from reference.cli.watch import machine_line, task_line
from reference.client import ClientError
from reference.resources import format_cpu

job_app = typer.Typer(help="Submit, inspect, resize and kill jobs.", no_args_is_help=True)
task_app = typer.Typer(help="Inspect tasks, their events and logs; run a command in one; kill them.", no_args_is_help=True)
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


@job_app.command("submit", epilog=examples(
    'minborg job submit examples/hello_world.yaml',
    'minborg job submit --detach examples/batch.yaml',
    'minborg job submit --dry-run examples/batch.yaml',
))
@handles_errors
def submit(
    file: Annotated[
        Path, typer.Argument(help="A job file (YAML), e.g. examples/hello_world.yaml.")
    ],
    wait: Annotated[
        bool,
        typer.Option(
            "--wait/--detach",
            help="Wait (the default) until every task started, or --detach: return once the cell accepted the job.",
        ),
    ] = True,
    wait_timeout: Annotated[
        float, typer.Option("--wait-timeout", min=1, help="Seconds to wait for every task to start, at most.")
    ] = 300,
    dry_run: Annotated[
        bool,
        typer.Option(
            "--dry-run", help="Only say where the tasks would go, what they would preempt and why any would wait."
        ),
    ] = False,
    master: MasterOpt = None,
    state_dir: StateDirOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Validate a job file locally, submit it, then wait until every task runs (its borglet
    confirmed the start) or one fails, printing placements and starts; exits 1 if a task
    fails or the wait times out. --detach returns as soon as the cell accepted the job.
    --dry-run writes nothing: the cell answers whether and where the job would fit, and the
    command exits 1 if some task would stay pending."""
    from reference import jobspec  # pydantic: imported by the commands that read job files

    try:
        spec = jobspec.load_job_file(file)
    except jobspec.JobFileError as err:
        if len(err.errors) == 1 and not err.errors[0].get("field"):
            raise fail(str(err), EXIT_USAGE) from None  # unreadable, or not YAML at all
        print_field_errors(f"invalid job file {file}", err.errors)
        raise typer.Exit(EXIT_USAGE) from None
    if dry_run:
        from reference.cli.faux import print_answer
        from reference.cli.views import dry_run_title, would_not_fit

        with client(master, state_dir) as cell:
            answer = cell.request("POST", "/v1/jobs", json=spec.canonical(), params={"dry_run": "true"})
        if as_json:
            print_json(answer)
        else:
            print_answer(answer, dry_run_title(spec.key, answer))
        if (why := would_not_fit(spec.key, answer, spec.task_count)) is not None:  # as `nomad job plan`: the exit code says it
            raise fail(why)
        return
    with client(master, state_dir) as cell:
        answer = cell.submit(spec.canonical())
        if as_json:
            print_json(answer)
        else:
            print(submitted_line(answer, color=color_on()), flush=True)
        if not wait or not isinstance(answer.get("revision"), int) or spec.task_count == 0:
            return
        wait_for_start(cell, spec.key, spec.task_count, answer["revision"], wait_timeout, quiet=as_json)


# How long every task must stay started before `job submit` says so: two default poll
# intervals, so that a process that exits at once is seen failing (docs/decisions.md).
STEADY_S = 2.0


def wait_for_start(cell: Any, key: str, count: int, revision: int, wait: float, quiet: bool) -> None:
    from reference.cli.watch import StartWatch, wait_for_start

    say = (lambda text: errors.print(text, soft_wrap=True)) if quiet else (lambda text: console.print(text, soft_wrap=True))
    watcher = StartWatch(count, say, steady_s=STEADY_S)
    # The submission's own revision created the tasks: replay from just before it.
    outcome = wait_for_start(cell, key, revision - 1, watcher, wait)
    if outcome == "done":
        say(f"[green]all {count} task(s) of {key} started[/green]")
    elif outcome == "failed":
        raise fail(f"{watcher.failed}; see `minborg task show {key} INDEX` and `minborg task logs {key} INDEX`")
    elif outcome == "timeout":
        raise fail(f"not every task of {key} started within {wait:.0f}s; see `minborg job show {key}`")


@job_app.command("list", epilog=examples(
    'minborg job list',
    'minborg job list --user demo -o wide',
    'minborg job list -w',
))
@handles_errors
def list_jobs(
    user: Annotated[str | None, typer.Option("--user", help="Only this user's jobs.")] = None,
    watch: Annotated[
        bool, typer.Option("--watch", "-w", help="After the list, print each change to the jobs as it happens.")
    ] = False,
    watch_for: Annotated[float, typer.Option("--for", min=1, help="With -w: stop after this many seconds.")] = 3600,
    master: MasterOpt = None,
    state_dir: StateDirOpt = None,
    output: OutputOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """List the cell's jobs (-w: then watch them)."""
    fmt = output_of(output, as_json)
    with client(master, state_dir) as cell:
        if watch:
            from reference.cli.watch import follow, job_line

            answer = cell.request("GET", "/v1/jobs", params={"user": user} if user else None)
            if not emitted(answer["jobs"], fmt):
                print(_job_table(cell, answer["jobs"], fmt))
            follow(cell, "/v1/jobs", since=answer["revision"], for_s=watch_for, line=job_line,
                   say=lambda text: console.print(text, soft_wrap=True, markup=False), user=user)  # fmt: skip
            return
        jobs = cell.jobs(user)
        if emitted(jobs, fmt):
            return
        print(_job_table(cell, jobs, fmt))


def _job_table(cell: Any, jobs: list[dict[str, Any]], fmt: str) -> str:
    """The jobs as rows, each with its status and ready tasks (GET /v1/jobs/U/N each)."""
    if not jobs:
        return "no jobs"
    color = color_on()
    counts = job_counts(jobs, cell.job)
    return render(*job_rows(jobs, wide=fmt == "wide", counts=counts, color=color), color=color)


@job_app.command("show", epilog=examples(
    'minborg job show demo/hello_world',
    'minborg job show demo/hello_world -o yaml',
))
@handles_errors
def show(
    job: ReadJobArg, master: MasterOpt = None, state_dir: StateDirOpt = None, output: OutputOpt = None,
    as_json: JsonOpt = False,
) -> None:  # fmt: skip
    """Show one job, how many of its tasks are in each state, and why pending ones wait."""
    fmt = output_of(output, as_json)
    with client(master, state_dir) as cell:
        key = job_key(job, cell)
        answer = cell.job(key)
    if emitted(answer, fmt):
        return
    print(job_text(answer, key, color=color_on()))


@job_app.command("update", epilog=examples(
    'minborg job update demo/hello_world --tasks 5',
    'minborg job update demo/hello_world --cpu 200m --ram 128MiB',
))
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
    from reference import jobspec

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
                k: (format_cpu(v) if k == "cpu" and isinstance(v, int) else v) for k, v in merged.items()
            }
        answer = cell.update(key, changes)
    if as_json:
        print_json(answer)
        return
    print(updated_line(key, answer, color=color_on()))


@job_app.command("kill", epilog=examples('minborg job kill demo/hello_world'))
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
        print(killed_line(key, answer, color=color_on()))


@job_app.command("schema", epilog=examples('minborg job schema > job.schema.json'))
def schema() -> None:
    """Print the JSON Schema of a job file (for editors and validators)."""
    from reference import jobspec

    print(json.dumps(jobspec.json_schema(), indent=2))


@task_app.command("list", epilog=examples(
    'minborg task list demo/hello_world',
    'minborg task list demo/hello_world -o wide',
    'minborg task list demo/hello_world -w',
    "minborg task list demo/hello_world -o jsonpath='{.items[*].machine}'",
))
@handles_errors
def list_tasks(
    job: ReadJobArg, watch: WatchOpt = False, watch_for: WatchForOpt = 3600, master: MasterOpt = None,
    state_dir: StateDirOpt = None, output: OutputOpt = None, as_json: JsonOpt = False,
) -> None:  # fmt: skip
    """List a job's tasks: index, incarnation, state, machine, address, restarts, health
    (-o wide: pid, BNS name, last event, pending reason; -w: then watch them)."""
    fmt = output_of(output, as_json)
    with client(master, state_dir) as cell:
        key = job_key(job, cell)
        answer = cell.request("GET", f"/v1/jobs/{key}/tasks")
        tasks = answer["tasks"]
        if not emitted(tasks, fmt):
            color = color_on()
            columns, rows = task_rows(tasks, wide=fmt == "wide", color=color)
            print(render(columns, rows, color=color, title=f"tasks of {key}"))
        if watch:
            _watch(cell, f"/v1/jobs/{key}/tasks", answer.get("revision"), watch_for, task_line)


@task_app.command("show", epilog=examples(
    'minborg task show demo/hello_world 0',
    'minborg task show demo/hello_world 0 --incarnation 1 -o json',
))
@handles_errors
def show_task(
    job: ReadJobArg,
    index: Annotated[int, typer.Argument(min=0, help="The task's index in its job.")],
    incarnation: Annotated[
        int | None, typer.Option("--incarnation", help="This incarnation instead of the latest.")
    ] = None,
    master: MasterOpt = None,
    state_dir: StateDirOpt = None,
    output: OutputOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Show one task: its fields, why it is pending, and its events (scheduled, started, exited...)."""
    fmt = output_of(output, as_json)
    with client(master, state_dir) as cell:
        key = job_key(job, cell)
        task = cell.task(key, index, incarnation)
    if emitted(task, fmt):
        return
    print(task_text(task, color=color_on()))


@task_app.command("logs", epilog=examples(
    'minborg task logs demo/hello_world 0',
    'minborg task logs demo/hello_world 0 -f --stderr',
    'minborg task logs demo/hello_world 0 -n 1000 > task0.log',
))
@handles_errors
def task_logs(
    job: ReadJobArg,
    index: Annotated[int, typer.Argument(min=0, help="The task's index in its job.")],
    follow: Annotated[
        bool, typer.Option("--follow", "-f", help="Keep printing what the task writes, across its restarts.")
    ] = False,
    stderr: Annotated[bool, typer.Option("--stderr", help="Its stderr instead of its stdout.")] = False,
    tail: Annotated[int, typer.Option("--tail", "-n", min=0, max=10000, help="Lines to print first.")] = 100,
    incarnation: Annotated[
        int | None, typer.Option("--incarnation", help="This incarnation instead of the latest.")
    ] = None,
    follow_for: Annotated[
        float, typer.Option("--for", min=1, max=3600, help="With -f: stop after this many seconds.")
    ] = 600,
    master: MasterOpt = None,
    state_dir: StateDirOpt = None,
) -> None:
    """Print a task's stdout (or --stderr), fetched from its machine through a master."""
    import time

    stream = "stderr" if stderr else "stdout"
    with client(master, state_dir) as cell:
        key = job_key(job, cell)
        if not follow:
            body = cell.logs(key, index, stream=stream, tail=tail, incarnation=incarnation)
            if not body and incarnation is None:
                from reference.cli.views import never_started

                why = never_started(cell.task(key, index))
                if why:
                    raise fail(why)
            sys.stdout.buffer.write(body)
            return
        deadline = time.monotonic() + follow_for
        # The incarnation followed is named in every request, so that a restart by the job's
        # policy while it streams is seen as the next one, not taken for this one.
        current = incarnation if incarnation is not None else int(cell.task(key, index).get("incarnation", 0))
        while True:
            params: dict[str, Any] = {"stream": stream, "tail": tail, "follow": "true",
                                      "max_s": max(1.0, deadline - time.monotonic())}  # fmt: skip
            params["incarnation"] = current
            try:
                for chunk in cell.stream(f"/v1/jobs/{key}/tasks/{index}/logs", params, max_s=follow_for):
                    sys.stdout.buffer.write(chunk)
                    sys.stdout.buffer.flush()
            except ClientError as err:
                # Replaced by a newer incarnation before its stream began: move on to it. Or its
                # machine no longer answers (it went down, the task is DEAD and waits out its
                # restart back-off): this incarnation's stream is over, the next one may come.
                replaced = err.status == 404 and "incarnation" in str(err)
                gone = err.status == 502 and cell.task(key, index).get("state") == "DEAD"
                if incarnation is not None or not (replaced or gone):
                    raise
            if incarnation is not None or time.monotonic() >= deadline:
                return
            # The incarnation ended: follow the next one the job's restart policy makes, from
            # its first line.
            newer = _wait_newer(cell, key, index, current, deadline)
            if newer is None:
                return
            errors.print(f"[dim]--- incarnation {newer['incarnation']} on {newer.get('last_machine')} ---[/dim]")
            current, tail = int(newer["incarnation"]), 10_000


def _wait_newer(cell: Any, key: str, index: int, current: int, deadline: float) -> dict[str, Any] | None:
    """The task's next incarnation once it has a machine; None when there is none (it stays
    dead) or the deadline passes."""
    import time

    while time.monotonic() < deadline:
        task = cell.task(key, index)
        if int(task.get("incarnation", 0)) > current and (task.get("started_at") or task.get("state") == "DEAD"):
            return task  # its process started (or it died trying): it has logs to follow
        if int(task.get("incarnation", 0)) == current and task.get("state") == "DEAD":
            if task.get("crash_loop"):  # its next incarnation waits out the restart back-off
                time.sleep(0.5)
                continue
            time.sleep(1.0)  # a restart may come: the master restarts DEAD tasks by policy
            again = cell.task(key, index)
            if int(again.get("incarnation", 0)) == current and not again.get("crash_loop"):
                return None
            continue
        time.sleep(0.5)
    return None


@task_app.command("kill", epilog=examples('minborg task kill demo/hello_world 0'))
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


@machine_app.command("list", epilog=examples(
    'minborg machine list', 'minborg machine list -o json', 'minborg machine list -w', 'minborg machine list -o name'))
@handles_errors
def list_machines(
    watch: WatchOpt = False, watch_for: WatchForOpt = 3600, master: MasterOpt = None, state_dir: StateDirOpt = None,
    output: OutputOpt = None, as_json: JsonOpt = False,
) -> None:  # fmt: skip
    """List machines: capacity, reserved, usage, state, isolation (-w: then watch them)."""
    fmt = output_of(output, as_json)
    with client(master, state_dir) as cell:
        answer = cell.request("GET", "/v1/machines")
        machines = answer["machines"]
        if not emitted(machines, fmt):
            color = color_on()
            print(render(*machine_rows(machines, color=color), color=color) if machines else "no machines")
        if watch:
            _watch(cell, "/v1/machines", answer.get("revision"), watch_for, machine_line)


def _watch(cell: Any, path: str, revision: Any, for_s: float, line: Any) -> None:
    """After a listing (-w): print each change from the listing's revision on, as kubectl get -w."""
    from reference.cli.watch import follow

    follow(cell, path, since=revision if isinstance(revision, int) else None, for_s=for_s, line=line,
           say=lambda text: print(text, flush=True))  # fmt: skip


@bns_app.command("resolve", epilog=examples('minborg bns resolve 0.hello_world.demo.local.minborg'))
@handles_errors
def resolve(
    name: Annotated[str, typer.Argument(help="e.g. 0.hello_world.demo.local.minborg")],
    master: MasterOpt = None,
    state_dir: StateDirOpt = None,
    output: OutputOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Resolve a BNS name to the host:port of the task behind it."""
    fmt = output_of(output, as_json)
    with client(master, state_dir) as cell:
        answer = cell.resolve(name)
    if emitted(answer, fmt):
        return
    print(resolved_line(answer, name))
