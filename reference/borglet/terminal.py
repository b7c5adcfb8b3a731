"""`task exec -it` on the borglet: a command on a pseudo-terminal in a running task (its uid, cgroups, working directory and environment; its container for a container task), driven by small signed requests from the master.

A session starts the command on a new pty as the task's user, in a session of its own whose
controlling terminal is that pty (so Ctrl-C and Ctrl-Z reach the foreground job, and a shell
has job control). A reader thread keeps the last `execspec.OUTPUT_KEPT_BYTES` it printed; an
output request takes what came after an offset, waiting briefly for more; an input request
writes keys (Ctrl-D is byte 4: the terminal's end of input) and may change the window's size.
When the command ends, what it printed is read to the end, then its whole session is killed,
so nothing it left in the background outlives it. A session nobody asked about for
`SESSION_IDLE_S` (the client went away) is killed, and an ended one is forgotten after as long.

Like the non-interactive exec (borglet/execute.py) it never runs as root: a borglet that would
run it as root refuses. Every request is under the channel's Verifier (only the cell's masters
may call it), and a session answers only requests for the task it runs in, from the user who
opened it (the `by` the master signed into the request's query); anything else is answered
as no session at all.

The process is started by CPython's fork path, as processes.fork_spawn starts a task where the
spawn helper cannot be built: the child is born in the task's cgroups (`cgroups.spawning_in`),
enters its working directory with the user's file ids (`processes.file_identity`), sets its
ids in C, then, as the user, takes the pty as its controlling terminal (TIOCSCTTY, which a
session leader may do to a terminal no session holds) and execs the command.
"""

from __future__ import annotations

import base64
import fcntl
import logging
import os
import secrets
import select
import signal
import struct
import subprocess
import termios
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

import anyio
from fastapi import Body, FastAPI
from fastapi.responses import JSONResponse

from reference import execspec
from reference.borglet import cgroups, processes

log = logging.getLogger(__name__)

#: Sessions at once on one machine; one more is answered 429 (each holds a thread and a pty).
MAX_SESSIONS = 4
#: After the command exits, how long output its background children still write is read.
DRAIN_AFTER_EXIT_S = 0.5
#: How often an output request looks for something new while it waits.
POLL_S = 0.02
DEFAULT_TERM = "xterm"  # the TERM of a session whose task sets none


def set_window(fd: int, rows: int, cols: int) -> None:
    fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))


def _take_terminal() -> None:
    """In the child, after setsid and the ids: the pty on stdin becomes its controlling terminal."""
    fcntl.ioctl(0, termios.TIOCSCTTY, 0)


class Output:
    """What a session printed: the last `kept` bytes, the offset of the first, and the end."""

    def __init__(self, kept: int = execspec.OUTPUT_KEPT_BYTES) -> None:
        self.kept, self.data, self.start = kept, bytearray(), 0
        self.lock = threading.Lock()

    @property
    def end(self) -> int:
        return self.start + len(self.data)

    def add(self, chunk: bytes) -> None:
        with self.lock:
            self.data += chunk
            over = len(self.data) - self.kept
            if over > 0:
                del self.data[:over]
                self.start += over

    def after(self, offset: int) -> tuple[bytes, int, int]:
        """(the bytes from `offset` that are still kept, the new offset, how many were lost)."""
        with self.lock:
            lost = max(0, self.start - offset)
            begin = max(offset, self.start) - self.start
            return bytes(self.data[begin:]), self.end, lost


