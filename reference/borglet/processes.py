"""Thin wrappers over OS processes: spawn a task, check identity, signal a session."""

from __future__ import annotations

import contextlib
import ctypes
import errno
import logging
import os
import platform
import re
import resource
import shutil
import subprocess
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from hashlib import sha1
from typing import Any

from reference import procscan, proctime
from reference.borglet import cgroups, logs, spawner

log = logging.getLogger(__name__)


def sanitize(task_id: str) -> str:
    """A file-system-safe, collision-free name for a task id: 'alice/web/3#0' -> 'alice_web_3_0-1a2b3c4d'."""
    clean = re.sub(r"[^A-Za-z0-9._-]+", "_", task_id).strip("._") or "task"
    return f"{clean[:80]}-{sha1(task_id.encode()).hexdigest()[:8]}"


#: The PATH of a task whose job names none: the system's programs, nothing of the borglet's.
TASK_PATH = "/usr/local/bin:/usr/bin:/bin"

_libc = ctypes.CDLL(None, use_errno=True)
# setgroups(2) by number: glibc's wrapper changes the groups of every thread of the process
# (the borglet's too), the system call only those of the calling thread.
# Elsewhere a job user's task fails to spawn, saying so.
_SYS_SETGROUPS = {"x86_64": 116, "aarch64": 159, "arm64": 159}.get(platform.machine())


@contextlib.contextmanager
def file_identity(uid: int | None) -> Iterator[None]:
    """Run the block with the calling thread's file-system ids set to `uid` (gid the same
    number, no supplementary groups), its other ids left as they are; None: unchanged.

    CPython's child enters its working directory before it sets its ids (_posixsubprocess),
    so a root borglet's child would enter a directory the task's user may not: with these
    ids, inherited by the child, that chdir is checked as the user. Changing fsuid away from 0
    also drops the capabilities that bypass file permissions, from this thread only; the
    real and effective ids stay root's, so no task can signal the borglet meanwhile."""
    if uid is None:
        yield
        return
    if _SYS_SETGROUPS is None:
        raise OSError(errno.ENOSYS, f"no setgroups system call number known for {platform.machine()}")
    groups = os.getgroups()
    _setgroups([])
    fsgid = _libc.setfsgid(uid)  # each returns the id it replaced
    fsuid = _libc.setfsuid(uid)
    try:
        yield
    finally:
        _libc.setfsuid(fsuid)
        _libc.setfsgid(fsgid)
        _setgroups(groups)


def _setgroups(groups: list[int]) -> None:
    array = (ctypes.c_uint * max(1, len(groups)))(*groups)
    if _libc.syscall(_SYS_SETGROUPS, len(groups), array) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"setgroups: {os.strerror(err)}")


def check_strings(command: list[str], env: Mapping[str, str], cwd: str | None) -> None:
    """ValueError naming the first string the kernel cannot take: a NUL in the command, an
    argument, an environment name or value, or the working directory; '=' in a name."""
    for i, arg in enumerate(command):
        if "\0" in arg:
            raise ValueError(f"command[{i}] holds a NUL byte")
    for name, value in env.items():
        if "\0" in name or "=" in name or not name:
            raise ValueError(f"environment name {name!r} is empty or holds '=' or a NUL byte")
        if "\0" in value:
            raise ValueError(f"environment variable {name} holds a NUL byte")
    if cwd is not None and "\0" in cwd:
        raise ValueError("cwd holds a NUL byte")


@dataclass(frozen=True)
class Confinement:
    """What a task's process is under from its first instruction (its isolation's choice):
    the cgroup v1 groups it is born in ({controller: directory}), the pids limit of its pids
    group, and an address-space rlimit in bytes."""

    cgroups: Mapping[str, str] = field(default_factory=dict)
    pids_max: int | None = None
    rlimit_as: int | None = None


