"""`job submit` and `job run` on the fast path: a job file sent as it is written, the cell's answer, and the wait for its tasks or its rollout, with the standard library and PyYAML alone.

The cell validates a job file with the same model the full command line does (reference/jobspec.py,
pydantic), so a valid file needs no local check. A file the cell refuses as invalid (422), one
that is not YAML or not a mapping, or that names no user and job, goes to the full command line
(`Fallback`), which validates it locally and names each bad field with exit code 2: the same
errors as before, paid for only when the file is wrong. What both print is the same: the
submitted line (cli/views.py), the plan of a version and the rollout's progress
(cli/rolling.py), each start of a task (cli/watch.py's StartWatch).
"""

from __future__ import annotations

import sys

from reference import cellfile
from reference.cli import plain as cli_plain
from reference.cli import views as cli_views

TYPE_CHECKING = False
if TYPE_CHECKING:  # typing costs the fast path's start
    from typing import Any

    from reference.cli.http import PlainCell

    Args = Any  # fast.Args: a fast command's arguments (not imported: fast imports this module)

# As cli/jobs.py's: how long every task must stay started before `job submit` says so.
STEADY_S = 2.0
WAIT_S = 300.0
EXIT_FAILED = 1
EXIT_PLAN_ERROR = 255  # cli/rollout.py's: neither "no change" (0) nor "would change" (1)


class Refused(Exception):
    """What the full command line must word: raised as fast.Fallback by the caller."""


def read_job_file(path: str) -> dict[str, Any]:
    """The job file as a mapping, as YAML reads it; Refused when it cannot be read or is no mapping."""
    from reference import jobtext

    try:
        with open(path, encoding="utf-8") as f:
            document = jobtext.parse(f.read())
    except (OSError, ValueError):  # jobtext.NotParsed is a ValueError, as is a bad encoding
        raise Refused from None
    if not isinstance(document, dict):
        raise Refused
    return document


def send(cell: PlainCell, method: str, path: str, document: dict[str, Any]) -> dict[str, Any]:
    """The cell's answer to the file; Refused for a file it finds invalid (the full command
    line names each bad field locally) or a value JSON cannot carry (a YAML date)."""
    try:
        return cell.request(method, path, json=document)
    except cellfile.ClientError as err:
        if err.status == 422:
            raise Refused from None
        raise
    except TypeError:
        raise Refused from None


def fail(message: str) -> int:
    print(f"{cli_plain.paint('error:', 'red', sys.stderr.isatty())} {message}", file=sys.stderr)
    return EXIT_FAILED


def wait_for_start(cell: PlainCell, key: str, count: int, revision: int, wait_s: float, quiet: bool) -> int:
    """cli/jobs.py's wait_for_start: each task's placement and start, until all run (0) or one fails (1)."""
    from reference.cli.watch import StartWatch
    from reference.cli.watch import wait_for_start as watch_start

    out = sys.stderr if quiet else sys.stdout
    color = out.isatty() and cli_plain.color_on()

    def say(text: str) -> None:
        print(text, file=out, flush=True)

    watcher = StartWatch(count, say, steady_s=STEADY_S)
    outcome = watch_start(cell, key, revision - 1, watcher, wait_s)  # type: ignore[arg-type]
    if outcome == "done":
        say(cli_plain.paint(f"all {count} task(s) of {key} started", "green", color))
    elif outcome == "failed":
        return fail(f"{watcher.failed}; see `minborg task show {key} INDEX` and `minborg task logs {key} INDEX`")
    elif outcome == "timeout":
        return fail(f"not every task of {key} started within {wait_s:.0f}s; see `minborg job show {key}`")
    return 0


def dry_run(a: Args, document: dict[str, Any]) -> int:
    """`job submit --dry-run FILE [--json]`: where the cell would put the job, written nowhere;
    exit 1 when a task would stay pending (cli/jobs.py's, in the same words)."""
    key = job_key(document)
    with a.cell() as cell:
        answer = send(cell, "POST", "/v1/jobs?dry_run=true", document)
    if a.has("--json"):
        print(cli_plain.dump(answer, "json"))
    else:
        print(cli_plain.paint(cli_views.dry_run_title(key, answer), "bold", sys.stdout.isatty() and cli_plain.color_on()))
        for line in cli_views.answer_lines(answer):
            print(line)
    count = task_count(document)
    why = cli_views.would_not_fit(key, answer, 1 if count is None else count)
    return 0 if why is None else fail(why)


