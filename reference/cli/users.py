"""`minborg user`: add, list and revoke the cell's users (the admin's commands)."""

from __future__ import annotations

import time
from typing import Annotated

import typer

from reference.cli.common import (
    JsonOpt,
    MasterOpt,
    OutputOpt,
    StateDirOpt,
    client,
    emitted,
    examples,
    handles_errors,
    output_of,
)
from reference.cli.render import console, errors

user_app = typer.Typer(help="Add, list and revoke the cell's users and their tokens (admin).", no_args_is_help=True)

NameArg = Annotated[str, typer.Argument(metavar="NAME", help="The user: the owner part of its jobs' names (NAME/job).")]


@user_app.command("add", epilog=examples(
    'minborg user add alice',
    'MINBORG_TOKEN=<the token printed> minborg job list',
))
@handles_errors
def add(name: NameArg, master: MasterOpt = None, state_dir: StateDirOpt = None, as_json: JsonOpt = False) -> None:
    """Add a user and print its token, once: only its hash is kept. Hand it to the user, who
    sets MINBORG_TOKEN to it."""
    with client(master, state_dir) as cell:
        answer = cell.add_user(name)
    if as_json:
        emitted(answer, "json")
        return
    print(answer["token"])
    errors.print(
        f"user {name} added. The token above is shown this once; give it to {name} "
        "(export MINBORG_TOKEN=...). Revoke it with `minborg user revoke " + name + "`.",
        soft_wrap=True,
    )


@user_app.command("list", epilog=examples(
    'minborg user list',
))
@handles_errors
def list_users(
    master: MasterOpt = None, state_dir: StateDirOpt = None, output: OutputOpt = None, as_json: JsonOpt = False
) -> None:
    """List the cell's users (names only: no token is kept)."""
    fmt = output_of(output, as_json)
    with client(master, state_dir) as cell:
        users = cell.users()
    if emitted(users, fmt):
        return
    for u in users:
        added = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(u.get("created_at") or 0))
        console.print(f"{u['name']:<24} {'admin' if u.get('admin') else 'user':<6} added {added}")


@user_app.command("revoke", epilog=examples(
    'minborg user revoke alice',
))
@handles_errors
def revoke(name: NameArg, master: MasterOpt = None, state_dir: StateDirOpt = None) -> None:
    """Revoke a user's token: every master refuses it within a second or two."""
    with client(master, state_dir) as cell:
        cell.revoke_user(name)
    console.print(f"user {name} revoked")
