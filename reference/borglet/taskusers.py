"""Which uid a task runs as when its borglet runs as root: one stable, unprivileged uid per job user.

A user's uid is derived from its name (SHA-256 into the range), so every borglet of one host
(a local cell runs several) gives a user the same uid, and two users' tasks run under different
uids, unable to signal or trace each other, unless their names collide; a borglet that already
gave the derived uid to another user takes the next free one and records every choice in its
task table, so a restarted borglet keeps them. The gid is the uid's number, and a task gets no
supplementary groups. Numeric ids need no passwd entry: the range sits above every uid a Linux
distribution hands to accounts or to user namespaces' subordinate ranges, and below 2^31, for
tools that read a uid as a signed 32-bit number.
"""

from __future__ import annotations

import hashlib
import os
import stat
import sys
from collections.abc import Mapping
from pathlib import Path

FIRST_UID = 2_000_000_000
UID_COUNT = 1 << 24
NO_USER = "-"  # the user of a task whose job names none (a sync written by hand)


def user_of(job: str, task_id: str) -> str:
    """The job's user: 'alice' of job 'alice/web' (or, without a job, of task 'alice/web/0#0')."""
    user = (job or task_id).partition("/")[0]
    return user or NO_USER


def assign(
    user: str, taken: Mapping[str, int], first: int = FIRST_UID, count: int = UID_COUNT
) -> int:
    """The uid of `user`: the one it was given (`taken`, user -> uid), else the one its name
    derives, else the next one after it that no other user holds."""
    if user in taken:
        return taken[user]
    used = set(taken.values())
    start = int.from_bytes(hashlib.sha256(user.encode()).digest()[:8], "big") % count
    for step in range(count):
        uid = first + (start + step) % count
        if uid not in used:
            return uid
    raise ValueError(f"all {count} task uids from {first} are given to other users")


def private_ancestor(path: str) -> str | None:
    """The first directory on the way to `path` (or the file itself) that other users may not
    pass or run, or None."""
    real = Path(os.path.realpath(path))
    for step in (*reversed(real.parents), real):
        if not os.stat(step).st_mode & stat.S_IXOTH:
            return str(step)
    return None


#: The system's Python, which every task's uid may run (a Python under /root may not be).
SYSTEM_PYTHON = "/usr/bin/python3"


def task_python(python: str = sys.executable) -> str:
    """A Python that every task's uid may run: `python` where nothing on its path keeps other
    users out, else the system's. Tests and tools that start Python tasks name this one."""
    return python if private_ancestor(python) is None else SYSTEM_PYTHON


def local_task_env(workdir: str) -> list[str]:
    """The borglet's `--task-env` flags on a local cell (`cell up`, the test cells): the
    directory it ran in and the package's root on PYTHONPATH, so a task's `python3 -m
    examples...` imports from there as the system's Python; Python output unbuffered, so a
    task's lines reach its log file as they are printed. Nothing else of the operator's."""
    package_root = str(Path(__file__).resolve().parents[2])
    path = os.pathsep.join(dict.fromkeys([workdir, package_root]))
    return ["--task-env", f"PYTHONPATH={path}", "--task-env", "PYTHONUNBUFFERED=1"]