def submit(a: Args) -> int:
    """`job submit FILE [--detach] [--wait-timeout S] [--json] [--dry-run]`."""
    document = read_job_file(a.positional[0])
    if a.has("--dry-run"):
        return dry_run(a, document)
    wait_s = a.float_option("--wait-timeout", WAIT_S)
    as_json = a.has("--json")
    with a.cell() as cell:
        answer = send(cell, "POST", "/v1/jobs", document)
        if as_json:
            print(cli_plain.dump(answer, "json"), flush=True)
        else:
            print(cli_views.submitted_line(answer, color=cli_plain.color_on()), flush=True)
        job = answer.get("job") or {}
        count, revision = job.get("task_count"), answer.get("revision")
        if a.has("--detach") or not isinstance(revision, int) or not isinstance(count, int) or count == 0:
            return 0
        key = job.get("key") or f"{job.get('user')}/{job.get('name')}"
        return wait_for_start(cell, key, count, revision, wait_s, quiet=as_json)


def task_count(document: dict[str, Any]) -> int | None:
    """The file's task count as the cell took it (3 or 3.0; 1 when absent); None if not a number."""
    count = document.get("task_count", 1)
    return int(count) if isinstance(count, int | float) else None


def job_key(document: dict[str, Any]) -> str:
    user, name = document.get("user"), document.get("name")
    if not (isinstance(user, str) and isinstance(name, str) and user and name) or "/" in user + name:
        raise Refused  # the full command line names the field
    return f"{user}/{name}"


def put_file(cell: PlainCell, key: str, document: dict[str, Any], dry_run: bool) -> tuple[Any, dict[str, Any]]:
    """(the job as the cell has it, None for a new one; the cell's answer to the file PUT)."""
    try:
        current = cell.request("GET", f"/v1/jobs/{key}").get("job")
    except cellfile.ClientError as err:
        if err.status != 404:
            raise
        current = None
    return current, send(cell, "PUT", f"/v1/jobs/{key}" + ("?dry_run=true" if dry_run else ""), document)


def plan(a: Args) -> int:
    """`job plan FILE [--json]` (cli/rollout.py's): what `job run FILE` would change, written
    nowhere; exit 0 for no change, 1 for a change, 255 for an error, as `nomad job plan`."""
    from reference.cli.rolling import plan_text

    document = read_job_file(a.positional[0])
    key = job_key(document)
    try:
        with a.cell() as cell:
            current, answer = put_file(cell, key, document, dry_run=True)
    except cellfile.ClientError as err:
        print(cli_plain.error_text(err), file=sys.stderr)
        return EXIT_PLAN_ERROR
    print(cli_plain.dump(answer, "json") if a.has("--json") else plan_text(answer, current))
    return 0 if answer.get("unchanged") else 1


def run(a: Args) -> int:
    """`job run FILE [--detach] [--timeout S] [--json]`: PUT of the whole file, then the
    rollout followed (cli/rollout.py's `run`)."""
    from reference.cli.rolling import follow_rollout, plan_text

    document = read_job_file(a.positional[0])
    key = job_key(document)
    wait_s = a.float_option("--timeout", WAIT_S)
    as_json, detach = a.has("--json"), a.has("--detach")
    with a.cell() as cell:
        current, answer = put_file(cell, key, document, dry_run=False)
        print(cli_plain.dump(answer, "json") if as_json else plan_text(answer, current), flush=True)
        if answer.get("created") and not detach:
            count, revision = task_count(document), answer.get("revision")
            if count and isinstance(revision, int):
                return wait_for_start(cell, key, count, revision, wait_s, quiet=as_json)
            return 0
        if detach or answer.get("unchanged"):
            return 0
        out = sys.stderr if as_json else sys.stdout
        outcome = follow_rollout(lambda: cell.request("GET", f"/v1/jobs/{key}"),
                                 lambda text: print(text, file=out, flush=True), wait_s)  # fmt: skip
    if outcome == "stopped":
        return fail(f"the rollout of {key} stopped; see `minborg job show {key}`, fix the file and run it again, "
                    f"or `minborg job revert {key} VERSION`")  # fmt: skip
    if outcome == "timeout":
        return fail(f"the rollout of {key} did not finish within {wait_s:.0f}s; see `minborg job show {key}`")
    print(f"every task of {key} runs the new version", file=out)
    return 0
