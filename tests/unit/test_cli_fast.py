"""The fast path of `minborg`: its top-level help lists what the full command line lists, it
answers `job list` and `task list` with the same rows, and hands anything else over."""

from __future__ import annotations

import json
import sys
import time
import types
from collections.abc import Iterator
from pathlib import Path

import pytest
import typer.main
from typer.testing import CliRunner

from reference import cellfile
from reference.cli import complete as cli_complete
from reference.cli import fast as cli_fast
from reference.cli import plain as cli_plain
from reference.cli.app import app
from tests.unit.fakehttp import JsonHandler, serving

REPO = Path(__file__).resolve().parents[2]
JOBS = [{"key": "demo/web", "name": "web", "user": "demo", "priority": 200, "task_count": 2, "request": {"cpu": "100m", "ram": 67108864},
         "restart_policy": "always", "appclass": "latency_sensitive", "version": 1, "submitted_at": 0}]  # fmt: skip
MACHINES = [{"name": "b0", "state": "up", "failure_domain": "r0", "capacity": {"cpu": 4000, "ram": 8 << 30},
             "reserved": {"cpu": 100, "ram": 64 << 20}, "usage": {"cpu_milli": 3, "ram_bytes": 9 << 20},
             "isolation": "cgroup", "tasks": 1}]  # fmt: skip
EVENTS = [(5, "machine", {"kind": "up", "machine": "b0"}),
          (7, "task", {"at": 1.7e9, "task": "demo/web/0#0", "kind": "scheduled", "detail": "on b0"}),
          (7, "job", {"kind": "submitted", "job": "demo/web"}), (8, "bookmark", {"revision": 8})]  # fmt: skip
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


def test_completion_knows_every_command_and_option_of_the_full_command_line() -> None:
    from reference.cli.complete import TREE, command_tree

    # A command or option added or changed: complete.TREE is pprint.pformat(command_tree(...)) of the app.
    assert command_tree(typer.main.get_command(app)) == TREE


def test_completion_candidates(capsys: pytest.CaptureFixture[str]) -> None:
    from reference.cli.complete import complete

    def no_cell() -> list[str]:
        raise cellfile.ClientError(0, "no cell")

    assert complete([], no_cell)[:3] == ["alloc", "bench", "bns"] and "--version" in complete([], no_cell)
    job = complete(["--token", "t", "job"], no_cell)  # the subcommands in order, then --help
    assert {"kill", "list", "schema", "show", "submit", "update"} <= set(job) and job == [*sorted(job[:-1]), "--help"]
    assert complete(["job", "show"], lambda: ["demo/web"])[:2] == ["demo/web", "--help"]  # the cell's jobs
    assert complete(["job", "show"], no_cell)[0] == "--help"  # no cell: the options alone
    assert complete(["job", "show", "demo/web"], lambda: ["demo/web"])[0] == "--help"  # the job is given
    assert complete(["task", "list", "-o"], no_cell) == ["json", "jsonpath=", "name", "table", "wide", "yaml"]


def test_the_bash_script_completes_through_the_fast_path(tmp_path: Path) -> None:
    import shutil
    import subprocess

    if shutil.which("bash") is None:
        pytest.skip("no bash")
    script = tmp_path / "minborg.bash"
    script.write_text(cli_complete.script("bash"))
    shim = tmp_path / "minborg"  # `minborg` as the script calls it: this tree's fast path
    shim.write_text(f"#!/bin/sh\nexec {sys.executable} -c 'from reference.cli.fast import main; main()' \"$@\"\n")
    shim.chmod(0o755)
    done = subprocess.run(
        ["bash", "-c", f"source {script}; COMP_WORDS=(minborg job sh); COMP_CWORD=2; _minborg_completion; "
                       'echo "${COMPREPLY[@]}"'],
        env={"PATH": f"{tmp_path}:/usr/bin:/bin", "MINBORG_MASTER": "http://127.0.0.1:9"}, cwd=REPO,
        capture_output=True, text=True, timeout=60, check=True,
    )  # fmt: skip
    assert done.stdout.split() == ["show"]


