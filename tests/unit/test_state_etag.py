"""A borglet's report carries an ETag of its content, and a link shard's reads send it back:
an unchanged report is answered 304 with no body, and the shard keeps the object it read."""

from __future__ import annotations

import contextlib
import json
import socket
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from reference.borglet.server import StateReports, state_tag
from reference.master.linkshard import KeptAlive
from tests.unit.fakehttp import JsonHandler, serving


def test_equal_reports_have_equal_tags_and_a_matching_tag_gets_304() -> None:
    report = {"machine": "m1", "tasks": [{"task_id": "a/b/0#0", "state": "RUNNING"}]}
    first = StateReports().response(report, None)
    assert first.status_code == 200
    tag = first.headers["etag"]
    assert json.loads(first.body) == report
    assert StateReports().response(dict(report), None).headers["etag"] == tag  # content, not identity
    again = StateReports().response(report, tag)
    assert again.status_code == 304 and again.body == b"" and again.headers["etag"] == tag
    changed = StateReports().response({**report, "tasks": []}, tag)
    assert changed.status_code == 200 and changed.headers["etag"] != tag
    assert StateReports().response(report, '"another"').status_code == 200
    assert state_tag(b"{}") != state_tag(b"[]")


class _Server:
    """A real HTTP server (fakehttp) answering GET with its current JSON body and ETag; it
    counts the connections it accepted and can close them all, as a server's keep-alive
    timeout would."""

    def __init__(self) -> None:
        self.doc: dict[str, Any] = {"n": 1}
        self.tagged = True
        self.seen_tags: list[str | None] = []
        self.connections = 0  # accepted
        self.open: list[socket.socket] = []
        self.closed = threading.Event()  # a connection ended on the server's side
        outer = self

        class Handler(JsonHandler):
            protocol_version = "HTTP/1.1"

            def setup(self) -> None:
                outer.connections += 1
                super().setup()
                outer.open.append(self.connection)

            def finish(self) -> None:
                super().finish()
                outer.closed.set()

            def do_GET(self) -> None:  # noqa: N802
                body = json.dumps(outer.doc).encode()
                tag = state_tag(body)
                sent = self.headers.get("If-None-Match")
                outer.seen_tags.append(sent)
                if outer.tagged and sent == tag:
                    self.send_response(304)
                    self.send_header("ETag", tag)
                    self.end_headers()
                    return
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                if outer.tagged:
                    self.send_header("ETag", tag)
                self.end_headers()
                self.wfile.write(body)

        self.handler = Handler

    def close_connections(self) -> None:
        """Close every connection on the server's side and wait until one has ended."""
        for conn in self.open:
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)
        assert self.closed.wait(5), "the server's side of the connection did not end"

    @contextlib.contextmanager
    def serving(self) -> Iterator[str]:
        with serving(self.handler) as base:
            yield f"{base}/v1/state"


def test_kept_alive_reads_send_the_tag_back_and_keep_the_object() -> None:
    server = _Server()
    with server.serving() as url:
        reads = KeptAlive(timeout=2.0)
        first = reads.get_json(url)
        assert first == {"n": 1} and server.seen_tags == [None]
        second = reads.get_json(url)
        assert second is first  # 304: the same object, not decoded again
        assert reads.not_modified == 1 and server.seen_tags[-1] is not None
        server.doc = {"n": 2}
        third = reads.get_json(url)
        assert third == {"n": 2} and reads.not_modified == 1
        assert reads.get_json(url) is third and reads.not_modified == 2
        # A server that stops tagging is read whole every time; no stale object is returned.
        server.tagged = False
        server.doc = {"n": 3}
        assert reads.get_json(url) == {"n": 3}
        assert reads.get_json(url) == {"n": 3}
        assert server.seen_tags[-1] is None and reads.not_modified == 2


def test_the_threads_of_a_shard_share_each_hosts_kept_alive_connection() -> None:
    # Polls of one host come from any of the shard's threads, one at a time here: a connection
    # per thread would be 16 connections; the one shared is one.
    server = _Server()
    with server.serving() as url:
        reads = KeptAlive(timeout=2.0)
        turn = threading.Lock()
        answers: list[Any] = []

        def poll(_: int) -> None:
            with turn:
                answers.append(reads.get_json(url))

        with ThreadPoolExecutor(16) as pool:
            list(pool.map(poll, range(48)))
        assert len(answers) == 48 and all(a == {"n": 1} for a in answers)
        assert server.connections == 1 and reads.connects == 1
        # A connection the server closed meanwhile (its keep-alive ran out) is replaced, and
        # the read still answers.
        server.close_connections()
        assert reads.get_json(url) == {"n": 1} and server.connections == reads.connects == 2


def test_an_equal_report_reuses_the_last_json_and_tag_and_a_changed_one_does_not() -> None:
    reports = StateReports()
    first = reports.response({"tasks": [{"task_id": "a", "state": "RUNNING"}]}, None)
    tag = first.headers["ETag"]
    assert first.body == StateReports().response({"tasks": [{"task_id": "a", "state": "RUNNING"}]}, None).body
    again = reports.response({"tasks": [{"task_id": "a", "state": "RUNNING"}]}, tag)
    assert again.status_code == 304 and again.headers["ETag"] == tag and reports.reused == 1
    changed = reports.response({"tasks": [{"task_id": "a", "state": "DEAD"}]}, tag)
    assert changed.status_code == 200 and changed.headers["ETag"] != tag and reports.reused == 1
    assert json.loads(changed.body) == {"tasks": [{"task_id": "a", "state": "DEAD"}]}
