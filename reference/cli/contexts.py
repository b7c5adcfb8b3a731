"""Named contexts, as kubectl's: for each cell a user works with, its masters' URLs, the CA that signs their certificates, a token and a default user, kept in ~/.config/minborg/config (mode 0600), with the standard library alone.

A command given none of --master, --state-dir, $MINBORG_MASTER and $MINBORG_STATE_DIR uses
the current context (or the one `minborg --context NAME` names): its masters, and its token
and user where --token, $MINBORG_TOKEN and $MINBORG_USER say none. The context reaches every
command, the fast path's and the full command line's alike, as the environment variables
it stands for (`apply`), set before either parses its arguments.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

TYPE_CHECKING = False
if TYPE_CHECKING:  # typing is imported by type checkers only: it costs the fast path's start
    from typing import Any

CONFIG_ENV = "MINBORG_CONFIG"  # another file than ~/.config/minborg/config (tests, several setups)
CONTEXT_ENV = "MINBORG_CONTEXT"  # a context for this shell only, as --context for one command
CA_ENV = "MINBORG_CA"  # the CA both command lines' clients trust for an https cell (cli/http.py)
IN_USE_ENV = "MINBORG_CONTEXT_IN_USE"  # set by `apply`: the context this command talks to, for its messages
NAME_RULE = "letters, digits, '.', '_' and '-', at most 63, starting with a letter or digit"
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$")
FIELDS = ("master", "ca", "token", "user")
# The commands a context applies to: those that talk to a cell's API. `cell up`, `cell down`
# and the daemons act on a local state dir and never look at one.
APPLIES = ("job", "task", "machine", "events", "bns", "user", "quota", "alloc", "ui", "__complete")


class ContextError(ValueError):
    """A context or config file a user can fix: the message says how."""


def config_path() -> Path:
    """$MINBORG_CONFIG, else $XDG_CONFIG_HOME/minborg/config, else ~/.config/minborg/config."""
    if os.environ.get(CONFIG_ENV):
        return Path(os.environ[CONFIG_ENV]).expanduser()
    base = os.environ.get("XDG_CONFIG_HOME") or os.path.join(os.path.expanduser("~"), ".config")
    return Path(base) / "minborg" / "config"


def load(path: Path | None = None) -> dict[str, Any]:
    """The config file as {"current-context": NAME | None, "contexts": {NAME: {...}}}; empty if absent."""
    path = path or config_path()
    try:
        text = path.read_text()
    except FileNotFoundError:
        return {"current-context": None, "contexts": {}}
    except OSError as err:
        raise ContextError(f"cannot read {path}: {err.strerror or err}") from None
    try:
        doc = json.loads(text) if text.strip() else {}
    except ValueError as err:
        raise ContextError(f"{path} is not a minborg config (JSON): {err}; fix it or remove it") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("contexts", {}), dict):
        raise ContextError(f"{path} is not a minborg config: expected {{\"contexts\": {{NAME: {{...}}}}}}")
    doc.setdefault("contexts", {})
    doc.setdefault("current-context", None)
    return doc


def save(doc: dict[str, Any], path: Path | None = None) -> Path:
    """Write the config atomically, readable by its owner only (it holds tokens)."""
    import tempfile  # here, not at the top: every command imports this module, few write

    path = path or config_path()
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    fd, temp = tempfile.mkstemp(dir=path.parent, prefix=".config-")  # mkstemp creates it 0600
    try:
        with os.fdopen(fd, "w") as f:
            json.dump(doc, f, indent=2, sort_keys=True)
            f.write("\n")
        os.chmod(temp, 0o600)
        os.replace(temp, path)
    except BaseException:
        Path(temp).unlink(missing_ok=True)
        raise
    return path


def check_name(name: str) -> str:
    if not _NAME.fullmatch(name):
        raise ContextError(f"context name {name!r}: {NAME_RULE}")
    return name


def set_context(doc: dict[str, Any], name: str, **fields: str | None) -> dict[str, Any]:
    """Create or change context `name`: each field given replaces its value ("" removes it)."""
    check_name(name)
    context = dict(doc["contexts"].get(name) or {})
    for key, value in fields.items():
        if key not in FIELDS:
            raise ContextError(f"unknown context field {key!r}: {', '.join(FIELDS)}")
        if value is None:
            continue
        if value == "":
            context.pop(key, None)
        else:
            context[key] = value
    if not context.get("master"):
        raise ContextError(f"context {name} has no master: give --master URL (e.g. http://10.0.0.5:8080)")
    doc["contexts"][name] = context
    if not doc.get("current-context"):
        doc["current-context"] = name  # the first context made is the current one, as kubectl does
    return context


def use_context(doc: dict[str, Any], name: str) -> None:
    if name not in doc["contexts"]:
        known = ", ".join(sorted(doc["contexts"])) or "none yet"
        raise ContextError(f"no context named {name!r} (known: {known}); make it with `minborg config set-context {name} --master URL`")
    doc["current-context"] = name


def delete_context(doc: dict[str, Any], name: str) -> None:
    if doc["contexts"].pop(name, None) is None:
        raise ContextError(f"no context named {name!r}")
    if doc.get("current-context") == name:
        doc["current-context"] = None


def chosen(doc: dict[str, Any], name: str | None) -> tuple[str, dict[str, Any]] | None:
    """The context `name` (--context, $MINBORG_CONTEXT), else the current one; None if neither is set."""
    name = name or os.environ.get(CONTEXT_ENV) or doc.get("current-context")
    if not name:
        return None
    context = doc["contexts"].get(name)
    if not isinstance(context, dict):
        raise ContextError(f"the context {name!r} is not in {config_path()}: see `minborg config get-contexts`")
    return name, context


def apply(args: list[str], environ: Any = None) -> list[str]:
    """Take a leading `--context NAME` off `args` and, for a command that talks to a cell and
    names none, put the chosen context's master, token, user and CA in the environment (as
    $MINBORG_MASTER, $MINBORG_TOKEN, $MINBORG_USER, $MINBORG_CA), each only where nothing
    more explicit is set. Returns the arguments left."""
    env = os.environ if environ is None else environ
    name = None
    rest = list(args)
    # The leading global options: --token (its value kept in place) and --context (taken off).
    i = 0
    while i < len(rest):
        if rest[i] == "--context" and i + 1 < len(rest):
            name = rest[i + 1]
            del rest[i : i + 2]
        elif rest[i].startswith("--context="):
            name = rest[i].partition("=")[2]
            del rest[i]
        elif rest[i] == "--token":
            i += 2
        elif rest[i].startswith("--token="):
            i += 1
        else:
            break
    command = rest[i : i + 2]
    if not command or not (command[0] in APPLIES or command == ["cell", "status"]):
        return rest
    if any(a in ("--master", "--state-dir") or a.startswith(("--master=", "--state-dir=")) for a in rest):
        return rest
    if env.get("MINBORG_MASTER") or env.get("MINBORG_STATE_DIR"):
        return rest
    if name is None and not env.get(CONTEXT_ENV) and not config_path().exists():
        return rest  # no contexts at all: the local cell, as before
    found = chosen(load(), name)
    if found is None:
        return rest
    chosen_name, context = found
    env["MINBORG_MASTER"] = context["master"]
    env[IN_USE_ENV] = chosen_name
    for key, var in (("token", "MINBORG_TOKEN"), ("user", "MINBORG_USER"), ("ca", CA_ENV)):
        if context.get(key) and not env.get(var):
            env[var] = context[key]
    return rest