class Session:
    """A command on a pty: started, read by a thread, written, resized, ended."""

    def __init__(self, sid: str, task_id: str, by: str, clock: Callable[[], float] = time.monotonic) -> None:
        self.id, self.task_id, self.by, self.clock = sid, task_id, by, clock
        self.output = Output()
        self.returncode: int | None = None
        self.ended = threading.Event()
        self.seen = clock()
        self._write: Callable[[bytes], None] = lambda keys: None
        self._resize: Callable[[int, int], None] = lambda rows, cols: None
        self._kill: Callable[[], None] = lambda: None

    # --- a process on a pty -------------------------------------------------------------------

    def start_process(
        self, command: list[str], env: Mapping[str, str], cwd: str | None, uid: int | None,
        confinement: processes.Confinement, rows: int, cols: int,
    ) -> None:  # fmt: skip
        processes.check_strings(command, env, cwd)
        env = {"TERM": DEFAULT_TERM, **env}
        master, slave = os.openpty()
        try:
            set_window(slave, rows, cols)
            ids: dict[str, Any] = {} if uid is None else {"user": uid, "group": uid, "extra_groups": []}
            with cgroups.spawning_in(dict(confinement.cgroups), confinement.pids_max), processes.file_identity(uid):
                proc = subprocess.Popen(
                    command, env=env, cwd=cwd, stdin=slave, stdout=slave, stderr=slave,
                    start_new_session=True, close_fds=True, preexec_fn=_take_terminal, **ids,
                )  # fmt: skip
        except BaseException:
            os.close(master)
            raise
        finally:
            os.close(slave)
        if confinement.rlimit_as:
            try:
                import resource

                resource.prlimit(proc.pid, resource.RLIMIT_AS, (confinement.rlimit_as, confinement.rlimit_as))
            except (ProcessLookupError, PermissionError, ValueError) as error:
                log.warning("no address-space limit on exec session pid %d: %s", proc.pid, error)

        def write(keys: bytes) -> None:
            view = memoryview(keys)
            while view:
                view = view[os.write(master, view) :]

        self._write = write
        self._resize = lambda rows, cols: set_window(master, rows, cols)
        self._kill = lambda: processes.signal_session(proc.pid, signal.SIGKILL)
        threading.Thread(target=self._read_pty, args=(proc, master), name=f"exec-tty-{self.id[:8]}", daemon=True).start()

    def _read_pty(self, proc: subprocess.Popen, fd: int) -> None:
        exited_at: float | None = None
        try:
            while True:
                if exited_at is None and proc.poll() is not None:
                    exited_at = self.clock()
                if exited_at is not None and self.clock() - exited_at >= DRAIN_AFTER_EXIT_S:
                    break
                ready, _, _ = select.select([fd], [], [], 0.1)
                if not ready:
                    continue
                try:
                    chunk = os.read(fd, 65536)
                except OSError:  # EIO: every end of the terminal closed
                    chunk = b""
                if not chunk:
                    break
                self.output.add(chunk)
        finally:
            processes.signal_session(proc.pid, signal.SIGKILL)  # what it left in the background
            self.returncode = proc.wait()
            os.close(fd)
            self.ended.set()

    # --- a process in a container: `docker exec -it` --------------------------------------------

    def start_container(self, engine: Any, container_id: str, command: list[str], uid: int, rows: int, cols: int) -> None:
        api = engine.client.api
        try:
            exec_id = api.exec_create(container_id, command, stdin=True, tty=True, user=f"{uid}:{uid}",
                                      environment={"TERM": DEFAULT_TERM})["Id"]  # fmt: skip
            attached = api.exec_start(exec_id, tty=True, socket=True)
            api.exec_resize(exec_id, height=rows, width=cols)
        except Exception as err:  # the engine's refusal: the container is gone, say
            raise OSError(f"docker exec: {getattr(err, 'explanation', None) or err}") from err
        sock = getattr(attached, "_sock", attached)

        def kill() -> None:
            pid = api.exec_inspect(exec_id).get("Pid") or 0
            if pid > 0:
                processes.signal_session(pid, signal.SIGKILL)

        self._write = sock.sendall
        self._resize = lambda rows, cols: api.exec_resize(exec_id, height=rows, width=cols)
        self._kill = kill
        threading.Thread(target=self._read_socket, args=(api, exec_id, sock), name=f"exec-tty-{self.id[:8]}",
                         daemon=True).start()  # fmt: skip

    def _read_socket(self, api: Any, exec_id: str, sock: Any) -> None:
        try:
            while True:
                try:
                    chunk = sock.recv(65536)
                except OSError:
                    chunk = b""
                if not chunk:
                    break
                self.output.add(chunk)
        finally:
            code = None
            deadline = self.clock() + DRAIN_AFTER_EXIT_S * 4
            while self.clock() < deadline:
                state = api.exec_inspect(exec_id)
                if not state.get("Running"):
                    code = state.get("ExitCode")
                    break
                time.sleep(0.05)
            self.returncode = -signal.SIGKILL if code is None else int(code)
            sock.close()
            self.ended.set()

    # --- what requests do ----------------------------------------------------------------------

    def write(self, keys: bytes) -> None:
        if keys and not self.ended.is_set():
            self._write(keys)

    def resize(self, rows: int | None, cols: int | None) -> None:
        if rows is not None and cols is not None and not self.ended.is_set():
            self._resize(rows, cols)

    def kill(self) -> None:
        if not self.ended.is_set():
            self._kill()

    def answer(self, offset: int) -> dict[str, Any]:
        """What an output request gets: the bytes after `offset`, and, once they are all read,
        how the command ended."""
        ended = self.ended.is_set()  # before the read: output added after it waits for the next
        data, end, lost = self.output.after(offset)
        body: dict[str, Any] = {"data": base64.b64encode(data).decode(), "offset": end, "lost": lost, "exited": False}
        if ended and self.returncode is not None:
            code, sig = execspec.exit_code(self.returncode)
            body.update(exited=True, exit_code=code, signal=sig)
        return body


