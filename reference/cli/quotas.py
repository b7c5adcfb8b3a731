"""`minborg quota`: set, list and delete the users' quotas per priority band (the admin's commands)."""

from __future__ import annotations

from typing import Annotated

import typer
from rich.markup import escape

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
    output_of,
)
from reference.cli.render import console
from reference.resources import format_resources, parse_pairs

quota_app = typer.Typer(help="Set, list and delete the users' quotas per priority band (admin).", no_args_is_help=True)

UserArg = Annotated[str, typer.Argument(metavar="USER", help='The user, or "*" for every user without a quota of its own.')]
BandArg = Annotated[str, typer.Argument(metavar="BAND", help="batch, production or monitoring (best effort is never limited).")]


@quota_app.command("set", epilog=examples(
    'minborg quota set alice batch cpu=100,ram=512GiB',
    "minborg quota set '*' production cpu=8,ram=32GiB",
))
@handles_errors
def set_quota(
    user: UserArg,
    band: BandArg,
    amounts: Annotated[
        str,
        typer.Argument(
            metavar="RESOURCES",
            help="cpu=100,ram=512GiB[,gpu=8...]: as a job's request writes them; a resource left out is zero.",
        ),
    ],
    master: MasterOpt = None,
    state_dir: StateDirOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Set USER's quota in BAND. Jobs already admitted keep running even above a lowered quota:
    only later submissions and growth are checked against it."""
    try:
        figures = parse_pairs(amounts)
    except ValueError as err:
        raise fail(str(err), EXIT_USAGE) from None
    with client(master, state_dir) as cell:
        answer = cell.set_quota(user, band, figures)
    if emitted(answer, output_of(None, as_json)):
        return
    quota = answer.get("quota") or {}
    console.print(
        f"quota of {escape(user)} in {escape(band)}: {format_resources(quota.get('limit'))} "
        f"(its jobs there request {format_resources(quota.get('used'))})"
    )


@quota_app.command("list", epilog=examples(
    'minborg quota list',
))
@handles_errors
def list_quotas(
    master: MasterOpt = None, state_dir: StateDirOpt = None, output: OutputOpt = None, as_json: JsonOpt = False
) -> None:
    """List every quota entry: user ("*" is every user without one of its own), band and limit."""
    fmt = output_of(output, as_json)
    with client(master, state_dir) as cell:
        quotas = cell.quotas()
    if emitted(quotas, fmt):
        return
    for q in quotas:
        console.print(f"{escape(q['user']):<24} {q['band']:<12} {format_resources(q.get('limit'))}")


@quota_app.command("delete", epilog=examples(
    'minborg quota delete alice batch',
))
@handles_errors
def delete_quota(user: UserArg, band: BandArg, master: MasterOpt = None, state_dir: StateDirOpt = None) -> None:
    """Delete USER's own quota in BAND: the user falls back to user "*"'s."""
    with client(master, state_dir) as cell:
        cell.delete_quota(user, band)
    console.print(f"quota of {escape(user)} in {escape(band)} deleted")
