"""`task exec` on the borglet: run one command in a running task's place (its uid, cgroups, working directory and environment), collect its output up to a cap, and kill it at its time limit.

The command starts through the same path as the task (`processes.start`: the spawn helper, or
CPython's fork path), so it is confined as the task is and never runs as root: a borglet that
would run it as root (tasks run as the borglet's own user, and that is root) refuses. It gets a
session of its own, stdin from /dev/null, and no terminal; when it ends, or at its limit, its
whole session is killed, so nothing it started in the background outlives the answer (a process
that left the session stays in the task's cgroup, counted against the task). A task that runs
as a container gets a `docker exec` into it, as its uid (`run_in_container`).

The endpoint, `POST /v1/tasks/{task_id}/exec`, sits behind the channel's `Verifier` like every
other: only the cell's masters may call it.
"""

from __future__ import annotations

import os
import selectors
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import anyio
from fastapi import Body, FastAPI
from fastapi.responses import JSONResponse

from reference import execspec
from reference.borglet import processes
from reference.borglet.terminal import target

#: Commands run at once on one machine; one more is answered 429 (each holds a thread).
MAX_CONCURRENT = 4
#: After the command exits, how long output its background children still write is read.
DRAIN_AFTER_EXIT_S = 0.5
TRUNCATED_NOTE = "\n[minborg: output cut at {cap} bytes; {dropped} more bytes dropped]\n"


@dataclass(frozen=True)
class Outcome:
    """What a command did: its Popen returncode, its output up to the cap, what was dropped."""

    returncode: int
    stdout: bytes
    stderr: bytes
    stdout_dropped: int
    stderr_dropped: int
    timed_out: bool
    duration_s: float


class Capped:
    """One stream's bytes up to `cap`; what comes after is counted and dropped."""

    def __init__(self, cap: int) -> None:
        self.cap, self.parts, self.size, self.dropped = cap, [], 0, 0

    def add(self, chunk: bytes) -> None:
        room = self.cap - self.size
        if room > 0:
            self.parts.append(chunk[:room])
            self.size += min(room, len(chunk))
        self.dropped += max(0, len(chunk) - max(room, 0))

    def text(self) -> bytes:
        body = b"".join(self.parts)
        if self.dropped:
            body += TRUNCATED_NOTE.format(cap=self.cap, dropped=self.dropped).encode()
        return body


def run(
    command: list[str], env: Mapping[str, str], cwd: str | None, uid: int | None,
    confinement: processes.Confinement, timeout_s: float, cap: int = execspec.OUTPUT_CAP_BYTES,
    clock: Callable[[], float] = time.monotonic,
) -> Outcome:  # fmt: skip
    """Run `command` to its end or `timeout_s`, whichever comes first, as `processes.start`
    starts a task. A program that cannot be started is answered as a shell answers it:
    127 (not found) or 126 (not runnable), with the reason on stderr."""
    processes.check_strings(command, env, cwd)
    began = clock()
    out_r, out_w = os.pipe()
    err_r, err_w = os.pipe()
    try:
        proc = processes.start(command, env, cwd, out_w, err_w, uid, confinement)
    except OSError as err:
        for fd in (out_r, out_w, err_r, err_w):
            os.close(fd)
        code = 127 if isinstance(err, FileNotFoundError) else 126
        said = processes.spawn_error(err, command, cwd, uid, env.get("PATH", "")).removeprefix("spawn: ")
        return Outcome(code, b"", f"minborg: {said}\n".encode(), 0, 0, False, clock() - began)
    except BaseException:
        for fd in (out_r, out_w, err_r, err_w):
            os.close(fd)
        raise
    os.close(out_w)
    os.close(err_w)
    streams = {out_r: Capped(cap), err_r: Capped(cap)}
    timed_out = False
    try:
        timed_out = _collect(proc, streams, began + timeout_s, clock)
    finally:
        # Its whole session goes: what it left in the background, or all of it at the limit.
        processes.signal_session(proc.pid, signal.SIGKILL)
        returncode = proc.wait()
        for fd in streams:
            os.close(fd)
    out, err = streams[out_r], streams[err_r]
    return Outcome(returncode, out.text(), err.text(), out.dropped, err.dropped, timed_out, clock() - began)


def _collect(
    proc: subprocess.Popen, streams: dict[int, Capped], deadline: float, clock: Callable[[], float]
) -> bool:
    """Read both pipes until they close, or `DRAIN_AFTER_EXIT_S` after the process exits, or
    the deadline; whether the deadline came first."""
    open_fds = set(streams)
    exited_at: float | None = None
    with selectors.DefaultSelector() as selector:
        for fd in open_fds:
            selector.register(fd, selectors.EVENT_READ)
        while open_fds:
            now = clock()
            if exited_at is None and proc.poll() is not None:
                exited_at = now
            if exited_at is not None and now - exited_at >= DRAIN_AFTER_EXIT_S:
                return False
            if now >= deadline:
                return proc.poll() is None
            for key, _ in selector.select(timeout=min(0.1, deadline - now)):
                chunk = os.read(key.fd, 65536)
                if chunk:
                    streams[key.fd].add(chunk)
                else:
                    selector.unregister(key.fd)
                    open_fds.discard(key.fd)
    try:
        proc.wait(timeout=max(0.0, deadline - clock()))
    except subprocess.TimeoutExpired:
        return True  # it closed its streams but ran on
    return False


