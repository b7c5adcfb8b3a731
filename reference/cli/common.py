"""What every `minborg` command shares: its common options, the cell client, and error exits."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Annotated, Any, ParamSpec, TypeVar

import typer

from reference.cellfile import client_error_message, find_token
from reference.cli.http import ca_file, cell_urls
from reference.cli.output import TemplateError, is_data
from reference.cli.output import valid as valid_output
from reference.cli.plain import OUTPUTS, dump, error_text, job_by_name
from reference.cli.render import errors
from reference.client import CellClient, ClientError, split_key
from reference.launcher import LauncherError

# Exit codes: 1 the cell refused or could not be reached, 2 the user's input is invalid.
EXIT_FAILED = 1
EXIT_USAGE = 2

MasterOpt = Annotated[
    str | None,
    typer.Option(
        "--master",
        help="Master URL(s), comma-separated. Default: $MINBORG_MASTER, else the local cell file.",
    ),
]
StateDirOpt = Annotated[
    str | None,
    typer.Option(
        "--state-dir",
        help="State dir of the local cell. Default: $MINBORG_STATE_DIR, else ./.minborg.",
    ),
]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print JSON instead of a table (as -o json).")]
OutputOpt = Annotated[
    str | None,
    typer.Option("--output", "-o", help="table (the default), wide (more columns), json, yaml, name, or jsonpath=TEMPLATE (as {.items[*].name})."),
]
WatchOpt = Annotated[
    bool, typer.Option("--watch", "-w", help="After the list, print each change as it happens (Ctrl-C stops).")
]
WatchForOpt = Annotated[float, typer.Option("--for", min=1, help="With -w: stop after this many seconds.")]
JobArg = Annotated[str, typer.Argument(metavar="USER/NAME", help="The job, e.g. demo/hello_world.")]
# Reading commands also take the job's NAME alone: $MINBORG_USER's, else the cell's one job of that name.
ReadJobArg = Annotated[
    str,
    typer.Argument(
        metavar="[USER/]NAME",
        help="The job, e.g. demo/hello_world, or hello_world: $MINBORG_USER's job, else the cell's one job of that name.",
    ),
]

P = ParamSpec("P")
R = TypeVar("R")


def examples(*lines: str) -> str:
    """A command's epilog: its example lines, kept as written (click's \\b: not rewrapped)."""
    return "\b\nExamples:\n" + "\n".join(f"  {line}" for line in lines)


def fail(message: str, code: int = EXIT_FAILED) -> typer.Exit:
    """Print `error: message` on stderr; returns the Exit to raise."""
    errors.print(f"[bold red]error:[/bold red] {message}", soft_wrap=True)
    return typer.Exit(code)


def handles_errors(command: Callable[P, R]) -> Callable[P, R]:
    """Turn the errors a user can cause into a message and an exit code, never a traceback."""

    @functools.wraps(command)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return command(*args, **kwargs)
        except ClientError as err:
            code = EXIT_USAGE if err.status == 422 else EXIT_FAILED
            text = error_text(err)
            if not text.startswith("error: "):  # no cell answers: the line says what to do
                errors.print(text, markup=False, soft_wrap=True)
                raise typer.Exit(code) from None
            raise fail(client_error_message(err), code) from None
        except LauncherError as err:
            raise fail(str(err)) from None

    return wrapper


def output_of(output: str | None, as_json: bool) -> str:
    """The output format asked for: --json is -o json."""
    if as_json:
        return "json"
    if output is None:
        return "table"
    if not valid_output(output):
        raise typer.BadParameter(f"{output!r}: choose one of {', '.join(OUTPUTS)}", param_hint="--output")
    return output


def emitted(data: Any, output: str) -> bool:
    """Print `data` as JSON, YAML, names or a jsonpath template when that is the output asked
    for; False for a table. A template outside the subset understood is a usage error."""
    if is_data(output):
        try:
            print(dump(data, output))
        except TemplateError as err:
            raise typer.BadParameter(str(err), param_hint="--output") from None
        return True
    return False


class Credentials:
    """The token `minborg --token` was given, for this invocation (None: $MINBORG_TOKEN, else
    the state dir's admin token)."""

    token: str | None = None


def client(master: str | None, state_dir: str | None, **kw: Any) -> CellClient:
    """The cell's client, as CellClient.discover finds it; a stopped local cell fails at once."""
    kw.setdefault("ca", ca_file(state_dir))  # an https cell's: $MINBORG_CA, else the state dir's
    return CellClient(cell_urls(master, state_dir), token=find_token(Credentials.token, state_dir), **kw)


def job_key(key: str, cell: CellClient | None = None) -> str:
    """USER/NAME; a reading command (given the `cell`) also takes NAME alone (cli_plain.job_by_name)."""
    if cell is not None and "/" not in key.strip() and key.strip():
        try:
            return job_by_name(key.strip(), cell.jobs, lambda: cell.request("GET", "/v1/whoami"))
        except ValueError as err:
            raise typer.BadParameter(str(err), param_hint="USER/NAME") from None
    try:
        user, name = split_key(key)
    except ValueError as err:
        raise typer.BadParameter(str(err), param_hint="USER/NAME") from None
    return f"{user}/{name}"
