"""`task exec` without a cell: the request's checks (each refusal names its field), the exit code a result stands for, the output cap, and the borglet's runner on this host (as this user, no cgroups)."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator

import pytest

from reference import execspec
from reference.borglet import execute, processes
from reference.execspec import ExecError, parse_exec
from tests.unit.fakehttp import JsonHandler, serving

ENV = {"PATH": "/usr/local/bin:/usr/bin:/bin", "GREETING": "hello"}


@pytest.mark.parametrize(
    ("payload", "field"),
    [
        (None, ""),
        (["id"], ""),
        ({}, "command"),
        ({"command": []}, "command"),
        ({"command": "id"}, "command"),
        ({"command": ["id", 3]}, "command.1"),
        ({"command": ["sh", "-c", "echo a\u0000b"]}, "command.2"),
        ({"command": [""]}, "command.0"),
        ({"command": ["x"] * (execspec.MAX_ARGS + 1)}, "command"),
        # 2 arguments of 65,536 bytes, each with its NUL: 131,074 > 131,072
        ({"command": ["a" * 65_536, "b" * 65_536]}, "command"),
        ({"command": ["id"], "timeout_s": 0}, "timeout_s"),
        ({"command": ["id"], "timeout_s": 600.5}, "timeout_s"),
        ({"command": ["id"], "timeout_s": "60"}, "timeout_s"),
        ({"command": ["id"], "timeout_s": True}, "timeout_s"),
        ({"command": ["id"], "tty": True}, "tty"),
    ],
)
def test_a_bad_request_is_refused_naming_its_field(payload: object, field: str) -> None:
    with pytest.raises(ExecError) as refused:
        parse_exec(payload)
    assert refused.value.errors[0]["field"] == field
    assert refused.value.errors[0]["error"]


def test_a_good_request_keeps_its_command_and_takes_the_default_limit() -> None:
    assert parse_exec({"command": ["ls", "-l"]}) == execspec.ExecRequest(("ls", "-l"), 60.0)
    assert parse_exec({"command": ["ls"], "timeout_s": 600}).timeout_s == 600.0
    # 2 arguments of 65,535 bytes, each with its NUL: 131,072, the most there is room for
    assert parse_exec({"command": ["a" * 65_535, "b" * 65_535]}).command[0] == "a" * 65_535


@pytest.mark.parametrize(("returncode", "expected"), [(0, (0, None)), (3, (3, None)), (-9, (137, 9)), (-15, (143, 15))])
def test_a_process_killed_by_signal_n_exits_128_plus_n(returncode: int, expected: tuple[int, int | None]) -> None:
    assert execspec.exit_code(returncode) == expected


def test_output_past_the_cap_is_counted_and_dropped_with_a_note() -> None:
    capped = execute.Capped(10)
    for chunk in (b"1234", b"567890ab", b"cdef"):
        capped.add(chunk)
    # 4 + 8 + 4 = 16 bytes, 10 kept, 16 - 10 = 6 dropped
    assert (capped.size, capped.dropped) == (10, 6)
    assert capped.text().startswith(b"1234567890\n[minborg: output cut at 10 bytes; 6 more bytes dropped]")


def run(command: list[str], timeout_s: float = 10, cwd: str | None = "/", cap: int = execspec.OUTPUT_CAP_BYTES) -> execute.Outcome:
    return execute.run(command, ENV, cwd, None, processes.Confinement(), timeout_s, cap=cap)


def test_the_runner_gives_the_output_exit_code_environment_and_directory() -> None:
    outcome = run(["sh", "-c", 'echo "$GREETING from $(pwd)"; echo oops >&2; exit 5'], cwd="/tmp")
    assert (outcome.returncode, outcome.stdout, outcome.stderr, outcome.timed_out) == (5, b"hello from /tmp\n", b"oops\n", False)


def test_the_runner_kills_a_command_at_its_limit_and_what_it_left_behind() -> None:
    outcome = run(["sh", "-c", "echo started; sleep 30"], timeout_s=0.5)
    assert (outcome.returncode, outcome.stdout, outcome.timed_out) == (-9, b"started\n", True)
    assert outcome.duration_s < 5
    # Ended at once, a background child holding the pipe is waited for half a second, then killed.
    outcome = run(["sh", "-c", "sleep 30 & echo parent done"])
    assert (outcome.returncode, outcome.stdout, outcome.timed_out) == (0, b"parent done\n", False)
    assert outcome.duration_s < 5


def test_the_runner_caps_each_stream() -> None:
    outcome = run([sys.executable, "-c", "import sys; sys.stdout.write('x' * 5000); sys.stderr.write('y' * 10)"], cap=1000)
    assert outcome.stdout.startswith(b"x" * 1000 + b"\n[minborg: output cut at 1000 bytes; 4000 more")
    assert (outcome.stdout_dropped, outcome.stderr, outcome.stderr_dropped) == (4000, b"y" * 10, 0)


def test_a_program_that_cannot_start_answers_as_a_shell_does() -> None:
    missing = run(["no-such-program-here"])
    assert missing.returncode == 127 and b"no program 'no-such-program-here'" in missing.stderr
    assert run(["/etc/hostname"]).returncode == 126  # a file that is not executable


# --- the command line: the fast path and the full one answer alike ---------------------------------

ANSWER = {"task": "demo/web/0#0@1", "machine": "b0", "exit_code": 3, "signal": None, "timed_out": False,
          "stdout": "hi\n", "stderr": "oops\n", "stdout_truncated": False, "stderr_truncated": False, "duration_s": 0.01}  # fmt: skip


@pytest.fixture
def master() -> Iterator[tuple[str, list[dict[str, object]]]]:
    """A master that answers every exec with ANSWER (timed out when the command is `sleep`); the bodies it got."""
    got: list[dict[str, object]] = []

    class Handler(JsonHandler):
        def do_POST(self) -> None:  # noqa: N802
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            got.append(body)
            answer = {**ANSWER, "timed_out": True, "exit_code": 137, "signal": 9} if body["command"][0] == "sleep" else ANSWER
            self.answer(200 if self.path == "/v1/jobs/demo/web/tasks/0/exec" else 404, json.dumps(answer).encode())

    with serving(Handler) as url:
        yield url, got


@pytest.mark.parametrize(("command", "code"), [(["sh", "-c", "exit 3", "--json"], 3), (["sleep", "30"], 124)])
def test_both_command_lines_print_the_output_and_exit_with_the_code(
    master: tuple[str, list[dict[str, object]]], capsys: pytest.CaptureFixture[str], command: list[str], code: int
) -> None:
    from typer.testing import CliRunner

    from reference.cli import fast
    from reference.cli.app import app

    url, got = master
    args = ["task", "exec", "demo/web", "0", "--timeout", "5", "--master", url, "--", *command]
    assert fast.run(args) == code
    out, err = capsys.readouterr()
    full = CliRunner().invoke(app, args)
    assert (full.exit_code, full.stdout, full.stderr) == (code, out, err)
    assert out == "hi\n" and err.startswith("oops\n")
    # What follows -- is the command, options included; both sent the same body.
    assert got == [{"command": command, "timeout_s": 5.0}] * 2


@pytest.mark.parametrize("args", [["task", "exec", "demo/web", "0", "ls"], ["task", "exec", "demo/web", "0", "--timeout", "0", "--", "ls"],
                                  ["task", "exec", "demo/web", "0", "--"]])  # fmt: skip
def test_what_the_fast_path_cannot_word_goes_to_the_full_command_line(args: list[str]) -> None:
    from reference.cli import fast

    with pytest.raises(fast.Fallback):
        fast.run(args)
