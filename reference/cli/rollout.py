"""`minborg job run`, `job plan`, `job history` and `job revert`: a job declared by its file, changed by a rolling update.

`job run FILE` sends the whole file (`PUT /v1/jobs/{user}/{name}`): the file the job already
runs prints `unchanged` and exits 0; a new job is created; a changed file is a new version,
whose rollout the command then follows until every task runs it (exit 0) or a replacement
fails (exit 1, with the reason). `job plan FILE` says what `job run` would do and exits, as
`nomad job plan` does, 0 when nothing would change, 1 when something would, 255 on an error
(an invalid file, a refusal, no cell).
"""

from __future__ import annotations

import time
from typing import Annotated, Any

import typer

from reference.cli.common import (
    EXIT_USAGE,
    JsonOpt,
    MasterOpt,
    StateDirOpt,
    client,
    examples,
    fail,
    handles_errors,
    job_key,
)
from reference.cli.jobs import job_app, print_field_errors, wait_for_start
from reference.cli.render import console, errors, print_json
from reference.cli.rolling import follow_rollout, plan_text
from reference.client import ClientError

EXIT_PLAN_ERROR = 255  # `job plan`: neither "no change" (0) nor "would change" (1)
DetachOpt = Annotated[bool, typer.Option("--detach", "-d", help="Return once the cell took the new version.")]
TimeoutOpt = Annotated[float, typer.Option("--timeout", min=1, help="Seconds to follow the rollout.")]


def _load(file: str) -> Any:
    from reference import jobspec  # pydantic: imported by the commands that read job files

    try:
        return jobspec.load_job_file(file)
    except jobspec.JobFileError as err:
        if len(err.errors) == 1 and not err.errors[0].get("field"):
            raise fail(str(err), EXIT_USAGE) from None
        print_field_errors(f"invalid job file {file}", err.errors)
        raise typer.Exit(EXIT_USAGE) from None


def _put(cell: Any, spec: Any, dry_run: bool) -> dict[str, Any]:
    key = spec.key
    return cell.request("PUT", f"/v1/jobs/{key}", json=spec.canonical(), params={"dry_run": "true"} if dry_run else None)


def _current_file(cell: Any, key: str) -> dict[str, Any] | None:
    try:
        return cell.job(key).get("job")
    except ClientError as err:
        if err.status == 404:
            return None
        raise


def _watch(cell: Any, key: str, timeout_s: float, quiet: bool) -> None:
    say = (lambda text: errors.print(text, soft_wrap=True, markup=False)) if quiet else (
        lambda text: console.print(text, soft_wrap=True, markup=False))  # fmt: skip
    outcome = follow_rollout(lambda: cell.job(key), say, timeout_s)
    if outcome == "stopped":
        raise fail(f"the rollout of {key} stopped; see `minborg job show {key}`, fix the file and run it again, or `minborg job revert {key} VERSION`")
    if outcome == "timeout":
        raise fail(f"the rollout of {key} did not finish within {timeout_s:.0f}s; see `minborg job show {key}`")
    say(f"every task of {key} runs the new version")


def _say(answer: dict[str, Any], current: dict[str, Any] | None, as_json: bool) -> None:
    if as_json:
        print_json(answer)
    else:
        print(plan_text(answer, current), flush=True)


def _say_and_follow(
    cell: Any, key: str, answer: dict[str, Any], current: dict[str, Any] | None, detach: bool, timeout_s: float, as_json: bool,
) -> None:  # fmt: skip
    """Print what a new version changes, then follow its rollout (not when detached or unchanged)."""
    _say(answer, current, as_json)
    if not detach and not answer.get("unchanged"):
        _watch(cell, key, timeout_s, quiet=as_json)


