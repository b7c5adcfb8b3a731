"""`minborg task exec -it JOB INDEX -- CMD`: an interactive terminal in a running task, through the master (master/terminal.py), with the standard library alone.

The local terminal is put in raw mode, so every key (Ctrl-C, Ctrl-D, the arrows) goes to the
remote terminal as it is typed; its window size goes with the first request and again on each
SIGWINCH. One thread reads the command's output, a request at a time, each waiting up to
`execspec.OUTPUT_WAIT_S` for something new; this one sends the keys as they come. Ctrl-D at an
empty prompt, or `exit`, ends the command; its exit code is this command's. With stdin not a
terminal (a pipe), what it holds is sent, then Ctrl-D, the terminal's end of input.
"""

from __future__ import annotations

import base64
import os
import select
import sys
import threading

from reference import cellfile, execspec

TYPE_CHECKING = False
if TYPE_CHECKING:  # typing costs the fast path's start
    from typing import Any

    from reference.cli.http import PlainCell

EOF_KEY = b"\x04"  # Ctrl-D
LOST_EXIT = 255  # the session vanished before saying how the command ended (as ssh's)


def window(fd: int) -> tuple[int, int] | None:
    try:
        size = os.get_terminal_size(fd)
    except OSError:
        return None
    return (size.lines, size.columns) if size.lines and size.columns else None  # a terminal of no size says none


class Session:
    """One session's requests: open, keys, output, close."""

    def __init__(self, cell: PlainCell, key: str, index: int) -> None:
        import copy

        self.cell, self.base, self.id = cell, f"/v1/jobs/{key}/tasks/{index}/terminal", ""
        # Output requests wait up to OUTPUT_WAIT_S on a client of their own: keys are sent meanwhile.
        self.reading = copy.copy(cell)
        self.reading.timeout = execspec.OUTPUT_WAIT_S + 30.0

    def open(self, command: list[str], rows: int, cols: int) -> dict[str, Any]:
        answer = self.cell.request("POST", self.base, json={"command": command, "rows": rows, "cols": cols})
        self.id = answer["session"]
        return answer

    def step(self, action: str, body: dict[str, Any]) -> dict[str, Any]:
        cell = self.reading if action == "output" else self.cell
        return cell.request("POST", f"{self.base}/{self.id}/{action}", json=body)

    def keys(self, data: bytes, size: tuple[int, int] | None = None) -> None:
        body: dict[str, Any] = {"data": base64.b64encode(data).decode()}
        if size is not None:
            body["rows"], body["cols"] = size
        self.step("input", body)

    def close(self) -> None:
        try:
            self.step("close", {})
        except cellfile.ClientError:
            pass  # it ended already


def pump_output(session: Session, write: Any, done: threading.Event, outcome: dict[str, Any]) -> None:
    """Read the output to the end: write each piece as it comes; the exit code into `outcome`."""
    offset = 0
    try:
        while not done.is_set():
            answer = session.step("output", {"offset": offset, "wait_s": execspec.OUTPUT_WAIT_S})
            data = base64.b64decode(answer.get("data") or "")
            if data:
                write(data)
            offset = int(answer.get("offset", offset))
            if answer.get("exited"):
                outcome["exit_code"] = int(answer.get("exit_code", LOST_EXIT))
                return
    except cellfile.ClientError as err:
        outcome["error"] = err
    finally:
        done.set()


def interactive(cell: PlainCell, key: str, index: int, command: list[str], *, stdin: int = 0, stdout: int = 1) -> int:
    """Run `command` on a terminal in the task; its exit code."""
    import signal

    tty = os.isatty(stdin)
    rows, cols = window(stdin) or window(stdout) or (24, 80)
    session = Session(cell, key, index)
    session.open(command, rows, cols)
    done, outcome = threading.Event(), {}

    def write(data: bytes) -> None:
        view = memoryview(data)
        while view:
            view = view[os.write(stdout, view) :]

    reader = threading.Thread(target=pump_output, args=(session, write, done, outcome), daemon=True)
    saved = None
    resized = threading.Event()
    if tty:
        import termios
        import tty as ttymode

        saved = termios.tcgetattr(stdin)
        ttymode.setraw(stdin)
        signal.signal(signal.SIGWINCH, lambda *_: resized.set())
    reader.start()
    try:
        send_keys(session, stdin, tty, done, resized)
        reader.join()
    except KeyboardInterrupt:  # not a terminal: Ctrl-C here ends the session
        session.close()
    finally:
        if saved is not None:
            import termios

            termios.tcsetattr(stdin, termios.TCSADRAIN, saved)
    if "error" in outcome:
        raise outcome["error"]
    if "exit_code" not in outcome:
        print(f"minborg: the exec session in {key} {index} ended without its exit code", file=sys.stderr)
        return LOST_EXIT
    return int(outcome["exit_code"])


def send_keys(session: Session, stdin: int, tty: bool, done: threading.Event, resized: threading.Event) -> None:
    """Send what stdin gives until the output says the command ended; at the end of a piped
    stdin, Ctrl-D (the terminal's end of input)."""
    while not done.is_set():
        if resized.is_set():
            resized.clear()
            session.keys(b"", window(stdin))
        ready, _, _ = select.select([stdin], [], [], 0.2)
        if not ready:
            continue
        data = os.read(stdin, 4096)
        try:
            if data:
                session.keys(data)
                continue
            session.keys(EOF_KEY)  # a pipe at its end: the terminal's end of input
        except cellfile.ClientError as err:
            if err.status == 404 and done.is_set():  # it ended meanwhile
                return
            raise
        done.wait()
        return
