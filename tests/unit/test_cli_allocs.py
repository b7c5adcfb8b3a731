"""`minborg alloc`: a set file is sent canonical (CPU as "NNNm"), shown alloc by alloc, and killed by USER/NAME; the logsaver example's files are valid."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest
from typer.testing import CliRunner

from reference.cli import allocs as cli_allocs
from reference.cli.app import app
from reference.client import CellClient

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "examples" / "logsaver"
runner = CliRunner()
VIEW = {"key": "demo/logs", "user": "demo", "name": "logs", "priority": 200, "count": 2,
        "resources": {"cpu": 500, "ram": 256 << 20}, "jobs": ["demo/web"],
        "allocs": [{"index": i, "machine": f"m{i}", "resources": {"cpu": 500}, "used": {"cpu": 200}} for i in range(2)]}  # fmt: skip


def fake(monkeypatch: pytest.MonkeyPatch, answer: dict, seen: list[httpx.Request]) -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(200, json=answer)

    client = CellClient(["http://m0"], transport=httpx.MockTransport(handler))
    monkeypatch.setattr(cli_allocs, "client", lambda *a, **kw: client)


def test_submit_sends_the_canonical_set_and_shows_each_alloc(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[httpx.Request] = []
    fake(monkeypatch, {"alloc_set": VIEW, "revision": 3}, seen)
    result = runner.invoke(app, ["alloc", "submit", str(EXAMPLE / "alloc.yaml")])
    assert result.exit_code == 0, result.output
    body = json.loads(seen[0].content)
    assert (seen[0].method, seen[0].url.path) == ("POST", "/v1/allocs")
    assert body["resources"] == {"cpu": "500m", "ram": 256 << 20} and body["count"] == 2
    assert "demo/logs" in result.output and "on m1" in result.output


def test_kill_names_the_set_and_the_jobs_killed(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[httpx.Request] = []
    fake(monkeypatch, {"deleted": "demo/logs", "allocs": 2, "killed_jobs": ["demo/web"], "revision": 4}, seen)
    result = runner.invoke(app, ["alloc", "kill", "demo/logs"])
    assert result.exit_code == 0, result.output
    assert (seen[0].method, seen[0].url.path) == ("DELETE", "/v1/allocs/demo/logs")
    assert "killed demo/web" in result.output


def test_a_bad_set_file_is_a_usage_error_naming_the_field(tmp_path: Path) -> None:
    bad = tmp_path / "a.yaml"
    bad.write_text("name: logs\nuser: demo\ncount: 0\n")
    result = runner.invoke(app, ["alloc", "submit", str(bad)])
    assert result.exit_code == 2 and "count" in result.output


def test_the_logsaver_jobs_name_the_example_set() -> None:
    from reference.allocspec import load_alloc_file
    from reference.jobspec import load_job_file

    alloc = load_alloc_file(EXAMPLE / "alloc.yaml")
    for name in ("web.yaml", "logsaver.yaml"):
        job = load_job_file(EXAMPLE / name)
        assert job.to_spec_job().alloc == alloc.key and job.task_count <= alloc.count


def test_the_logsaver_copies_the_servers_log_whole(tmp_path: Path) -> None:
    from examples.logsaver.saver import save
    from examples.logsaver.web import log_path

    source = log_path(str(tmp_path), "1")
    assert not save(source, tmp_path / "dfs", "web-1.log")  # no log yet
    source.parent.mkdir(parents=True)
    source.write_text("1.0 127.0.0.1 GET / 200\n")
    assert save(source, tmp_path / "dfs", "web-1.log")
    assert (tmp_path / "dfs" / "web-1.log").read_text() == source.read_text()
    assert sorted(p.name for p in (tmp_path / "dfs").iterdir()) == ["web-1.log"]