class Terminals:
    """A borglet's sessions, by id; the idle and the ended are reaped."""

    def __init__(self, clock: Callable[[], float] = time.monotonic, idle_s: float = execspec.SESSION_IDLE_S) -> None:
        self.clock, self.idle_s = clock, idle_s
        self.sessions: dict[str, Session] = {}
        self.lock = threading.Lock()

    def open(self, task_id: str, by: str) -> Session | None:
        """A new session's record, or None when MAX_SESSIONS run already."""
        self.reap()
        with self.lock:
            if sum(not s.ended.is_set() for s in self.sessions.values()) >= MAX_SESSIONS:
                return None
            session = Session(secrets.token_hex(16), task_id, by, self.clock)
            self.sessions[session.id] = session
            return session

    def drop(self, session: Session) -> None:
        with self.lock:
            self.sessions.pop(session.id, None)

    def find(self, sid: str, task_id: str, by: str) -> Session | None:
        """The session `sid` if it runs in `task_id` for `by`; None for any other (no hint of which)."""
        self.reap()
        with self.lock:
            session = self.sessions.get(sid)
        if session is None or not secrets.compare_digest(session.task_id, task_id) or session.by != by:
            return None
        session.seen = self.clock()
        return session

    def reap(self) -> None:
        now = self.clock()
        with self.lock:
            idle = [s for s in self.sessions.values() if now - s.seen > self.idle_s]
            for s in idle:
                del self.sessions[s.id]
        for s in idle:
            s.kill()

    def close_all(self) -> None:
        with self.lock:
            every, self.sessions = list(self.sessions.values()), {}
        for s in every:
            s.kill()


def _refuse(status: int, field: str, error: str, headers: dict[str, str] | None = None) -> JSONResponse:
    return JSONResponse(status_code=status, content={"detail": [{"field": field, "error": error}]}, headers=headers)


def target(borglet: Any, task_id: str) -> tuple[Any, Mapping[str, str], int | None] | JSONResponse:
    """(the task, its environment, its user's uid) that an exec or a terminal session runs in,
    or the refusal to answer: no such running task, or a root borglet without task users."""
    found = borglet.exec_target(task_id)
    if isinstance(found[0], int):
        return _refuse(found[0], "task_id", found[1])
    task, env, uid = found
    if uid is None and os.geteuid() == 0:
        return _refuse(
            409, "task_id",
            f"machine {borglet.config.name} runs tasks as its own user, root: exec runs only as a task's "
            "unprivileged user (start the borglet with task users)",
        )  # fmt: skip
    return task, env, uid