def _shim(tmp_path: Path) -> dict[str, str]:
    """`minborg` as the completion scripts call it, this tree's fast path; the environment to run them in."""
    shim = tmp_path / "minborg"
    shim.write_text(f"#!/bin/sh\nexec {sys.executable} -c 'from reference.cli.fast import main; main()' \"$@\"\n")
    shim.chmod(0o755)
    return {"PATH": f"{tmp_path}:/usr/bin:/bin", "MINBORG_MASTER": "http://127.0.0.1:9", "HOME": str(tmp_path)}


def test_the_zsh_script_completes_through_the_fast_path(tmp_path: Path) -> None:
    """Under a real zsh: the script loads with compinit, and its function hands compadd the
    fast path's candidates for the words before the cursor (zsh matches the prefix itself)."""
    import shutil
    import subprocess

    if shutil.which("zsh") is None:
        pytest.skip("no zsh (.ci/run installs Debian's)")
    script = tmp_path / "minborg.zsh"
    script.write_text(cli_complete.script("zsh"))
    done = subprocess.run(
        ["zsh", "-f", "-c", f"autoload -U compinit; compinit -u; source {script}; "
                            'compadd() { print -l -- "${(@P)2}"; }; words=(minborg job sh); CURRENT=3; _minborg_completion'],
        env=_shim(tmp_path), cwd=REPO, capture_output=True, text=True, timeout=60, check=True,
    )  # fmt: skip
    offered = done.stdout.split()
    assert "show" in offered and "submit" in offered and "--help" in offered, done
    assert "status" not in offered  # a cell subcommand: not offered after `job`


def test_the_fish_script_completes_through_the_fast_path(tmp_path: Path) -> None:
    """Under a real fish: its own completion engine, given the script, completes `job sh`."""
    import shutil
    import subprocess

    if shutil.which("fish") is None:
        pytest.skip("no fish (.ci/run installs Debian's)")
    script = tmp_path / "minborg.fish"
    script.write_text(cli_complete.script("fish"))
    done = subprocess.run(
        ["fish", "-N", "-c", f"source {script}; complete --do-complete 'minborg job sh'"],
        env=_shim(tmp_path), cwd=REPO, capture_output=True, text=True, timeout=60, check=True,
    )  # fmt: skip
    assert [line.split("\t")[0] for line in done.stdout.splitlines()] == ["show"], done


