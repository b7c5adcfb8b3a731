"""The fast path of `minborg`: its top-level help lists what the full command line lists, it
answers `job list` and `task list` with the same rows, and hands anything else over."""

from __future__ import annotations

import json
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
import typer.main
from typer.testing import CliRunner

from reference import cli_fast
from reference.cli import app

JOBS = [{"key": "demo/web", "priority": 200, "task_count": 2, "request": {"cpu": "100m", "ram": 67108864},
         "restart_policy": "always", "appclass": "latency_sensitive", "version": 1, "submitted_at": 0}]  # fmt: skip
TASKS = [{"index": 0, "incarnation": 0, "state": "RUNNING", "confirmed": True, "machine": "b0",
          "host": "127.0.0.1", "port": 4242, "restarts": 0, "healthy": True, "cause": None,
          "bns": "0.web.demo.local.minborg", "pid": 99, "events": [{"kind": "started", "detail": "pid 99"}]}]  # fmt: skip


def test_top_level_help_lists_every_command_of_the_full_command_line_in_its_group() -> None:
    full = typer.main.get_command(app)
    assert {name: cmd.get_short_help_str(limit=300) for name, cmd in full.commands.items()} == dict(
        cli_fast.COMMANDS
    )
    assert full.help == cli_fast.HELP
    groups = {name: f"{group} commands" for group, commands in cli_fast.GROUPS for name, _ in commands}
    assert {name: cmd.rich_help_panel for name, cmd in full.commands.items()} == groups
    text = cli_fast.top_help()
    assert "Everyday commands:\n  job " in text and "Daemons commands:" in text and "--version" in text
    assert all(len(line) < 200 for line in text.splitlines())  # one line per command, never wrapped


def test_completion_scripts_are_typers_own() -> None:
    from typer._completion_shared import get_completion_script

    from reference.cli_complete import COMPLETE_VAR, script

    for shell in cli_fast.SHELLS:
        assert script(shell) == get_completion_script(prog_name="minborg", complete_var=COMPLETE_VAR, shell=shell)


def test_version_and_completion_are_answered_on_the_fast_path(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli_fast.run(["--version"]) == 0
    assert capsys.readouterr().out.startswith("minborg ")
    assert cli_fast.run(["completion", "zsh"]) == 0
    assert "compdef _minborg_completion minborg" in capsys.readouterr().out
    assert CliRunner().invoke(app, ["--version"]).output.startswith("minborg ")


@pytest.mark.parametrize(
    "args",
    [["job", "list", "-w"], ["job", "list", "--help"], ["task", "show", "demo/web", "x"], ["job", "list", "-o"],
     ["job", "list", "-o", "xml"], ["task", "list", "no-slash"], ["cell", "up"], ["task", "logs", "demo/web", "0", "-f"],
     ["job", "update", "demo/web", "--cpu", "1"], ["job", "update", "demo/web", "--tasks", "-1"], ["events", "-f"],
     ["completion", "tcsh"], ["job", "submit", "x.yaml"]],
)  # fmt: skip
def test_what_the_fast_path_does_not_know_goes_to_the_full_command_line(args: list[str]) -> None:
    with pytest.raises(cli_fast.Fallback):
        cli_fast.run(args)


@pytest.fixture
def master() -> Iterator[str]:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802
            if "ghost" in self.path:
                body, status = {"detail": [{"field": "job", "error": "no job demo/ghost"}]}, 404
            elif self.path.startswith("/v1/jobs/demo/web/tasks"):
                body, status = {"tasks": TASKS, "revision": 3}, 200
            else:
                body, status = {"jobs": JOBS, "revision": 3}, 200
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def full_output(args: list[str]) -> str:
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    return result.output


def test_job_and_task_lists_print_what_the_full_command_line_prints(
    master: str, capsys: pytest.CaptureFixture[str]
) -> None:
    for args in (
        ["job", "list"], ["job", "list", "-o", "wide"], ["job", "list", "--json"],
        ["task", "list", "demo/web"], ["task", "list", "demo/web", "-o", "wide"],
        ["task", "list", "demo/web", "-o", "yaml"],
    ):  # fmt: skip
        assert cli_fast.run([*args, "--master", master]) == 0
        fast = capsys.readouterr().out
        assert fast == full_output([*args, "--master", master]), args
    assert "0.web.demo.local.minborg" in fast or "bns: 0.web.demo.local.minborg" in fast


def test_wide_columns_are_never_cut(master: str, capsys: pytest.CaptureFixture[str]) -> None:
    cli_fast.run(["task", "list", "demo/web", "-o", "wide", "--master", master])
    lines = capsys.readouterr().out.splitlines()
    assert any(len(line) > 100 for line in lines) and "started: pid 99" in lines[-1]


def test_errors_are_worded_as_the_full_command_line_words_them(
    master: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(sys, "argv", ["minborg", "task", "list", "demo/ghost", "--master", master])
    with pytest.raises(SystemExit) as exit_:
        cli_fast.main()
    assert exit_.value.code == 1
    assert capsys.readouterr().err == "error: HTTP 404 (not found): job: no job demo/ghost\n"