def run_in_container(
    engine: Any, container_id: str, command: list[str], uid: int, timeout_s: float,
    cap: int = execspec.OUTPUT_CAP_BYTES, clock: Callable[[], float] = time.monotonic,
) -> Outcome:  # fmt: skip
    """`docker exec` of `command` into the task's container as its uid (`engine`: the borglet's
    `Containers`): the container's cgroup, environment and working directory. At the limit the
    command's process (its host pid, as the engine reports it) is killed."""
    began = clock()
    api = engine.client.api
    try:
        exec_id = api.exec_create(container_id, command, stdout=True, stderr=True, stdin=False, tty=False,
                                  user=f"{uid}:{uid}")["Id"]  # fmt: skip
        chunks = api.exec_start(exec_id, stream=True, demux=True)
    except Exception as err:  # the engine's refusal: the container is gone, say
        raise OSError(f"docker exec: {getattr(err, 'explanation', None) or err}") from err
    out, err = Capped(cap), Capped(cap)

    def read() -> None:
        try:
            for stdout, stderr in chunks:
                if stdout:
                    out.add(stdout)
                if stderr:
                    err.add(stderr)
        except Exception:  # the stream cut (the engine's read timeout): the exit code still comes
            return

    reader = threading.Thread(target=read, name="exec-reader", daemon=True)
    reader.start()
    reader.join(timeout_s)
    timed_out = reader.is_alive()
    if timed_out:
        pid = api.exec_inspect(exec_id).get("Pid") or 0
        if pid > 0:
            processes.signal_session(pid, signal.SIGKILL)
        reader.join(DRAIN_AFTER_EXIT_S * 4)
    state = api.exec_inspect(exec_id)
    deadline = clock() + DRAIN_AFTER_EXIT_S * 4
    while state.get("Running") and clock() < deadline:
        time.sleep(0.05)
        state = api.exec_inspect(exec_id)
    code = state.get("ExitCode")
    returncode = -signal.SIGKILL if timed_out or code is None else int(code)
    return Outcome(returncode, out.text(), err.text(), out.dropped, err.dropped, timed_out, clock() - began)


def result(task_id: str, machine: str, outcome: Outcome) -> dict[str, Any]:
    """The answer's body (master/contract.py's ExecResult)."""
    code, sig = execspec.exit_code(outcome.returncode)
    return {
        "task": task_id, "machine": machine, "exit_code": code, "signal": sig, "timed_out": outcome.timed_out,
        "stdout": outcome.stdout.decode("utf-8", "replace"), "stderr": outcome.stderr.decode("utf-8", "replace"),
        "stdout_truncated": outcome.stdout_dropped > 0, "stderr_truncated": outcome.stderr_dropped > 0,
        "duration_s": round(outcome.duration_s, 3),
    }  # fmt: skip


def _refuse(status: int, field: str, error: str) -> JSONResponse:
    return JSONResponse(status_code=status, content={"detail": [{"field": field, "error": error}]})


def register(app: FastAPI, borglet: Any) -> None:
    """Add `POST /v1/tasks/{task_id}/exec` to a borglet's app, and the sessions of `task exec -it` (borglet/terminal.py)."""
    from reference.borglet import terminal

    terminal.register(app, borglet)
    limiter = anyio.CapacityLimiter(MAX_CONCURRENT)  # its own threads: syncs never wait on an exec

    @app.post("/v1/tasks/{task_id:path}/exec", response_model=None)
    async def task_exec(task_id: str, payload: Any = Body(None)) -> Any:
        try:
            request = execspec.parse_exec(payload)
        except execspec.ExecError as err:
            return JSONResponse(status_code=422, content={"detail": err.errors})
        found = target(borglet, task_id)
        if isinstance(found, JSONResponse):
            return found
        task, env, uid = found
        launcher = borglet.launcher
        if limiter.borrowed_tokens >= limiter.total_tokens:
            return JSONResponse(
                status_code=429, headers={"Retry-After": "1"},
                content={"detail": [{"field": "", "error": f"machine {borglet.config.name} runs {MAX_CONCURRENT} "
                                     "execs already; retry when one ends"}]},
            )  # fmt: skip
        command = list(request.command)
        if launcher.in_container(task):
            if not task.container or uid is None:
                return _refuse(409, "task_id", f"task {task_id} has no container yet")
            engine = launcher.engine()

            def go() -> Outcome:
                return run_in_container(engine, task.container, command, uid, request.timeout_s)
        else:
            cwd = task.spec.cwd or (launcher.workdir(task) if uid is not None else None)
            confinement = launcher.isolation.confinement(task.group, task.spec.pids_max, task.spec.request.ram)

            def go() -> Outcome:
                return run(command, env, cwd, uid, confinement, request.timeout_s)

        try:
            outcome = await anyio.to_thread.run_sync(go, limiter=limiter)
        except ValueError as err:  # a NUL in the task's environment, say: nothing ran
            return _refuse(422, "command", str(err))
        except Exception as err:  # a spawn step (a cgroup gone as the task ended), the engine: nothing ran
            return _refuse(409, "task_id", f"the command could not start in task {task_id}: {err}")
        return result(task_id, borglet.config.name, outcome)