def test_version_and_completion_are_answered_on_the_fast_path(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli_fast.run(["--version"]) == 0
    assert capsys.readouterr().out.startswith("minborg ")
    assert cli_fast.run(["completion", "zsh"]) == 0
    assert "compdef _minborg_completion minborg" in capsys.readouterr().out
    assert CliRunner().invoke(app, ["--version"]).output.startswith("minborg ")


@pytest.mark.parametrize(
    "args",
    [["job", "list", "-w"], ["job", "list", "--help"], ["task", "show", "demo/web", "x"], ["job", "list", "-o"],
     ["job", "list", "-o", "xml"], ["task", "list", "a/b/c", "--master", "http://127.0.0.1:9"], ["cell", "up"], ["task", "logs", "demo/web", "0", "-f"],
     ["job", "update", "demo/web", "--cpu", "1"], ["job", "update", "demo/web", "--tasks", "-1"], ["events", "-f", "--for", "0"],
     ["completion", "tcsh"], ["job", "submit", "x.yaml"]],
)  # fmt: skip
def test_what_the_fast_path_does_not_know_goes_to_the_full_command_line(args: list[str]) -> None:
    with pytest.raises(cli_fast.Fallback):
        cli_fast.run(args)


@pytest.fixture(autouse=True)
def still_clock(monkeypatch: pytest.MonkeyPatch) -> None:
    """A listing's "N h ago" reads the clock on each call: the fast and the full path read one still
    clock here, or two calls that straddle a tenth of an hour print different rows."""
    now = time.time()
    monkeypatch.setattr(cli_plain, "time", types.SimpleNamespace(time=lambda: now))


@pytest.fixture
def master() -> Iterator[str]:
    class Handler(JsonHandler):
        def do_GET(self) -> None:  # noqa: N802
            path = self.path.partition("?")[0]
            if "ghost" in self.path:
                body, status = {"detail": [{"field": "job", "error": "no job demo/ghost"}]}, 404
            elif path == "/v1/events":
                return self.events()
            elif path == "/v1/jobs/demo/web/tasks/0/logs":
                return self.answer(200, b"line 1\nline 2\n", "text/plain")
            elif path.startswith("/v1/jobs/demo/web/tasks/"):
                body, status = {"task": {**TASKS[0], "job": "demo/web"}, "revision": 3}, 200
            elif path.startswith("/v1/jobs/demo/web/tasks"):
                body, status = {"tasks": TASKS, "revision": 3}, 200
            elif path == "/v1/jobs/demo/web":
                body, status = {"job": JOBS[0], "tasks": {"RUNNING": 1, "PENDING": 1, "running_confirmed": 1},
                                "pending": [{"reason": "0 of 1 machines fit: cpu", "tasks": 1, "indices": [1]}],
                                "revision": 3}, 200  # fmt: skip
            elif path == "/v1/machines":
                body, status = {"machines": MACHINES, "revision": 3}, 200
            elif path.startswith("/v1/bns/"):
                body, status = {"name": path[8:], "host": "127.0.0.1", "port": 4242, "task": "demo/web/0#0",
                                "healthy": True}, 200  # fmt: skip
            else:
                body, status = {"jobs": JOBS, "revision": 3}, 200
            self.answer(status, json.dumps(body).encode())

        def do_PATCH(self) -> None:  # noqa: N802
            self.rfile.read(int(self.headers["Content-Length"]))
            self.answer(200, json.dumps({"job": {**JOBS[0], "task_count": 3}, "revision": 4}).encode())

        def do_DELETE(self) -> None:  # noqa: N802
            self.answer(200, json.dumps({"killed": 2, "revision": 5}).encode())

        def events(self) -> None:  # a replay, then a bookmark, then the stream would go on
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            for rev, event, data in EVENTS:
                chunk = f"id: {rev}\nevent: {event}\ndata: {json.dumps(data)}\n\n".encode()
                self.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
            self.wfile.write(b"0\r\n\r\n")

    with serving(Handler) as url:
        yield url


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


@pytest.mark.parametrize(
    "args",
    [["job", "show", "demo/web"], ["job", "show", "demo/web", "-o", "json"], ["task", "show", "demo/web", "0"],
     ["task", "logs", "demo/web", "0"], ["machine", "list"], ["machine", "list", "-o", "yaml"],
     ["bns", "resolve", "0.web.demo.local.minborg"], ["events"], ["events", "-o", "json"],
     ["job", "update", "demo/web", "--tasks", "3"], ["job", "kill", "demo/web"], ["job", "kill", "demo/web", "--json"]],
)  # fmt: skip
def test_every_fast_command_prints_what_the_full_command_line_prints(
    master: str, capsys: pytest.CaptureFixture[str], args: list[str]
) -> None:
    assert cli_fast.run([*args, "--master", master]) == 0
    fast = capsys.readouterr().out
    assert fast == full_output([*args, "--master", master])
    assert fast.strip()


def test_events_have_a_header_and_a_time_column(master: str, capsys: pytest.CaptureFixture[str]) -> None:
    cli_fast.run(["events", "--master", master])
    header, machine, task, job = capsys.readouterr().out.splitlines()
    assert header.split() == ["time", "revision", "subject", "event", "detail"]
    assert machine.startswith("-  ")  # no time of its own, none in its revision
    assert task[:8] == job[:8] != "-       "  # the job event takes its revision's time


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


@pytest.mark.parametrize(
    ("task_count", "counts", "expected"),
    [
        (3, {"RUNNING": 3, "running_confirmed": 3}, ("RUNNING", "3/3")),
        (3, {"PENDING": 3, "running_confirmed": 0}, ("PENDING", "0/3")),  # every task waits: not a running job
        (3, {"RUNNING": 2, "PENDING": 1, "running_confirmed": 2}, ("PENDING", "2/3")),
        (3, {"RUNNING": 3, "running_confirmed": 1}, ("STARTING", "1/3")),  # placed, 2 not yet confirmed
        (2, {"DEAD": 2, "running_confirmed": 0}, ("DEAD", "0/2")),
        (3, {"RUNNING": 2, "DEAD": 1, "running_confirmed": 2}, ("DEGRADED", "2/3")),
        (0, {"running_confirmed": 0}, ("RUNNING", "0/0")),  # scaled to zero: nothing waits
        (3, None, ("-", "-")),  # not asked (past the listing's limit)
        (3, {"RUNNING": 2, "DEAD": 1, "running_confirmed": 2, "backoff": 1}, ("BACKOFF", "2/3")),  # a crash loop
    ],
)
def test_job_status_from_its_tasks_by_state(task_count: int, counts: dict | None, expected: tuple[str, str]) -> None:
    assert cli_plain.job_status(task_count, counts) == expected


def test_job_list_shows_status_and_ready(master: str, capsys: pytest.CaptureFixture[str]) -> None:
    cli_fast.run(["job", "list", "--master", master])
    header, _, row = capsys.readouterr().out.splitlines()
    assert header.split()[:3] == ["job", "status", "ready"]
    assert row.split()[:3] == ["demo/web", "PENDING", "1/2"]  # 1 RUNNING confirmed, 1 PENDING of 2


def test_a_reading_command_takes_the_jobs_name_alone(
    master: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(cli_plain.USER_ENV, raising=False)
    for args in (["job", "show", "web"], ["task", "list", "web"], ["task", "show", "web", "0"]):
        assert cli_fast.run([*args, "--master", master]) == 0  # the cell's one job named web: demo/web
        fast = capsys.readouterr().out
        assert fast == full_output([*args, "--master", master])
        assert "demo/web" in fast
    with pytest.raises(cli_fast.Fallback):  # no job of that name: the full command line says so
        cli_fast.run(["job", "show", "nope", "--master", master])
    result = CliRunner().invoke(app, ["job", "show", "nope", "--master", master])
    assert result.exit_code == 2 and "no job named 'nope' in the cell" in result.output
    with pytest.raises(cli_fast.Fallback):  # a change names its job whole
        cli_fast.run(["job", "kill", "web", "--master", master])
    monkeypatch.setenv(cli_plain.USER_ENV, "alice")
    assert cli_plain.job_by_name("web", lambda: pytest.fail("not listed: $MINBORG_USER says whose")) == "alice/web"
    jobs = [{"key": "demo/web", "name": "web"}, {"key": "bob/web", "name": "web"}]
    monkeypatch.delenv(cli_plain.USER_ENV)
    with pytest.raises(ValueError, match=r"2 jobs are named 'web' \(bob/web, demo/web\)"):
        cli_plain.job_by_name("web", lambda: jobs)


def test_the_version_is_the_installed_packages() -> None:
    from importlib.metadata import version

    assert cli_fast.version() == f"minborg {version('minborg')}"


def test_local_status_reads_the_processes_as_the_launcher_does(tmp_path: Path) -> None:
    import os
    import subprocess

    import psutil

    from reference import launcher

    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    me = psutil.Process(os.getpid())
    records = (
        launcher.ProcessRecord(launcher.Role.MASTER, "master0", os.getpid(), me.create_time(), "http://x", "/log"),
        launcher.ProcessRecord(launcher.Role.BORGLET, "b0", int(gone.stdout), me.create_time(), "http://y", "/log"),
        launcher.ProcessRecord(launcher.Role.ETCD, "etcd0", os.getpid(), me.create_time() - 5, "http://z", "/log"),
    )  # alive; exited; a pid reused by another process (another start time)
    launcher.CellInfo("local", str(tmp_path), str(tmp_path), 0.0, (), (), {}, records).save()
    fast, full = cli_fast.local_status(str(tmp_path)), launcher.status(tmp_path)
    assert [p["alive"] for p in fast["processes"]] == [p["alive"] for p in full["processes"]] == [True, False, False]
    assert abs(fast["processes"][0]["cpu_s"] - full["processes"][0]["cpu_s"]) < 0.5
    assert fast["processes"][1]["cpu_s"] is None and fast["running"] is full["running"] is True
