"""The borglet's durable task table: `<state-dir>/tasks.json`, written atomically.

A save writes the new table into a spare file beside it, `.tasks.json.next`, and swaps the two
names in one step (renameat2 with RENAME_EXCHANGE): `tasks.json` is then the new table and the
spare holds the old one, to be overwritten by the next save. A crash leaves `tasks.json` either
the old table or the new one, never a torn one, as a rename over it would; but no save creates
or deletes a file. A busy borglet saves every second, a hundred of them on one host a hundred
times a second, and on ext4 without a journal each freed inode is passed over by every later
file creation for a minute or more (`recently_deleted`); each task start creates three files.
Where the exchange is not supported (an older kernel or another file system) the spare is
renamed over the table instead, as before.
"""

from __future__ import annotations

import ctypes
import errno
import json
import os
from typing import Any

from reference import fastjson

SCHEMA_VERSION = 1
RENAME_EXCHANGE = 2  # linux/fs.h
AT_FDCWD = -100

try:
    _renameat2 = ctypes.CDLL(None, use_errno=True).renameat2
    _renameat2.argtypes = (ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint)
    _renameat2.restype = ctypes.c_int
except (AttributeError, OSError):  # a C library without renameat2
    _renameat2 = None


def exchange(a: str, b: str) -> bool:
    """Swap the names `a` and `b` atomically; False where the system cannot (either must exist)."""
    if _renameat2 is None:
        return False
    if _renameat2(AT_FDCWD, os.fsencode(a), AT_FDCWD, os.fsencode(b), RENAME_EXCHANGE) == 0:
        return True
    err = ctypes.get_errno()
    if err in (errno.ENOSYS, errno.EINVAL, errno.ENOTSUP, errno.EOPNOTSUPP):
        return False
    raise OSError(err, os.strerror(err), a)


def spare_path(path: str) -> str:
    """The file a save writes before swapping it in."""
    directory, name = os.path.split(path)
    return os.path.join(directory, f".{name}.next")


def save(path: str, table: dict[str, Any]) -> None:
    """Write the table so a crash leaves either the old or the new file, never a torn one."""
    directory = os.path.dirname(path) or "."
    os.makedirs(directory, exist_ok=True)
    # One call, no indent: a busy borglet rewrites its table every second while it starts
    # tasks, and the standard library's encoder was a quarter of its CPU then.
    data = fastjson.dumps({"schema": SCHEMA_VERSION, **table}, sort_keys=True)
    spare = spare_path(path)
    fd = os.open(spare, os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        os.ftruncate(fd, len(data))  # the old table it held may have been longer
        os.fdatasync(fd)
    finally:
        os.close(fd)
    if not os.path.exists(path) or not exchange(spare, path):
        os.replace(spare, path)  # the first save, or a system without the exchange


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
