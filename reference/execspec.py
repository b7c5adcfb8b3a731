"""A `task exec` request (`POST .../tasks/{index}/exec`): its limits, the check of its body (pure, the master's and the borglet's), and the exit code a result stands for; the standard library alone (the command line's fast path reads it; master/contract.py types it).

The command runs once, non-interactively: no terminal, stdin from /dev/null, its stdout and
stderr collected up to `OUTPUT_CAP_BYTES` each, killed after `timeout_s` seconds (docs/decisions.md,
"task exec").
"""

from __future__ import annotations

from collections import namedtuple

TYPE_CHECKING = False
if TYPE_CHECKING:  # typing costs the fast path's start as much as a module of its own
    from typing import Any

DEFAULT_TIMEOUT_S = 60.0
MAX_TIMEOUT_S = 600.0
OUTPUT_CAP_BYTES = 1024 * 1024  # of stdout and of stderr each; the rest is read and dropped
MAX_ARGS = 1024
MAX_ARGV_BYTES = 128 * 1024  # the command's arguments together, as the kernel would take them
TIMED_OUT_EXIT = 124  # the command line's exit code for a command killed at its limit, as timeout(1)'s


class ExecError(ValueError):
    """A request the caller must change: `errors` as the API's `detail` list."""

    def __init__(self, field: str, error: str) -> None:
        super().__init__(f"{field}: {error}")
        self.errors = [{"field": field, "error": error}]


class ExecRequest(namedtuple("ExecRequest", ["command", "timeout_s"], defaults=(DEFAULT_TIMEOUT_S,))):
    """A checked request: the command (a tuple of strings) and its limit in seconds. A named
    tuple, not a dataclass: importing dataclasses (and inspect) costs the fast path as much as
    all the rest of it."""

    __slots__ = ()

    def body(self) -> dict[str, Any]:
        return {"command": list(self.command), "timeout_s": self.timeout_s}


def parse_exec(payload: Any) -> ExecRequest:
    """The request in `payload`, or ExecError naming the field and what to change."""
    body(payload, ("command", "timeout_s"), '{"command": ["PROGRAM", "ARG", ...]}')
    command = parse_command(payload.get("command"))
    timeout = payload.get("timeout_s", DEFAULT_TIMEOUT_S)
    if isinstance(timeout, bool) or not isinstance(timeout, int | float) or not 0 < timeout <= MAX_TIMEOUT_S:
        raise ExecError("timeout_s", f"must be a number of seconds above 0 and at most {MAX_TIMEOUT_S:.0f}")
    return ExecRequest(command, float(timeout))


def body(payload: Any, fields: tuple[str, ...], example: str) -> None:
    """ExecError unless `payload` is a JSON object of `fields` only."""
    if not isinstance(payload, dict):
        raise ExecError("", f"the body must be a JSON object: {example}")
    unknown = sorted(set(payload) - set(fields))
    if unknown:
        raise ExecError(unknown[0], f"unknown field: the body takes {', '.join(fields)}")


def parse_command(command: Any) -> tuple[str, ...]:
    """A command's program and arguments, checked as the kernel and a shell would take them."""
    if not isinstance(command, list) or not command:
        raise ExecError("command", "must be a non-empty list of strings: the program, then its arguments")
    if len(command) > MAX_ARGS:
        raise ExecError("command", f"has {len(command)} arguments; at most {MAX_ARGS}")
    size = 0
    for i, arg in enumerate(command):
        if not isinstance(arg, str):
            raise ExecError(f"command.{i}", f"must be a string, not {type(arg).__name__}")
        if "\0" in arg:
            raise ExecError(f"command.{i}", "holds a NUL byte, which no program argument can")
        size += len(arg.encode("utf-8", "surrogatepass")) + 1
    if not command[0]:
        raise ExecError("command.0", "the program is empty: name one, e.g. /bin/sh")
    if size > MAX_ARGV_BYTES:
        raise ExecError("command", f"is {size} bytes long; at most {MAX_ARGV_BYTES}: pass large input in a file")
    return tuple(command)


def exit_code(returncode: int) -> tuple[int, int | None]:
    """(exit code, signal) of a process's Popen returncode: a process killed by signal N
    exits 128+N, as a shell reports it."""
    if returncode < 0:
        return 128 - returncode, -returncode
    return returncode, None


