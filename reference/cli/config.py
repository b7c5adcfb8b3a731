"""The `minborg config` commands: named contexts for several cells, as kubectl's (cli/contexts.py keeps them)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from reference.cli import contexts
from reference.cli.common import EXIT_USAGE, OutputOpt, emitted, examples, fail, output_of
from reference.cli.plain import render

config_app = typer.Typer(
    help="Contexts: several cells' masters, CA, token and default user, in ~/.config/minborg/config.",
    no_args_is_help=True,
)


def _load() -> dict:
    try:
        return contexts.load()
    except contexts.ContextError as err:
        raise fail(str(err), EXIT_USAGE) from None


def _save(doc: dict) -> Path:
    try:
        return contexts.save(doc)
    except OSError as err:
        raise fail(f"cannot write {contexts.config_path()}: {err.strerror or err}") from None


@config_app.command("get-contexts", epilog=examples("minborg config get-contexts", "minborg config get-contexts -o name"))
def get_contexts(output: OutputOpt = None) -> None:
    """List the contexts; `*` marks the current one. Tokens are never printed."""
    fmt = output_of(output, False)
    doc = _load()
    current = doc.get("current-context")
    items = [{"name": name, "current": name == current, "master": c.get("master"), "ca": c.get("ca"),
              "user": c.get("user"), "token": "set" if c.get("token") else None}
             for name, c in sorted(doc["contexts"].items())]  # fmt: skip
    if emitted(items, fmt):
        return
    if not items:
        print(f"no contexts in {contexts.config_path()}: make one with `minborg config set-context NAME --master URL`")
        return
    rows = [["*" if i["current"] else "", i["name"], i["master"] or "-", i["user"] or "-", i["ca"] or "-",
             "yes" if i["token"] else "no"] for i in items]  # fmt: skip
    print(render(("current", "name", "master", "user", "ca", "token"), rows))


@config_app.command("current-context", epilog=examples("minborg config current-context"))
def current_context() -> None:
    """Print the current context's name (exit 1 if none is set)."""
    current = _load().get("current-context")
    if not current:
        raise fail("no current context: `minborg config use-context NAME`, or set one with `minborg config set-context`")
    print(current)


@config_app.command("use-context", epilog=examples("minborg config use-context prod"))
def use_context(name: Annotated[str, typer.Argument(help="A context that set-context made.")]) -> None:
    """Make NAME the current context: every command then talks to its cell."""
    doc = _load()
    try:
        contexts.use_context(doc, name)
    except contexts.ContextError as err:
        raise fail(str(err), EXIT_USAGE) from None
    _save(doc)
    print(f"switched to context {name} ({doc['contexts'][name].get('master')})")


@config_app.command("set-context", epilog=examples(
    "minborg config set-context prod --master https://borg.example.com:8443 --ca prod-ca.pem --token-file alice.token",
    "minborg config set-context local --master http://127.0.0.1:8080 --user demo",
    "minborg config set-context prod --user alice",
))
def set_context(
    name: Annotated[str, typer.Argument(help="The context's name, e.g. prod.")],
    master: Annotated[str | None, typer.Option("--master", help="The cell's master URL(s), comma-separated.")] = None,
    ca: Annotated[Path | None, typer.Option("--ca", help="The CA certificate (PEM) of the masters' https.")] = None,
    token: Annotated[str | None, typer.Option("--token", help="The bearer token to send (see `minborg user add`).")] = None,
    token_file: Annotated[Path | None, typer.Option("--token-file", help="Read the token from this file.")] = None,
    user: Annotated[
        str | None, typer.Option("--user", help="The default user: `job show hello_world` means USER/hello_world.")
    ] = None,
) -> None:
    """Create or change a context (only the fields given); the first one made becomes current.
    The file is written readable by its owner only: it holds the token."""
    if token is not None and token_file is not None:
        raise typer.BadParameter("give --token or --token-file, not both", param_hint="--token")
    if token_file is not None:
        try:
            token = token_file.read_text().strip()
        except OSError as err:
            raise typer.BadParameter(f"cannot read {token_file}: {err.strerror or err}", param_hint="--token-file") from None
    if ca is not None and not ca.is_file():
        raise typer.BadParameter(f"{ca} is not a file", param_hint="--ca")
    doc = _load()
    try:
        contexts.set_context(doc, name, master=master, ca=str(ca.resolve()) if ca else None, token=token, user=user)
    except contexts.ContextError as err:
        raise fail(str(err), EXIT_USAGE) from None
    path = _save(doc)
    current = " (current)" if doc["current-context"] == name else ""
    print(f"context {name}{current} set in {path}")


@config_app.command("delete-context", epilog=examples("minborg config delete-context old"))
def delete_context(name: Annotated[str, typer.Argument(help="The context to remove.")]) -> None:
    """Remove a context (if it was current, no context is current after)."""
    doc = _load()
    try:
        contexts.delete_context(doc, name)
    except contexts.ContextError as err:
        raise fail(str(err), EXIT_USAGE) from None
    _save(doc)
    print(f"deleted context {name}")
