"""Task logs on the borglet: stdout and stderr per task incarnation, size-bounded rotation, tail and follow.

Each placement of a task incarnation has its own directory under the borglet's state dir,
`tasks/<key>/`, with `stdout` and `stderr`. A restart in place appends to the same files.
The task process writes to them directly (opened with O_APPEND, inherited across exec), so
the borglet can stop and come back without the task losing its output.

Rotation keeps the newest part: when a stream's file passes `MAX_BYTES`, it is copied to
`<stream>.1` (replacing the older rotated copy) and truncated in place, as logrotate's
copytruncate does. The task keeps its descriptor, and O_APPEND makes its next write land at
the new end. A stream thus holds at most about 2 x MAX_BYTES on disk (plus what the task
writes between two checks); lines written between the copy and the truncation are lost.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import shutil
import threading
from collections.abc import AsyncIterator, Callable, Iterable

log = logging.getLogger(__name__)

STREAMS = ("stdout", "stderr")
MAX_BYTES = 8 * 1024 * 1024  # per stream, before rotation; one rotated file is kept
ROTATE_EVERY_S = 2.0
MAX_TAIL_LINES = 10_000
MAX_ANSWER_BYTES = 4 * 1024 * 1024  # what one tail answer returns at most
FOLLOW_POLL_S = 0.2
MAX_FOLLOW_S = 3600.0


def task_dir(state_dir: str, key: str) -> str:
    """The directory of one task placement's logs (key: processes.sanitize(task id))."""
    return os.path.join(state_dir, "tasks", key)


def stream_path(state_dir: str, key: str, stream: str) -> str:
    if stream not in STREAMS:
        raise ValueError(f"stream must be one of {', '.join(STREAMS)}, not {stream!r}")
    return os.path.join(task_dir(state_dir, key), stream)


def open_streams(directory: str) -> tuple[int, int]:
    """File descriptors (append mode) for a task process's stdout and stderr; the caller closes them."""
    os.makedirs(directory, exist_ok=True)
    flags = os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC
    out = os.open(os.path.join(directory, "stdout"), flags, 0o644)
    try:
        err = os.open(os.path.join(directory, "stderr"), flags, 0o644)
    except OSError:
        os.close(out)
        raise
    return out, err


# --- rotation ----------------------------------------------------------------------------------


def rotate_if_large(path: str, max_bytes: int = MAX_BYTES) -> bool:
    """Copy `path` to `path.1` and truncate it when it holds more than max_bytes; True if rotated."""
    try:
        if os.path.getsize(path) <= max_bytes:
            return False
        shutil.copyfile(path, path + ".1")
        os.truncate(path, 0)
    except OSError as err:
        log.warning("cannot rotate %s: %s", path, err)
        return False
    return True


class Rotator:
    """A thread that rotates the logs of the tasks `keys()` names, every `every_s` seconds."""

    def __init__(
        self, state_dir: str, keys: Callable[[], Iterable[str]], *, max_bytes: int = MAX_BYTES,
        every_s: float = ROTATE_EVERY_S,
    ) -> None:  # fmt: skip
        self.state_dir, self.keys, self.max_bytes, self.every_s = state_dir, keys, max_bytes, every_s
        self.rotations = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="log-rotator", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()

    def pass_once(self) -> int:
        rotated = 0
        for key in self.keys():
            for stream in STREAMS:
                rotated += rotate_if_large(stream_path(self.state_dir, key, stream), self.max_bytes)
        self.rotations += rotated
        return rotated

    def _run(self) -> None:
        while not self._stop.wait(self.every_s):
            try:
                self.pass_once()
            except Exception:  # a bad pass must not end rotation
                log.exception("log rotation pass failed")


# --- reading -----------------------------------------------------------------------------------


def _last_lines(path: str, lines: int, limit: int) -> tuple[bytes, int]:
    """The last `lines` lines of a file (at most `limit` bytes) and how many lines they hold."""
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            end = f.tell()
            pos, data = end, b""
            while pos > 0 and data.count(b"\n") <= lines and len(data) < limit:
                step = min(64 * 1024, pos)
                pos -= step
                f.seek(pos)
                data = f.read(step) + data
    except FileNotFoundError:
        return b"", 0
    # A trailing newline ends the last line; it does not start another.
    parts = data.split(b"\n")
    if parts and parts[-1] == b"":
        parts.pop()
        trail = b"\n"
    else:
        trail = b""
    if pos > 0 or len(parts) > lines:
        parts = parts[-lines:] if lines else []
    out = b"\n".join(parts) + (trail if parts else b"")
    return out[-limit:], len(parts)


def tail(state_dir: str, key: str, stream: str, lines: int) -> bytes | None:
    """The last `lines` lines of a task's stream, reaching into the rotated file when the
    current one holds fewer; None when the task has no such log (it never started here)."""
    path = stream_path(state_dir, key, stream)
    if not os.path.exists(path) and not os.path.exists(path + ".1"):
        return None
    lines = max(0, min(lines, MAX_TAIL_LINES))
    data, got = _last_lines(path, lines, MAX_ANSWER_BYTES)
    if got < lines:
        older, _ = _last_lines(path + ".1", lines - got, MAX_ANSWER_BYTES - len(data))
        data = older + data
    return data


async def follow(
    state_dir: str, key: str, stream: str, *, ended: Callable[[], bool], max_s: float,
    clock: Callable[[], float], sleep: Callable[[float], asyncio.Future[None]] | None = None,
) -> AsyncIterator[bytes]:  # fmt: skip
    """New bytes of a task's stream as they are written, from its current end: until the task
    has ended and its file is drained, or `max_s` seconds. A truncation (rotation) restarts
    reading at the file's new beginning, so nothing written after it is missed."""
    path = stream_path(state_dir, key, stream)
    pause = sleep or asyncio.sleep
    deadline = clock() + min(max_s, MAX_FOLLOW_S)
    try:
        offset = os.path.getsize(path)
    except OSError:
        offset = 0
    while True:
        done = ended()  # read before the file: a task that ends now has written everything
        try:
            size = os.path.getsize(path)
        except OSError:
            size = 0
        if size < offset:
            offset = 0  # rotated: the file starts anew
        if size > offset:
            with contextlib.suppress(OSError), open(path, "rb") as f:
                f.seek(offset)
                chunk = f.read(min(size - offset, MAX_ANSWER_BYTES))
                offset += len(chunk)
                if chunk:
                    yield chunk
                    continue
        if done or clock() >= deadline:
            return
        await pause(FOLLOW_POLL_S)