# --- `task exec -it`: a terminal session -----------------------------------------------------
#
# A session is a command on a pseudo-terminal in the task, driven by small requests through the
# master, each checked there (the job's owner or the admin) and signed on the channel to the
# borglet (docs/decisions.md, "task exec -it"): POST .../terminal starts it; .../input writes
# keys (and a new window size); .../output waits for what it printed after an offset, and says
# when it ended and how; .../close ends it. A session nobody asks about for IDLE_S is killed.

SESSION_IDLE_S = 60.0
OUTPUT_WAIT_S = 20.0  # the longest an output request waits for something new
MAX_INPUT_BYTES = 64 * 1024  # keys in one input request
OUTPUT_KEPT_BYTES = 1024 * 1024  # the output a session keeps for a reader behind it
MAX_WINDOW = 10000  # rows and columns
SESSION_ID_CHARS = frozenset("0123456789abcdef")


class TerminalRequest(namedtuple("TerminalRequest", ["command", "rows", "cols"], defaults=(24, 80))):
    """A session to start: the command, and the window's rows and columns."""

    __slots__ = ()

    def body(self) -> dict[str, Any]:
        return {"command": list(self.command), "rows": self.rows, "cols": self.cols}


def window(payload: dict[str, Any], rows: int | None, cols: int | None) -> tuple[int | None, int | None]:
    """The window's size in `payload` (each defaulting to the given one); ExecError naming a bad one."""
    sizes = []
    for name, default in (("rows", rows), ("cols", cols)):
        value = payload.get(name, default)
        if isinstance(value, float) and value.is_integer():
            value = int(value)  # 80.0 is JSON's integer 80, as JSON Schema reads it
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_WINDOW):
            raise ExecError(name, f"must be an integer from 1 to {MAX_WINDOW}: the terminal's size")
        sizes.append(value)
    return sizes[0], sizes[1]


def parse_terminal(payload: Any) -> TerminalRequest:
    """A session to start, or ExecError naming the field and what to change."""
    body(payload, ("command", "rows", "cols"), '{"command": ["/bin/sh"], "rows": 24, "cols": 80}')
    rows, cols = window(payload, 24, 80)
    return TerminalRequest(parse_command(payload.get("command")), rows, cols)


def parse_input(payload: Any) -> tuple[bytes, int | None, int | None]:
    """(the keys, the new rows, the new columns) of an input request; ExecError else. The keys
    are base64 in `data`; Ctrl-D is the byte 4, which the terminal reads as the end of input."""
    import base64
    import binascii

    body(payload, ("data", "rows", "cols"), '{"data": "BASE64 OF THE KEYS", "rows": 24, "cols": 80}')
    data = payload.get("data", "")
    if not isinstance(data, str):
        raise ExecError("data", "must be a string: the keys, base64-encoded")
    try:
        keys = base64.b64decode(data, validate=True)
    except (binascii.Error, ValueError):
        raise ExecError("data", "is not base64: encode the keys (RFC 4648, with padding)") from None
    if len(keys) > MAX_INPUT_BYTES:
        raise ExecError("data", f"holds {len(keys)} bytes; at most {MAX_INPUT_BYTES} a request")
    rows, cols = window(payload, None, None)
    return keys, rows, cols


def parse_output(payload: Any) -> tuple[int, float]:
    """(offset, wait_s) of an output request: what was printed from byte `offset` on, waited
    for at most `wait_s` seconds; ExecError else."""
    body(payload, ("offset", "wait_s"), '{"offset": 0, "wait_s": 20}')
    offset = payload.get("offset", 0)
    if isinstance(offset, bool) or not isinstance(offset, int) or offset < 0:
        raise ExecError("offset", "must be an integer of 0 or more: the bytes of output already read")
    wait = payload.get("wait_s", OUTPUT_WAIT_S)
    if isinstance(wait, bool) or not isinstance(wait, int | float) or not 0 <= wait <= OUTPUT_WAIT_S:
        raise ExecError("wait_s", f"must be a number of seconds from 0 to {OUTPUT_WAIT_S:.0f}")
    return offset, float(wait)


def valid_session(session: str) -> bool:
    """Whether `session` can name a session (32 hex digits); another is no session's name."""
    return len(session) == 32 and set(session) <= SESSION_ID_CHARS
