"""A write's answer is waited for as long as the cell may take to give it.

A follower waits up to FORWARD_TIMEOUT_S for the leader and CATCH_UP_S for its own cache before
it answers a write; a 10,000-task submit on a busy cell took 8-9 s, and both clients gave up at
their 5 s read timeout, telling the user the change "may or may not have been made" of a write
the cell was still answering within its own bounds. Reads keep the short timeout.
"""

from __future__ import annotations

import time

import pytest

from reference.cellfile import NO_ANSWER, ClientError
from reference.cli import http as plain_http
from reference.client import CellClient
from reference.master import forward
from tests.unit.fakehttp import JsonHandler, serving

SLOW_S = 1.2  # the cell's answer comes this late; the clients' read timeout is shorter


class Slow(JsonHandler):
    def do_GET(self) -> None:
        time.sleep(SLOW_S)
        try:
            self.answer(200, b'{"ok": true}')
        except (BrokenPipeError, ConnectionResetError):
            pass  # the reader gave up first, as it should

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        time.sleep(SLOW_S)
        self.answer(201, b'{"key": "u/j"}')


def test_the_write_timeout_outlasts_what_a_follower_may_take_to_answer() -> None:
    assert plain_http.WRITE_TIMEOUT_S > forward.FORWARD_TIMEOUT_S + forward.CATCH_UP_S


def test_the_fast_path_waits_for_a_slow_write_and_not_for_a_slow_read() -> None:
    with serving(Slow) as url:
        cell = plain_http.PlainCell([url], None, retry_s=0.0, timeout=0.4)
        assert cell.request("POST", "/v1/jobs", json={"name": "j"}) == {"key": "u/j"}
        with pytest.raises(ClientError) as caught:
            cell.request("GET", "/v1/cell")
        assert caught.value.status == NO_ANSWER


def test_the_full_client_waits_for_a_slow_write_and_not_for_a_slow_read() -> None:
    with serving(Slow) as url, CellClient([url], retry_s=0.0, timeout=0.4) as client:
        assert client.submit({"name": "j"}) == {"key": "u/j"}
        with pytest.raises(ClientError) as caught:
            client.cell()
        assert caught.value.status == NO_ANSWER
