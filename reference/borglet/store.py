"""The borglet's durable task table: `<state-dir>/tasks.json`, written atomically."""

from __future__ import annotations

import json
import os
import tempfile
from typing import Any

from reference import fastjson

SCHEMA_VERSION = 1


def save(path: str, table: dict[str, Any]) -> None:
    """Write the table so a crash leaves either the old or the new file, never a torn one."""
    directory = os.path.dirname(path) or "."
    os.makedirs(directory, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".tasks.", suffix=".json", dir=directory)
    try:
        with os.fdopen(fd, "wb") as handle:
            # One call, no indent: a busy borglet rewrites its table every second while it
            # starts tasks, and the standard library's encoder was a quarter of its CPU then.
            handle.write(fastjson.dumps({"schema": SCHEMA_VERSION, **table}, sort_keys=True))
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def load(path: str) -> dict[str, Any]:
    """The saved table, or an empty one when there is none yet."""
    try:
        with open(path) as handle:
            table = json.load(handle)
    except FileNotFoundError:
        return {}
    if table.get("schema") != SCHEMA_VERSION:
        raise SystemExit(
            f"{path} has schema {table.get('schema')!r}, expected {SCHEMA_VERSION}: "
            "move it away to start with an empty task table"
        )
    return table
