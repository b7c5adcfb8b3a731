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
from collections.abc import Mapping

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
