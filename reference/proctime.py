"""A process's identity on this host: its pid and its start, in kernel ticks since boot.

A pid alone is reused once its process is gone, so every record of a process this project
starts (a master, a borglet, an etcd member, a task) keeps its start beside its pid, and
signals or adopts only the process that matches both.

The start is `/proc/PID/stat`'s field 22, the clock ticks from boot to the process's start,
taken as it is. psutil's `create_time()` is not used for this: it adds those ticks to
`/proc/stat`'s btime, the boot on the wall clock, and the kernel moves btime whenever the wall
clock is stepped (an NTP step, a virtual machine restored from a snapshot, `date -s`). After a
step every create_time on the host has moved by the step, and each recorded process looked
gone: a launcher called its live masters and borglets exited, and a borglet took its running
tasks for ended and started them again. Ticks since boot never move while the host is up.

No psutil here: the fast command line reads this without importing it."""

from __future__ import annotations

import os

CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def stat_fields(pid: int) -> list[bytes] | None:
    """The fields of /proc/PID/stat after the command name (which may hold spaces and
    parentheses): [0] is the state, [19] the start in ticks since boot; None when there is
    no such process."""
    if pid < 1:
        return None
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            data = f.read()
    except OSError:
        return None
    fields = data[data.rindex(b")") + 2 :].split()
    return fields if len(fields) > 19 else None


def start_ticks(pid: int) -> int | None:
    """When process `pid` started, in clock ticks since boot; None if there is none."""
    fields = stat_fields(pid)
    return int(fields[19]) if fields is not None else None


def is_started_at(pid: int, ticks: int) -> bool:
    """Whether `pid` is a live process (not a zombie) that started at `ticks` since boot."""
    fields = stat_fields(pid)
    return fields is not None and fields[0] != b"Z" and int(fields[19]) == ticks


def boot_second() -> int | None:
    """/proc/stat's btime: the boot on the wall clock now, in whole seconds (the figure psutil
    adds to a start's ticks); None without it."""
    try:
        with open("/proc/stat", "rb") as f:
            return next(int(line.split()[1]) for line in f if line.startswith(b"btime "))
    except (OSError, StopIteration, ValueError, IndexError):
        return None


def ticks_of_create_time(create_time: float) -> int | None:
    """The ticks since boot of a start recorded as psutil's create_time (btime + ticks), by
    the boot as it reads now: for records written before starts were kept in ticks."""
    boot = boot_second()
    return None if boot is None else round((create_time - boot) * CLOCK_TICKS)
