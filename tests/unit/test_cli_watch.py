"""`job submit` waits for its tasks through a watch: placements, confirmed starts, pending
reasons and failures, judged from server-sent events served by a fake cell."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest
from typer.testing import CliRunner

from reference.cli import jobs as cli_jobs
from reference.cli.app import app
from reference.cli.watch import StartWatch
from reference.client import CellClient, Message, parse_sse

REPO = Path(__file__).resolve().parents[2]


def task(index: int, state: str, **extra: object) -> dict:
    return {"index": index, "incarnation": 0, "state": state, "machine": "m1" if state == "RUNNING" else None,
            "confirmed": False, "events": [], **extra}  # fmt: skip


def sse(revision: int, event: str, data: dict) -> str:
    return f"id: {revision}\nevent: {event}\ndata: {json.dumps(data)}\n\n"


def test_parse_sse_splits_messages_across_chunks_and_skips_comments() -> None:
    raw = (": keepalive\n\n" + sse(5, "ADDED", {"a": 1}) + sse(6, "bookmark", {"revision": 6})).encode()
    chunks = [raw[:7], raw[7:30], raw[30:]]
    assert list(parse_sse(chunks)) == [Message("ADDED", 5, {"a": 1}), Message("bookmark", 6, {"revision": 6})]


def test_start_watch_is_done_when_every_task_started_or_finished() -> None:
    said: list[str] = []
    w = StartWatch(2, said.append)
    w.take(Message("ADDED", 7, {"task": task(0, "PENDING", pending_reason="0 of 2 machines fit: cpu")}))
    w.take(Message("MODIFIED", 8, {"task": task(0, "RUNNING")}))
    w.take(Message("MODIFIED", 9, {"task": task(0, "RUNNING", confirmed=True, pid=42)}))
    assert not w.done
    w.take(Message("MODIFIED", 10, {"task": task(1, "DEAD", cause="finished")}))
    assert w.done and w.failed is None
    assert said == [
        "task 0 pending: 0 of 2 machines fit: cpu", "task 0 placed on m1", "task 0 started on m1 (pid 42)",
        "task 1 finished",
    ]  # fmt: skip


def test_start_watch_fails_on_a_task_that_died_and_ignores_older_incarnations() -> None:
    w = StartWatch(1, lambda _: None)
    w.take(Message("MODIFIED", 8, {"task": task(0, "RUNNING", incarnation=1, confirmed=True)}))
    w.take(Message("MODIFIED", 7, {"task": task(0, "DEAD", cause="failed")}))  # incarnation 0: older
    assert w.done and w.failed is None
    w = StartWatch(1, lambda _: None)
    died = task(0, "DEAD", cause="failed", events=[{"kind": "exited", "detail": "exit code 3"}])
    w.take(Message("MODIFIED", 9, {"task": died}))
    assert w.done and w.failed == "task 0 (incarnation 0) failed: exit code 3"


def fake_cell(stream: str, monkeypatch: pytest.MonkeyPatch) -> list[httpx.Request]:
    seen: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        if request.method == "POST":
            return httpx.Response(201, json={"job": {}, "revision": 7})
        return httpx.Response(200, stream=httpx.ByteStream(stream.encode()), headers={"content-type": "text/event-stream"})

    fake = CellClient(["http://m0"], transport=httpx.MockTransport(handler))
    monkeypatch.setattr(cli_jobs, "client", lambda *a, **kw: fake)
    return seen


def test_submit_waits_by_default_until_every_task_started(monkeypatch: pytest.MonkeyPatch) -> None:
    stream = "".join(
        sse(8 + i, "MODIFIED", {"task": task(i, "RUNNING", confirmed=True, pid=100 + i)}) for i in range(3)
    )
    seen = fake_cell(stream, monkeypatch)
    result = CliRunner().invoke(app, ["job", "submit", str(REPO / "examples" / "hello_world.yaml")])
    assert result.exit_code == 0, result.output
    assert "task 2 started on m1 (pid 102)" in result.output and "all 3 task(s)" in result.output
    watch = seen[1]
    assert watch.url.path == "/v1/jobs/demo/hello_world/tasks"
    assert watch.url.params["watch"] == "true" and watch.url.params["since"] == "6"


def test_submit_exits_1_when_a_task_fails(monkeypatch: pytest.MonkeyPatch) -> None:
    died = task(1, "DEAD", cause="failed", events=[{"kind": "spawn_failed", "detail": "could not start: spawn: nope"}])
    fake_cell(sse(8, "MODIFIED", {"task": died}), monkeypatch)
    result = CliRunner().invoke(app, ["job", "submit", str(REPO / "examples" / "hello_world.yaml")])
    assert result.exit_code == 1
    assert "task 1 spawn_failed: could not start: spawn: nope" in result.output
    assert "minborg task logs demo/hello_world" in result.output


def test_submit_detach_returns_without_watching(monkeypatch: pytest.MonkeyPatch) -> None:
    seen = fake_cell("", monkeypatch)
    result = CliRunner().invoke(app, ["job", "submit", "--detach", str(REPO / "examples" / "hello_world.yaml")])
    assert result.exit_code == 0 and [r.method for r in seen] == ["POST"]
    explicit = CliRunner().invoke(app, ["job", "submit", "--wait", "--help"])
    assert "--wait" in explicit.output and "--detach" in explicit.output and "default" in explicit.output