def spawn(
    command: list[str],
    env: Mapping[str, str],
    cwd: str | None,
    log_dir: str,
    user: int | None = None,
    confinement: Confinement | None = None,
) -> subprocess.Popen:
    """Start a task in its own session with stdout and stderr appended to their files in
    `log_dir` (borglet/logs.py); with `user`, as that uid, gid the same number, and no
    supplementary groups (borglet/taskusers.py); under `confinement` before it runs.

    No step that the job's input reaches runs as root. Through the spawn helper
    (borglet/spawner.py), exec'd on vfork with an empty environment: it joins the task's groups
    and sets its limits as root, drops every id, then enters `cwd`, reads the job's environment
    and looks the program up on the job's PATH as the user. Where the helper cannot be built,
    CPython's fork path does the same (`fork_spawn`), at 4-8 ms of the borglet's CPU a start
    instead of about 0.7 (docs/decisions.md, "The spawn helper").
    """
    check_strings(command, env, cwd)
    out, err = logs.open_streams(log_dir)
    try:
        return start(command, env, cwd, out, err, user, confinement or Confinement())
    finally:
        os.close(out)
        os.close(err)


def start(
    command: list[str], env: Mapping[str, str], cwd: str | None, out: int, err: int,
    user: int | None, confinement: Confinement,
) -> subprocess.Popen:  # fmt: skip
    """`command` started as `spawn` starts a task, its stdout and stderr on the descriptors
    `out` and `err` (a task's log files, or the pipes of a `task exec`): through the spawn
    helper, else by `fork_spawn`."""
    helper = spawner.helper()
    if helper is not None:
        dirs = list(dict.fromkeys(confinement.cgroups.values()))
        try:
            return spawner.start(helper, command, env, cwd, out, err, user, dirs, confinement.rlimit_as)
        except spawner.HelperUnusable as gone:  # removed under the borglet, say
            log.warning("%s: this process starts by the fork path", gone)
            spawner.helper.cache_clear()  # found, or built, again at the next start
    return fork_spawn(command, env, cwd, out, err, user, confinement)


def fork_spawn(
    command: list[str], env: Mapping[str, str], cwd: str | None, out: int, err: int,
    user: int | None, confinement: Confinement,
) -> subprocess.Popen:  # fmt: skip
    """CPython's fork path, for a host where the helper cannot be built. The child sets its ids
    in C between fork and exec (`user=`/`group=`/`extra_groups=`), after entering its working
    directory with the user's file ids (`file_identity`); the spawning thread joins the task's
    groups for the fork (`cgroups.spawning_in`), so the child is born there. CPython forks,
    not vforks, a child that sets ids. The address-space limit is set once the process exists."""
    ids: dict[str, Any] = {} if user is None else {"user": user, "group": user, "extra_groups": []}
    with cgroups.spawning_in(dict(confinement.cgroups), confinement.pids_max), file_identity(user):
        proc = subprocess.Popen(
            command,
            env=dict(env),
            cwd=cwd,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=err,
            start_new_session=True,
            close_fds=True,
            **ids,
        )
    if confinement.rlimit_as:
        limit = confinement.rlimit_as
        try:
            resource.prlimit(proc.pid, resource.RLIMIT_AS, (limit, limit))
        except (ProcessLookupError, PermissionError, ValueError) as error:
            log.warning("no address-space limit on pid %d: %s", proc.pid, error)
    return proc


def spawn_error(err: Exception, command: list[str], cwd: str | None, uid: int | None, path: str) -> str:
    """The reason a task failed to spawn, saying what to change (the borglet's `spawn: ...`)."""
    program = command[0] if command else ""
    who = "the borglet's user" if uid is None else f"uid {uid}, its job user's"
    filename = getattr(err, "filename", None)
    if isinstance(err, PermissionError) and cwd is not None and filename == cwd:
        return (
            f"spawn: the task runs as {who} and may not enter its working directory {cwd!r}: "
            "name one that every directory on its path lets other users pass, or none (its own)"
        )
    if isinstance(err, PermissionError):
        return (
            f"spawn: the task runs as {who} and may not run {program!r} ({err.strerror}): a "
            "directory on its path or the file keeps other users out (a Python under /root, "
            "for one); use a program they can run, e.g. /usr/bin/python3, or install it where "
            "other users can reach it"
        )
    if isinstance(err, FileNotFoundError) and cwd is not None and filename == cwd:
        return f"spawn: its working directory {cwd!r} does not exist"
    if isinstance(err, FileNotFoundError):
        where = "" if "/" in program else f" on its PATH ({path})"
        return f"spawn: no program {program!r}{where}: name it by its full path or set PATH in the job's env"
    return f"spawn: {err}"


