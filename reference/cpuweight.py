"""A heavier CPU weight for a session on a crowded host: the autogroup nice of a process's session.

With autogroups (Linux's default for a desktop or a VM), the kernel weighs sessions against each
other first and the processes of a session only among themselves. A local cell starts every
process in a session of its own, so a hundred borglets are a hundred sessions, each weighed
like the leader's: under a flood of task starts the leader's event loop waited for its
session's turn behind theirs, and reads of the API took a second (docs/decisions.md, "The
control plane's weight"). On a real cell the control plane has hosts of its own; on one host
its sessions ask for a heavier weight instead. Lowering a nice value takes root
(CAP_SYS_NICE); elsewhere, or on a kernel without autogroups, nothing changes.
"""

from __future__ import annotations

# The autogroup nice of a session that must not wait behind the machines: -10 weighs about
# nine times a default session (the kernel's weight table: 9548 against 1024). The lease
# keeper's, whose work is a few round trips a second.
AHEAD_NICE = -10
# The masters' and etcd's sessions: -3 weighs about twice a default one (1991). Heavier (-5,
# three times) kept reads as fast but slowed a 10,000-task start on 3 replicas by about 10 s:
# three masters and three etcd members ahead of every borglet (docs/decisions.md).
CONTROL_PLANE_NICE = -3


def weigh_session(pid: int | str = "self", nice: int = AHEAD_NICE) -> bool:
    """Set the autogroup nice of `pid`'s session (the whole session: call it on a session's
    leader, or after `os.setsid`); False where the kernel has no autogroups or refuses."""
    try:
        with open(f"/proc/{pid}/autogroup", "w") as f:
            f.write(str(nice))
    except OSError:
        return False
    return True


def session_nice(pid: int | str = "self") -> int | None:
    """The autogroup nice of `pid`'s session ('/autogroup-42 nice -10' -> -10); None without autogroups."""
    try:
        with open(f"/proc/{pid}/autogroup") as f:
            return int(f.read().split()[-1])
    except (OSError, ValueError, IndexError):
        return None
