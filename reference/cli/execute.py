"""`minborg task exec JOB INDEX -- CMD [ARGS...]`: run a command in a running task, as `kubectl exec` does, and exit with its exit code; with -it, on a terminal, stdin streamed (cli/terminal.py)."""

from __future__ import annotations

from typing import Annotated

import typer

from reference import execspec
from reference.cellfile import find_token
from reference.cli.common import (
    EXIT_USAGE,
    Credentials,
    JsonOpt,
    MasterOpt,
    ReadJobArg,
    StateDirOpt,
    client,
    examples,
    fail,
    handles_errors,
    job_key,
)
from reference.cli.views import exec_answer

EXAMPLES = examples(
    "minborg task exec demo/hello_world 0 -- ls -la",
    "minborg task exec -it demo/hello_world 0 -- /bin/sh",
    "minborg task exec demo/hello_world 0 -- sh -c 'id; cat /proc/self/cgroup'",
    "minborg task exec demo/hello_world 0 --timeout 300 -- python3 dump_state.py",
)


def exec_in_task(
    job: ReadJobArg,
    index: Annotated[int, typer.Argument(min=0, help="The task's index in its job.")],
    command: Annotated[list[str], typer.Argument(metavar="-- CMD [ARGS]...", help="The command and its arguments, after --.")],
    timeout: Annotated[
        float,
        typer.Option("--timeout", min=1, max=execspec.MAX_TIMEOUT_S, help="Seconds the command may run; then it is killed."),
    ] = execspec.DEFAULT_TIMEOUT_S,
    stdin: Annotated[bool, typer.Option("--stdin", "-i", help="Stream stdin to the command (with -t: -it).")] = False,
    tty: Annotated[bool, typer.Option("--tty", "-t", help="Run it on a terminal: an interactive session (-it).")] = False,
    master: MasterOpt = None,
    state_dir: StateDirOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Run a command in a running task: as its user, in its cgroups and working directory,
    with its environment (in its container, for a container task). Its stdout and stderr are printed once it ends (1 MiB of each at
    most) and this command exits with its exit code (124 if it ran past --timeout).

    Without -it, stdin is /dev/null and there is no terminal. With -it (or either of -i, -t)
    the command runs on a terminal in the task and every key goes to it as typed: Ctrl-D at an
    empty prompt or `exit` ends it, and this command exits with its exit code (--timeout does
    not apply; a session nobody reads for a minute is killed). Only the job's owner or the
    admin may exec into its tasks."""
    if stdin or tty:
        if as_json:
            raise fail("--json: an interactive session prints the terminal, not JSON; leave out -it or --json", EXIT_USAGE)
        from reference.cli.http import PlainCell, cell_urls
        from reference.cli.terminal import interactive

        with client(master, state_dir) as full:
            key = job_key(job, full)
        cell = PlainCell(cell_urls(master, state_dir), find_token(Credentials.token, state_dir))
        raise typer.Exit(interactive(cell, key, index, command))
    with client(master, state_dir, timeout=timeout + 30.0) as cell:
        key = job_key(job, cell)
        answer = cell.request(
            "POST", f"/v1/jobs/{key}/tasks/{index}/exec", json={"command": command, "timeout_s": timeout}
        )
    raise typer.Exit(exec_answer(answer, as_json, timeout))


def register(task_app: typer.Typer) -> None:
    """Add `task exec` to the task group."""
    task_app.command("exec", epilog=EXAMPLES)(handles_errors(exec_in_task))