def child_exited() -> bool:
    """Whether a child of this process has ended and was not waited for yet. It is only
    looked at (WNOWAIT): it stays for its Popen to collect, with its exit status."""
    try:
        return os.waitid(os.P_ALL, 0, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None
    except ChildProcessError:  # no children at all
        return False


def make_workdir(path: str, uid: int) -> str:
    """A task's own working directory, `path`, mode 0700 and owned by `uid` (and gid `uid`);
    its parent is the borglet's, so the task cannot swap it for a link."""
    try:
        os.mkdir(path, 0o700)
    except FileExistsError:
        pass
    os.chown(path, uid, uid, follow_symlinks=False)
    return path


def remove_workdir(path: str) -> None:
    """Delete an ended task's working directory and what it left there (links not followed)."""
    shutil.rmtree(path, ignore_errors=True)


CLOCK_TICKS = proctime.CLOCK_TICKS


def start_time(pid: int) -> float | None:
    """When process `pid` started, on this host's wall clock, to the kernel's tick (10 ms): the
    start time its task reports. Not psutil's create_time, which adds the start's ticks since
    boot to /proc/stat's btime, a boot time in whole seconds rounded down: it reads up to a
    second early (0.97 s on a host booted 0.97 s past a second), and a replacement 30 ms old
    looked a second old, up by the rollout's MIN_READY_S (docs/decisions.md). Here the boot is
    the wall clock less the time since boot (CLOCK_BOOTTIME, the clock /proc/PID/stat's start
    counts on), taken to the tick as well, so that the same process reads the same start at
    every call and in every borglet process (a borglet restarted re-adopts its tasks with the
    starts they had; a boot read to the microsecond moved each start by a microsecond or two).
    The process's identity is its start in ticks since boot (`is_same_process`), which no
    step of the wall clock moves."""
    ticks = proctime.start_ticks(pid)
    return None if ticks is None else (boot_ticks() + ticks) / CLOCK_TICKS


def boot_ticks() -> int:
    """This host's boot on the wall clock, in kernel ticks since the epoch: /proc/stat's btime
    (whole seconds, rounded down) and the fraction of a second the wall clock less
    CLOCK_BOOTTIME gives beyond it, rounded to the tick."""
    btime = proctime.boot_second() or 0
    rest = time.time() - time.clock_gettime(time.CLOCK_BOOTTIME) - btime
    return btime * CLOCK_TICKS + round(rest * CLOCK_TICKS)


def is_same_process(pid: int, start_ticks: int | None) -> bool:
    """True when pid is alive (not a zombie) and is the process that started `start_ticks`
    after boot (reference/proctime.py; None: any process of that pid). A pid under 1 is no
    process (a container that ended before its init was seen)."""
    fields = proctime.stat_fields(pid)
    if fields is None or fields[0] == b"Z":
        return False
    return start_ticks is None or int(fields[19]) == start_ticks


def signal_session(pid: int, sig: int) -> None:
    """Signal the task's whole process group (its session leader's pgid is its pid).

    Only a pid above 1 is signalled: to the kernel, 0 is the caller's own process group, -1
    every process it may signal and 1 init, and no task is any of them. A container that ended
    before the engine showed its init has pid 0 (`containers.Started`); signalling that killed
    the borglet itself."""
    if pid <= 1:
        return
    try:
        os.killpg(pid, sig)
    except (ProcessLookupError, PermissionError):
        try:
            os.kill(pid, sig)
        except (ProcessLookupError, PermissionError):
            pass


# Every task process carries these in its environment, and its children inherit them, so a scan
# of /proc finds a task's processes even after they left its session or the borglet restarted.
TASK_MARKER = procscan.TASK_ID_ENV
BORGLET_MARKER = procscan.BORGLET_DIR_ENV


def marked_processes(borglet_dir: str) -> dict[str, list[int]]:
    """task id -> pids of live processes marked as started by the borglet of `borglet_dir`."""
    found: dict[str, list[int]] = {}
    for p in procscan.scan(borglet_dir):
        if os.path.normpath(p.borglet_dir) == os.path.normpath(borglet_dir) and is_same_process(p.pid, None):
            found.setdefault(p.task_id, []).append(p.pid)
    return found
