"""Thin wrappers over OS processes: spawn a task, check identity, signal a session."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from collections.abc import Mapping
from hashlib import sha1
from typing import Any

import psutil

from reference import procscan
from reference.borglet import logs

# Process start times agree to within this many seconds between two psutil reads.
CREATE_TIME_TOLERANCE_S = 0.05


# Drops a child's ids before it execs the task (util-linux, on every Debian system); None: the
# child is forked and drops them itself.
SETPRIV = shutil.which("setpriv")


def resolve_program(command: list[str], env: Mapping[str, str]) -> str:
    """The program `command` runs, looked up on the task's PATH as the child would look it up,
    so a program that is not there fails the spawn as it does without `setpriv`. A path with
    a slash is the child's to find (relative ones from its working directory)."""
    program = command[0] if command else ""
    if "/" in program:
        if os.path.isabs(program) and not os.path.exists(program):
            raise FileNotFoundError(2, "No such file or directory", program)
        return program
    found = shutil.which(program, path=os.pathsep.join(os.get_exec_path(dict(env))))
    if found is None:
        raise FileNotFoundError(2, "No such file or directory", program)
    return found


def sanitize(task_id: str) -> str:
    """A file-system-safe, collision-free name for a task id: 'alice/web/3#0' -> 'alice_web_3_0-1a2b3c4d'."""
    clean = re.sub(r"[^A-Za-z0-9._-]+", "_", task_id).strip("._") or "task"
    return f"{clean[:80]}-{sha1(task_id.encode()).hexdigest()[:8]}"


def spawn(
    command: list[str],
    env: Mapping[str, str],
    cwd: str | None,
    log_dir: str,
    user: int | None = None,
) -> subprocess.Popen:
    """Start a task in its own session with stdout and stderr appended to their files in
    `log_dir` (borglet/logs.py); with `user`, as that uid, gid the same number, and no
    supplementary groups (borglet/taskusers.py).

    No pre-exec hook, so CPython spawns with vfork, and the borglet's size does not slow it
    down. CPython will not vfork a child that changes its ids, and a fork copies the
    borglet's page tables once per start (about 7 ms of CPU against 3, measured on a 60 MiB
    process), so with `user` the child execs util-linux's `setpriv`, which sets every uid and
    gid (real, effective, saved) and clears the groups, then execs the task's command: the
    same process, the same pid. Without `setpriv` the child is forked and changes its ids
    itself.
    """
    out, err = logs.open_streams(log_dir)
    try:
        if user is not None and SETPRIV is not None:
            argv = [SETPRIV, f"--reuid={user}", f"--regid={user}", "--clear-groups", "--", resolve_program(command, env), *command[1:]]
            ids: dict[str, Any] = {}
        else:
            argv = command
            ids = {} if user is None else {"user": user, "group": user, "extra_groups": []}
        return subprocess.Popen(
            argv,
            env=dict(env),
            cwd=cwd,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=err,
            start_new_session=True,
            close_fds=True,
            **ids,
        )
    finally:
        os.close(out)
        os.close(err)


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


def create_time(pid: int) -> float | None:
    try:
        return psutil.Process(pid).create_time()
    except psutil.Error:
        return None


def is_same_process(pid: int, started: float | None) -> bool:
    """True when pid is alive (not a zombie) and is the process that started at `started`."""
    try:
        proc = psutil.Process(pid)
        if proc.status() == psutil.STATUS_ZOMBIE:
            return False
        return started is None or abs(proc.create_time() - started) <= CREATE_TIME_TOLERANCE_S
    except psutil.Error:
        return False


def signal_session(pid: int, sig: int) -> None:
    """Signal the task's whole process group (its session leader's pgid is its pid)."""
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
