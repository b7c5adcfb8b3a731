"""`job submit` and `job run` on the fast path: the file sent as written, the cell's answer printed as the full command line prints it, the tasks' starts and the rollout followed; a file the cell refuses as invalid goes to the full command line, which names the field with exit code 2."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from reference.cli import fast as cli_fast
from reference.cli.app import app
from tests.unit.fakehttp import JsonHandler, serving

FILE = "name: web\nuser: demo\ntask_count: 2\nrequest: {cpu: 100m, ram: 64MiB}\ncommand: [sleep, '100']\n"
JOB = {"key": "demo/web", "name": "web", "user": "demo", "priority": 100, "task_count": 2,
       "request": {"cpu": "100m", "ram": 67108864}}  # fmt: skip
CHANGED = {"job": "demo/web", "version": 2, "changed": ["task_count"], "file": {"task_count": 2},
           "plan": {"replaced": [], "in_place": [], "added": [1], "removed": []}, "max_unavailable": 1,
           "revision": 9}  # fmt: skip
CRASHED = {"index": 0, "incarnation": 0, "state": "RUNNING", "machine": "b0", "job": "demo/web",
           "crash_loop": {"kind": "exited", "text": "exit code 3; failure 1, next try in 1s"}}  # fmt: skip


def dry_run_answer(doc: dict[str, Any]) -> dict[str, Any]:
    """Task 0 placed; task 1, where the file has one, left pending."""
    pending = [{"task": "demo/web/1#0", "reason": "0 of 1 machines fit: cpu"}] if doc["task_count"] > 1 else []
    return {"dry_run": True, "job": "demo/web", "placed": [{"task": "demo/web/0#0", "machine": "b0", "preempts": []}],
            "pending": pending, "preempted": [], "seed": 0, "revision": 9,
            "quota": {"user": "demo", "band": "batch", "quota": None, "used_by_others": {}, "job": {"cpu": 200, "ram": 134217728}}}  # fmt: skip


@pytest.fixture
def master() -> Iterator[tuple[str, list[tuple[str, str, Any]]]]:
    sent: list[tuple[str, str, Any]] = []

    class Handler(JsonHandler):
        def body(self) -> Any:
            doc = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            sent.append((self.command, self.path, doc))
            return doc

        def do_GET(self) -> None:  # noqa: N802
            path = self.path.partition("?")[0]
            if path == "/v1/jobs/demo/forbidden":
                return self.answer(403, json.dumps({"detail": {"field": "user", "error": "not yours"}}).encode())
            if path == "/v1/jobs/demo/web/tasks":
                return self.stream([(9, "ADDED", {"type": "ADDED", "task": CRASHED})])
            rollout = {"version": 2, "state": "complete", "stale": [], "down": []}
            self.answer(200, json.dumps({"job": {**JOB, "task_count": 1}, "rollout": rollout, "revision": 9}).encode())

        def do_PUT(self) -> None:  # noqa: N802
            doc = self.body()
            if "bogus" in doc:
                return self.answer(422, json.dumps({"detail": [{"field": "bogus", "error": "unknown field"}]}).encode())
            self.answer(200, json.dumps(CHANGED).encode())

        def do_POST(self) -> None:  # noqa: N802
            doc = self.body()
            if self.path.endswith("?dry_run=true"):
                return self.answer(200, json.dumps(dry_run_answer(doc)).encode())
            self.answer(201, json.dumps({"job": JOB, "revision": 9}).encode())

        def stream(self, messages: list[tuple[int, str, dict[str, Any]]]) -> None:
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            for rev, event, data in messages:
                chunk = f"id: {rev}\nevent: {event}\ndata: {json.dumps(data)}\n\n".encode()
                self.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
            self.wfile.write(b"0\r\n\r\n")

    with serving(Handler) as url:
        yield url, sent


def a_file(tmp_path: Path, text: str = FILE) -> str:
    path = tmp_path / "web.yaml"
    path.write_text(text)
    return str(path)


def test_job_run_sends_the_file_and_prints_the_plan_and_the_rollout_as_the_full_command_line(
    master: tuple[str, list[Any]], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url, sent = master
    args = ["job", "run", a_file(tmp_path), "--master", url]
    assert cli_fast.run(args) == 0
    fast = capsys.readouterr().out
    assert sent[-1][:2] == ("PUT", "/v1/jobs/demo/web") and sent[-1][2]["task_count"] == 2, sent
    full = CliRunner().invoke(app, args)
    assert (full.exit_code, fast) == (0, full.output)
    assert "~ task_count: 1 -> 2" in fast and "every task of demo/web runs the new version" in fast


def test_a_file_the_cell_refuses_goes_to_the_full_command_line_which_names_the_field(
    master: tuple[str, list[Any]], tmp_path: Path
) -> None:
    url, sent = master
    path = a_file(tmp_path, FILE + "bogus: 1\n")
    with pytest.raises(cli_fast.Fallback):
        cli_fast.run(["job", "run", path, "--master", url])
    assert [m for m, _, _ in sent] == ["PUT"], "the cell was asked once, and nothing was written"
    full = CliRunner().invoke(app, ["job", "run", path, "--master", url])
    assert full.exit_code == 2 and "bogus" in full.output, full.output
    with pytest.raises(cli_fast.Fallback):  # not YAML at all: nothing is sent
        cli_fast.run(["job", "submit", a_file(tmp_path, "name: [unclosed\n"), "--master", url])
    assert len(sent) == 1


def test_job_submit_detached_prints_what_the_full_command_line_prints(
    master: tuple[str, list[Any]], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url, _ = master
    args = ["job", "submit", a_file(tmp_path), "--detach", "--master", url]
    assert cli_fast.run(args) == 0
    assert capsys.readouterr().out == CliRunner().invoke(app, args).output


def test_job_submit_waits_and_fails_when_a_task_crash_loops(
    master: tuple[str, list[Any]], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url, sent = master
    assert cli_fast.run(["job", "submit", a_file(tmp_path), "--master", url]) == 1
    said = capsys.readouterr()
    assert sent[-1][:2] == ("POST", "/v1/jobs")
    assert "task 0 exited: exit code 3" in said.out
    assert "task 0 of demo/web (incarnation 0) is in a crash loop" in said.err


def test_job_submit_dry_run_prints_and_exits_as_the_full_command_line(
    master: tuple[str, list[Any]], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url, sent = master
    for text, code in ((FILE, 1), (FILE.replace("task_count: 2", "task_count: 1"), 0)):
        args = ["job", "submit", "--dry-run", a_file(tmp_path, text), "--master", url]
        assert cli_fast.run(args) == code
        fast = capsys.readouterr()
        assert sent[-1][:2] == ("POST", "/v1/jobs?dry_run=true"), sent[-1]
        full = CliRunner().invoke(app, args)
        assert (full.exit_code, fast.out) == (code, full.stdout)
        assert "dry run of demo/web (revision 9): nothing was written" in fast.out
        assert "demo/web/0#0 -> b0" in fast.out and "quota: demo's batch quota unlimited" in fast.out
        if code:
            assert "demo/web would not fit: 1 of 2 task(s) would stay PENDING" in fast.err
            assert "demo/web/1#0 stays PENDING: 0 of 1 machines fit: cpu" in fast.out
    assert cli_fast.run(["job", "submit", "--dry-run", "--json", a_file(tmp_path), "--master", url]) == 1
    assert json.loads(capsys.readouterr().out)["pending"][0]["task"] == "demo/web/1#0"
    assert all(m == "POST" for m, _, _ in sent) and not any(p == "/v1/jobs" for _, p, _ in sent), "nothing submitted"


def test_job_plan_prints_and_exits_as_the_full_command_line(
    master: tuple[str, list[Any]], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url, sent = master
    args = ["job", "plan", a_file(tmp_path), "--master", url]
    assert cli_fast.run(args) == 1  # something would change
    fast = capsys.readouterr().out
    assert sent[-1][:2] == ("PUT", "/v1/jobs/demo/web?dry_run=true"), sent[-1]
    full = CliRunner().invoke(app, args)
    assert (full.exit_code, fast) == (1, full.stdout)
    assert "~ task_count: 1 -> 2" in fast
    # The cell refuses: neither "no change" nor "would change".
    refused = ["job", "plan", a_file(tmp_path, FILE.replace("name: web", "name: forbidden")), "--master", url]
    assert cli_fast.run(refused) == 255
    assert "not yours" in capsys.readouterr().err
    assert CliRunner().invoke(app, refused).exit_code == 255
