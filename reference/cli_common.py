"""What every `minborg` command shares: its common options, the cell client, and error exits."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Annotated, Any, ParamSpec, TypeVar

import typer

from reference.cli_render import errors
from reference.client import CellClient, ClientError, format_detail, split_key
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
JsonOpt = Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")]
JobArg = Annotated[str, typer.Argument(metavar="USER/NAME", help="The job, e.g. demo/hello_world.")]

P = ParamSpec("P")
R = TypeVar("R")


def fail(message: str, code: int = EXIT_FAILED) -> typer.Exit:
    """Print `error: message` on stderr; returns the Exit to raise."""
    errors.print(f"[bold red]error:[/bold red] {message}", soft_wrap=True)
    return typer.Exit(code)


def client_error_message(err: ClientError) -> str:
    """A ClientError as one or more lines a person can act on."""
    hints = {
        404: "not found",
        409: "conflict",
        403: "refused (over quota?)",
        422: "invalid request",
        503: "no leader right now; retry in a few seconds",
    }
    if err.status == 0:
        return str(err)
    hint = hints.get(err.status)
    prefix = f"HTTP {err.status}" + (f" ({hint})" if hint else "")
    return f"{prefix}: {format_detail(err.detail)}"


def handles_errors(command: Callable[P, R]) -> Callable[P, R]:
    """Turn the errors a user can cause into a message and an exit code, never a traceback."""

    @functools.wraps(command)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return command(*args, **kwargs)
        except ClientError as err:
            code = EXIT_USAGE if err.status == 422 else EXIT_FAILED
            raise fail(client_error_message(err), code) from None
        except LauncherError as err:
            raise fail(str(err)) from None

    return wrapper


def client(master: str | None, state_dir: str | None, **kw: Any) -> CellClient:
    return CellClient.discover(master, state_dir, **kw)


def job_key(key: str) -> str:
    try:
        user, name = split_key(key)
    except ValueError as err:
        raise typer.BadParameter(str(err), param_hint="USER/NAME") from None
    return f"{user}/{name}"
