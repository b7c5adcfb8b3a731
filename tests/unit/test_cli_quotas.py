"""`minborg quota set/list/delete` against a stand-in master: what each sends and prints, and its exit codes."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest
from typer.testing import CliRunner

from reference.cli import quotas as cli_quotas
from reference.cli.app import app
from reference.client import CellClient

runner = CliRunner()


@pytest.fixture
def sent(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, str, Any]]:
    """The requests the command made, answered as a master would."""
    seen: list[tuple[str, str, Any]] = []

    def handler(request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content) if request.content else None
        seen.append((request.method, request.url.path, body))
        if request.method == "PUT" and body.get("cpu") == "lots":
            return httpx.Response(422, json={"detail": [{"field": "cpu", "error": "must be a quantity like 500m or 2"}]})
        if request.method == "PUT":
            return httpx.Response(200, json={"quota": {"user": "alice", "band": "batch", "applies": "alice",
                                                       "limit": {"cpu": 100_000, "ram": 512 * 1024**3},
                                                       "used": {"cpu": 2000}}, "revision": 9})  # fmt: skip
        if request.method == "DELETE":
            return httpx.Response(200, json={"deleted": {"user": "alice", "band": "batch"}, "quota": None, "revision": 10})
        return httpx.Response(200, json={"quotas": [{"user": "*", "band": "batch", "limit": {"cpu": 24000}}], "revision": 8})

    # A new client each command: a command closes the one it used.
    monkeypatch.setattr(cli_quotas, "client", lambda *a, **kw: CellClient(["http://m0"], transport=httpx.MockTransport(handler)))
    return seen


def test_set_sends_the_figures_as_written(sent: list[tuple[str, str, Any]]) -> None:
    result = runner.invoke(app, ["quota", "set", "alice", "batch", "cpu=100,ram=512GiB"])
    assert result.exit_code == 0, result.output
    assert sent == [("PUT", "/v1/quotas/alice/batch", {"cpu": "100", "ram": "512GiB"})]
    assert "cpu=100000m ram=512GiB" in result.output and "request cpu=2000m" in result.output


def test_set_of_the_default_user(sent: list[tuple[str, str, Any]]) -> None:
    assert runner.invoke(app, ["quota", "set", "*", "production", "cpu=10"]).exit_code == 0
    assert sent[0][:2] == ("PUT", "/v1/quotas/*/production")


def test_set_of_a_figure_the_master_refuses_exits_2_naming_it(sent: list[tuple[str, str, Any]]) -> None:
    result = runner.invoke(app, ["quota", "set", "alice", "batch", "cpu=lots"])
    assert result.exit_code == 2
    assert "cpu" in result.output


def test_set_of_pairs_that_do_not_read_is_a_usage_error(sent: list[tuple[str, str, Any]]) -> None:
    result = runner.invoke(app, ["quota", "set", "alice", "batch", "cpu"])
    assert result.exit_code == 2
    assert sent == []  # refused before any request


def test_list_prints_each_entry(sent: list[tuple[str, str, Any]]) -> None:
    result = runner.invoke(app, ["quota", "list"])
    assert result.exit_code == 0, result.output
    assert sent == [("GET", "/v1/quotas", None)]
    assert result.output.split() == ["*", "batch", "cpu=24000m"]
    assert json.loads(runner.invoke(app, ["quota", "list", "--json"]).output)[0]["user"] == "*"


def test_delete(sent: list[tuple[str, str, Any]]) -> None:
    result = runner.invoke(app, ["quota", "delete", "alice", "batch"])
    assert result.exit_code == 0, result.output
    assert sent == [("DELETE", "/v1/quotas/alice/batch", None)]