def register(app: FastAPI, borglet: Any, terminals: Terminals | None = None) -> Terminals:
    """Add `POST /v1/tasks/{task_id}/terminal` and `.../terminal/{session}/{input,output,close}`."""
    terminals = terminals or Terminals()
    limiter = anyio.CapacityLimiter(MAX_SESSIONS * 2)  # writes and starts: their own threads

    def reaper() -> None:
        while True:
            time.sleep(5.0)
            terminals.reap()

    threading.Thread(target=reaper, name="exec-tty-reaper", daemon=True).start()

    @app.post("/v1/tasks/{task_id:path}/terminal", response_model=None)
    async def open_terminal(task_id: str, by: str = "", payload: Any = Body(None)) -> Any:
        try:
            request = execspec.parse_terminal(payload)
        except execspec.ExecError as err:
            return JSONResponse(status_code=422, content={"detail": err.errors})
        if not by:
            return _refuse(422, "by", "the master names who opens the session")
        found = target(borglet, task_id)
        if isinstance(found, JSONResponse):
            return found
        task, env, uid = found
        launcher = borglet.launcher
        session = terminals.open(task_id, by)
        if session is None:
            return _refuse(429, "", f"machine {borglet.config.name} runs {MAX_SESSIONS} exec sessions already; "
                           "retry when one ends", {"Retry-After": "1"})  # fmt: skip
        command = list(request.command)
        if launcher.in_container(task):
            if not task.container or uid is None:
                terminals.drop(session)
                return _refuse(409, "task_id", f"task {task_id} has no container yet")
            engine = launcher.engine()

            def go() -> None:
                session.start_container(engine, task.container, command, uid, request.rows, request.cols)
        else:
            cwd = task.spec.cwd or (launcher.workdir(task) if uid is not None else None)
            confinement = launcher.isolation.confinement(task.group, task.spec.pids_max, task.spec.request.ram)

            def go() -> None:
                session.start_process(command, env, cwd, uid, confinement, request.rows, request.cols)

        try:
            await anyio.to_thread.run_sync(go, limiter=limiter)
        except ValueError as err:  # a NUL in the task's environment, say: nothing ran
            terminals.drop(session)
            return _refuse(422, "command", str(err))
        except OSError as err:  # no such program, a cgroup gone as the task ended, the engine
            terminals.drop(session)
            said = processes.spawn_error(err, command, None, uid, env.get("PATH", "")).removeprefix("spawn: ")
            return _refuse(409, "command", f"the command could not start in task {task_id}: {said}")
        log.info("exec session %s by %s in %s: %s", session.id[:8], by, task_id, " ".join(command)[:500])
        return {"session": session.id, "task": task_id, "machine": borglet.config.name}

    @app.post("/v1/tasks/{task_id:path}/terminal/{sid}/{action}", response_model=None)
    async def drive(task_id: str, sid: str, action: str, by: str = "", payload: Any = Body(None)) -> Any:
        session = terminals.find(sid, task_id, by) if execspec.valid_session(sid) else None
        if session is None or action not in ("input", "output", "close"):
            return _refuse(404, "session", f"no exec session {sid[:40]} of task {task_id} on machine "
                           f"{borglet.config.name} for {by or '?'} (it ended, or was idle {terminals.idle_s:.0f}s)")  # fmt: skip
        try:
            if action == "input":
                keys, rows, cols = execspec.parse_input(payload)
            elif action == "output":
                offset, wait_s = execspec.parse_output(payload)
        except execspec.ExecError as err:
            return JSONResponse(status_code=422, content={"detail": err.errors})
        if action == "close":
            session.kill()
            terminals.drop(session)
            return {"closed": True}
        if action == "input":

            def write() -> None:
                session.resize(rows, cols)
                session.write(keys)

            try:
                await anyio.to_thread.run_sync(write, limiter=limiter)
            except OSError as err:  # the terminal closed as the command ended
                log.debug("exec session %s: input not written: %s", sid[:8], err)
            return {"written": len(keys)}
        deadline = time.monotonic() + wait_s
        while session.output.end <= offset and not session.ended.is_set() and time.monotonic() < deadline:
            await anyio.sleep(POLL_S)
            session.seen = terminals.clock()
        answer = session.answer(offset)
        if answer["exited"]:
            terminals.drop(session)  # read to its end: nothing more to ask
        return answer

    return terminals
