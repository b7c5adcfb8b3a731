"""The processes of a local cell: starting one in its own session, signalling, stopping and reaping it, and waiting until it answers."""

from __future__ import annotations

import os
import signal
import ssl
import subprocess
import sys
from collections.abc import Iterable, Sequence
from pathlib import Path

import httpx
import psutil

import reference
from reference import cpuweight, proctime
from reference.launcher.cellfile import LauncherError, ProcessRecord, Role, is_alive, record_process
from reference.launcher.netns import in_netns
from reference.waiting import wait_until

# Bounds on every wait. Python processes importing FastAPI take about a second each on a
# loaded two-core host.
READY_TIMEOUT_S = 30.0
# Each process a launch starts at once adds this much to the wait for all to answer: a hundred
# borglets starting together on two cores take minutes, not seconds, to import and listen.
READY_PER_PROCESS_S = 1.5
# A borglet stopping with --kill-tasks-on-exit gives each task its kill grace (3 s) first.
STOP_TIMEOUT_S = 15.0

# Popen handles of processes this Python process started, so stopping them in the same
# process (tests, the demo) reaps them instead of leaving zombies behind.
_children: dict[int, subprocess.Popen[bytes]] = {}


def child_env(workdir: str) -> dict[str, str]:
    """Environment of masters and borglets, inherited by tasks.

    The package root and the start directory go on PYTHONPATH so `python -m reference.master`
    and a task's `python -m examples.hello_world.server` import without an install; this
    interpreter's directory goes first on PATH so a task's `python` is the same Python.
    """
    env = dict(os.environ)
    package_root = str(Path(reference.__file__).resolve().parent.parent)
    paths = [package_root, workdir, *filter(None, env.get("PYTHONPATH", "").split(os.pathsep))]
    env["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(paths))
    env["PATH"] = os.pathsep.join([os.path.dirname(sys.executable), env.get("PATH", "")])
    env["PYTHONUNBUFFERED"] = "1"
    env.pop("MINBORG_MASTER", None)  # a master must not take a stray client setting as its own
    return env


# Roles whose sessions weigh more than the machines' on a crowded host (`cpuweight`): a master
# replica (its API, link shard and leader's work) must not wait for a CPU behind a hundred
# borglets starting tasks. Its lease keeper takes a session of its own (store/keeper.py).
AHEAD_OF_THE_MACHINES = frozenset({Role.MASTER})


def spawn(
    role: Role, name: str, command: list[str], url: str, log: Path, cwd: str, env: dict[str, str],
    netns: str | None = None,
) -> ProcessRecord:  # fmt: skip
    """Start one process in its own session (a terminal's ^C or hang-up does not reach it); a
    master's session gets the heavier CPU weight where root may ask for it. With `netns`, in
    that network namespace (its host on a netns cell; the recorded command enters it again)."""
    if netns is not None:
        command = in_netns(netns, command)  # nsenter execs the command: the pid is the process's
    with open(log, "ab") as out:
        popen = subprocess.Popen(
            command, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
            cwd=cwd, env=env, start_new_session=True,
        )  # fmt: skip
    _children[popen.pid] = popen
    if role in AHEAD_OF_THE_MACHINES:
        # Popen returns once the child has exec'd, so its setsid is done: this is its session.
        cpuweight.weigh_session(popen.pid, cpuweight.CONTROL_PLANE_NICE)
    return ProcessRecord(
        role, name, popen.pid, psutil.Process(popen.pid).create_time(), url, str(log), tuple(command),
        start_ticks=proctime.start_ticks(popen.pid),
    )


def stop_processes(
    records: Sequence[ProcessRecord], timeout: float = STOP_TIMEOUT_S
) -> list[ProcessRecord]:
    """SIGTERM each live process's group, SIGKILL what is left after `timeout`; returns the
    records still alive after that (none, unless the kernel refuses)."""
    live = [r for r in records if is_alive(r)]
    for record in live:
        _signal_group(record.pid, signal.SIGCONT)  # a paused process must run to exit
        _signal_group(record.pid, signal.SIGTERM)
    left = wait_gone(live, timeout)
    for record in left:
        _signal_group(record.pid, signal.SIGKILL)
    left = wait_gone(left, 5.0)
    _reap(records)
    return left


def kill_process(record: ProcessRecord, sig: int = signal.SIGKILL, timeout: float = 5.0) -> None:
    """Send `sig` to one recorded process (only if it is still the same process)."""
    if not signal_process(record, sig):
        raise LauncherError(f"{record.role} {record.name} (pid {record.pid}) is not running")
    if sig in (signal.SIGKILL, signal.SIGTERM) and wait_gone([record], timeout):
        raise LauncherError(f"{record.role} {record.name} (pid {record.pid}) survived signal {sig}")
    _reap([record])


def signal_process(record: ProcessRecord, sig: int) -> bool:
    """Send `sig` to the recorded process alone if it still runs; whether it did."""
    if not is_alive(record):
        return False
    try:
        os.kill(record.pid, sig)
    except ProcessLookupError:
        return False
    return True


def _signal_group(pid: int, sig: int) -> None:
    """Signal the process group `pid` leads (a master, a borglet, a task: each leads its own
    session), or the process alone if it leads none (a task's child)."""
    try:
        if os.getpgid(pid) == pid:
            os.killpg(pid, sig)
        else:
            os.kill(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def wait_gone(records: Sequence[ProcessRecord], timeout: float) -> list[ProcessRecord]:
    """Wait up to `timeout` seconds for the processes to end; returns those still alive."""
    try:
        wait_until(lambda: not any(map(is_alive, records)), timeout, "the processes to end", 0.05)
    except TimeoutError:
        pass
    return [r for r in records if is_alive(r)]


def _reap(records: Iterable[ProcessRecord]) -> None:
    for record in records:
        popen = _children.get(record.pid)
        if popen is not None and popen.poll() is not None:
            del _children[record.pid]


def live_descendants(proc: psutil.Process) -> list[psutil.Process]:
    """The processes `proc` started, and theirs, that still run (zombies left out)."""
    try:
        children = proc.children(recursive=True)
    except psutil.NoSuchProcess:
        return []
    found = []
    for child in children:
        try:
            if child.status() != psutil.STATUS_ZOMBIE:
                found.append(child)
        except psutil.NoSuchProcess:
            pass
    return found


def descendants(records: Iterable[ProcessRecord]) -> list[ProcessRecord]:
    """The live descendants (tasks) of the given processes, as records to check later."""
    found = []
    for record in records:
        proc = record_process(record)
        if proc is None:
            continue
        for child in live_descendants(proc):
            try:
                found.append(
                    ProcessRecord(Role.BORGLET, f"task of {record.name}", child.pid,
                                  child.create_time(), "", "", start_ticks=proctime.start_ticks(child.pid))
                )  # fmt: skip
            except psutil.NoSuchProcess:
                pass
    return found


def log_tail(path: str, lines: int = 15) -> str:
    try:
        return "\n".join(Path(path).read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


def check_running(record: ProcessRecord) -> None:
    """LauncherError with the end of its log if the process has exited."""
    if not is_alive(record):
        raise LauncherError(
            f"{record.role} {record.name} exited at startup; end of {record.log}:\n{log_tail(record.log)}"
        )


def wait_ready(
    records: Sequence[ProcessRecord], path: str, timeout: float, verify: ssl.SSLContext | bool = True
) -> None:
    """Wait until every process answers 200 on `path`; LauncherError, with the end of a log,
    if one exits first or some still do not answer after `timeout` seconds. `verify`: the
    cell's CA for https processes (launcher/tls.py)."""
    pending = list(records)
    with httpx.Client(timeout=1.0, verify=verify) as http:

        def all_answer() -> bool:
            for record in list(pending):
                check_running(record)
                try:
                    if http.get(record.url + path).status_code == 200:
                        pending.remove(record)
                except httpx.TransportError:
                    pass
            return not pending

        try:
            wait_until(all_answer, timeout, f"{path} to answer", 0.1)
        except TimeoutError:
            names = ", ".join(r.name for r in pending)
            raise LauncherError(
                f"{names} not answering {path} after {timeout:.0f}s; "
                f"log of {pending[0].name}:\n{log_tail(pending[0].log)}"
            ) from None


def wait_borglets(borglets: Sequence[ProcessRecord], verify: ssl.SSLContext | bool = True) -> None:
    """Wait for borglets started together: the more of them, the longer they take to listen."""
    wait_ready(borglets, "/healthz", READY_TIMEOUT_S + READY_PER_PROCESS_S * len(borglets), verify)
