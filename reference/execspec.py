"""A `task exec` request (`POST .../tasks/{index}/exec`): its limits, the check of its body (pure, the master's and the borglet's), and the exit code a result stands for; the standard library alone (the command line's fast path reads it; master/contract.py types it).

The command runs once, non-interactively: no terminal, stdin from /dev/null, its stdout and
stderr collected up to `OUTPUT_CAP_BYTES` each, killed after `timeout_s` seconds (docs/decisions.md,
"task exec").
"""

from __future__ import annotations

from dataclasses import dataclass
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


@dataclass(frozen=True)
class ExecRequest:
    command: tuple[str, ...]
    timeout_s: float = DEFAULT_TIMEOUT_S

    def body(self) -> dict[str, Any]:
        return {"command": list(self.command), "timeout_s": self.timeout_s}


def parse_exec(payload: Any) -> ExecRequest:
    """The request in `payload`, or ExecError naming the field and what to change."""
    if not isinstance(payload, dict):
        raise ExecError("", 'the body must be a JSON object: {"command": ["PROGRAM", "ARG", ...]}')
    unknown = sorted(set(payload) - {"command", "timeout_s"})
    if unknown:
        raise ExecError(unknown[0], "unknown field: the body takes command and timeout_s")
    command = payload.get("command")
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
    timeout = payload.get("timeout_s", DEFAULT_TIMEOUT_S)
    if isinstance(timeout, bool) or not isinstance(timeout, int | float) or not 0 < timeout <= MAX_TIMEOUT_S:
        raise ExecError("timeout_s", f"must be a number of seconds above 0 and at most {MAX_TIMEOUT_S:.0f}")
    return ExecRequest(tuple(command), float(timeout))


def exit_code(returncode: int) -> tuple[int, int | None]:
    """(exit code, signal) of a process's Popen returncode: a process killed by signal N
    exits 128+N, as a shell reports it."""
    if returncode < 0:
        return 128 - returncode, -returncode
    return returncode, None
