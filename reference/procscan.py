"""Find a local cell's task processes by the borglet dir in their environment, and kill them.

Every task process carries `MINBORG_BORGLET_DIR` (the absolute state dir of the borglet
that started it) and `MINBORG_TASK_ID` in its environment, and its children inherit both.
That survives what a parent-child walk does not: a task whose borglet was SIGKILLed is
re-parented to PID 1, and a task's own children may start sessions of their own. Only
processes found under the given directory are ever signalled.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

BORGLET_DIR_ENV = "MINBORG_BORGLET_DIR"
TASK_ID_ENV = "MINBORG_TASK_ID"
PROC = Path("/proc")
KILL_TIMEOUT_S = 5.0


@dataclass(frozen=True)
class TaskProcess:
    """One live process that belongs to a task of a borglet under the scanned directory."""

    pid: int
    task_id: str  # empty if the process carries no MINBORG_TASK_ID
    borglet_dir: str


def parse_environ(raw: bytes) -> dict[str, str]:
    """/proc/<pid>/environ (NUL-separated NAME=value) as a dict."""
    env = {}
    for entry in raw.split(b"\0"):
        name, sep, value = entry.partition(b"=")
        if sep and name:
            env[name.decode(errors="replace")] = value.decode(errors="replace")
    return env


def lies_under(path: str, root: str) -> bool:
    """Whether `path` is `root` or inside it (both taken as absolute, normalized paths)."""
    if not path or not os.path.isabs(path):
        return False
    path, root = os.path.normpath(path), os.path.normpath(os.path.abspath(root))
    return path == root or path.startswith(root.rstrip(os.sep) + os.sep)


def _roots(root: str | os.PathLike[str]) -> tuple[str, ...]:
    # The borglet records its dir as it resolved it: match the path as given and its real path.
    given = os.path.normpath(os.path.abspath(root))
    return tuple(dict.fromkeys((given, os.path.realpath(given))))


def scan(root: str | os.PathLike[str], proc: Path = PROC) -> list[TaskProcess]:
    """Every live process whose MINBORG_BORGLET_DIR lies under `root`, by pid.

    Processes that exit during the scan, zombies (their environ reads empty) and processes
    whose environ this user may not read are skipped; so is the scanning process itself.
    """
    roots = _roots(root)
    me = os.getpid()
    found = []
    for entry in proc.iterdir():
        if not entry.name.isdigit() or int(entry.name) == me:
            continue
        try:
            env = parse_environ((entry / "environ").read_bytes())
        except OSError:  # gone, or not ours to read
            continue
        borglet_dir = env.get(BORGLET_DIR_ENV, "")
        if any(lies_under(borglet_dir, r) for r in roots):
            found.append(TaskProcess(int(entry.name), env.get(TASK_ID_ENV, ""), borglet_dir))
    return sorted(found, key=lambda p: p.pid)


def kill(
    root: str | os.PathLike[str],
    found: list[TaskProcess] | None = None,
    timeout_s: float = KILL_TIMEOUT_S,
    *,
    proc: Path = PROC,
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.monotonic,
) -> list[TaskProcess]:
    """SIGKILL every task process under `root` (`found`, else a fresh scan), rescanning until
    none is left or `timeout_s` passes; returns those still found at the end.

    A found process that leads its process group has the whole group killed (a task's
    children that changed their environment are still in its group); every found pid is
    killed as well. Nothing that was not found under `root` leads a group we signal.
    """
    deadline = clock() + timeout_s
    targets = scan(root, proc) if found is None else found
    roots = _roots(root)
    while targets:
        for target in targets:
            _kill_one(target.pid, roots, proc)
        sleep(0.05)
        targets = scan(root, proc)
        if not targets or clock() >= deadline:
            break
    return targets


def _kill_one(pid: int, roots: tuple[str, ...], proc: Path) -> None:
    # Read the environment again just before the signal: a pid freed and reused since the
    # scan belongs to someone else now.
    try:
        env = parse_environ((proc / str(pid) / "environ").read_bytes())
    except OSError:
        return
    if not any(lies_under(env.get(BORGLET_DIR_ENV, ""), r) for r in roots):
        return
    try:
        if os.getpgid(pid) == pid:
            os.killpg(pid, signal.SIGKILL)
        os.kill(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