@job_app.command("run", epilog=examples(
    "minborg job run examples/hello_world.yaml",
    "minborg job run web.yaml --dry-run",
    "minborg job run web.yaml --detach",
))
@handles_errors
def run(
    file: Annotated[str, typer.Argument(help="The job file (YAML).")],
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Only print what would change (as `job plan`).")] = False,
    detach: DetachOpt = False,
    wait_timeout: TimeoutOpt = 300,
    master: MasterOpt = None,
    state_dir: StateDirOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Create or change a job from its whole file: the same file again prints `unchanged`
    and exits 0; a changed one is a new version, rolled out at most max_unavailable tasks at
    a time (changes that need no restart apply in place). Follows the rollout: exits 0 when
    every task runs the new version, 1 when a replacement fails (the rollout stops there)."""
    spec = _load(file)
    if dry_run:
        plan(file, master, state_dir, as_json)
        return
    with client(master, state_dir) as cell:
        current = _current_file(cell, spec.key)
        answer = _put(cell, spec, dry_run=False)
        if answer.get("created") and not detach:
            _say(answer, current, as_json)
            if spec.task_count and isinstance(answer.get("revision"), int):
                wait_for_start(cell, spec.key, spec.task_count, answer["revision"], wait_timeout, quiet=as_json)
            return
        _say_and_follow(cell, spec.key, answer, current, detach, wait_timeout, as_json)


@job_app.command("plan", epilog=examples("minborg job plan web.yaml", "minborg job plan web.yaml --json"))
def plan(
    file: Annotated[str, typer.Argument(help="The job file (YAML).")],
    master: MasterOpt = None,
    state_dir: StateDirOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Print what `job run FILE` would change: the fields (old -> new), which tasks would be
    replaced by a rolling update and which changed in place. Writes nothing. Exits 0 when
    nothing would change, 1 when something would, 255 on an error (as `nomad job plan`)."""
    try:
        spec = _load(file)
        with client(master, state_dir) as cell:
            current = _current_file(cell, spec.key)
            answer = _put(cell, spec, dry_run=True)
    except typer.Exit as err:
        raise typer.Exit(EXIT_PLAN_ERROR) from err
    except ClientError as err:
        errors.print(f"error: {err}", soft_wrap=True, markup=False)
        raise typer.Exit(EXIT_PLAN_ERROR) from None
    if as_json:
        print_json(answer)
    else:
        print(plan_text(answer, current))
    raise typer.Exit(0 if answer.get("unchanged") else 1)


@job_app.command("history", epilog=examples("minborg job history demo/web", "minborg job history demo/web --json"))
@handles_errors
def history(
    job: Annotated[str, typer.Argument(help="The job, USER/NAME.")],
    master: MasterOpt = None,
    state_dir: StateDirOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """List a job's kept versions, newest first: when each was written and what it changed."""
    with client(master, state_dir) as cell:
        key = job_key(job, cell)
        answer = cell.request("GET", f"/v1/jobs/{key}/history")
    if as_json:
        print_json(answer)
        return
    print(f"{'VERSION':<8} {'WRITTEN':<20} CHANGED")
    for v in answer["versions"]:
        mark = "*" if v["current"] else " "
        when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(v["at"]))
        changed = ", ".join(v["changed"]) if v["version"] else "(submitted)"
        print(f"{str(v['version']) + mark:<8} {when:<20} {changed}")


@job_app.command("revert", epilog=examples("minborg job revert demo/web 2"))
@handles_errors
def revert(
    job: Annotated[str, typer.Argument(help="The job, USER/NAME.")],
    version: Annotated[int, typer.Argument(min=0, help="The version to go back to (`job history` lists them).")],
    detach: DetachOpt = False,
    wait_timeout: TimeoutOpt = 300,
    master: MasterOpt = None,
    state_dir: StateDirOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Run the file of an earlier version again, as a new version (rolled out like any other)."""
    with client(master, state_dir) as cell:
        key = job_key(job)
        current = _current_file(cell, key)
        answer = cell.request("POST", f"/v1/jobs/{key}/revert", json={"version": version})
        _say_and_follow(cell, key, answer, current, detach, wait_timeout, as_json)
