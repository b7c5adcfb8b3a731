"""A borglet's report carries an ETag of its content, and a link shard's reads send it back:
an unchanged report is answered 304 with no body, and the shard keeps the object it read."""

from __future__ import annotations

import json
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from reference.borglet.server import StateReports, state_tag
from reference.master.linkshard import KeptAlive


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
    """A real HTTP server answering GET with its current JSON body and ETag, counting 304s."""

    def __init__(self, idle_timeout: float | None = None) -> None:
        self.doc: dict[str, Any] = {"n": 1}
        self.tagged = True
        self.seen_tags: list[str | None] = []
        self.connections = 0  # accepted
        outer = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            timeout = idle_timeout  # a kept-alive connection idle this long is closed (as uvicorn's keep-alive)

            def setup(self) -> None:
                outer.connections += 1
                super().setup()

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

            def log_message(self, *args: Any) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1/state"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


def test_kept_alive_reads_send_the_tag_back_and_keep_the_object() -> None:
    server = _Server()
    try:
        reads = KeptAlive(timeout=2.0)
        first = reads.get_json(server.url)
        assert first == {"n": 1} and server.seen_tags == [None]
        second = reads.get_json(server.url)
        assert second is first  # 304: the same object, not decoded again
        assert reads.not_modified == 1 and server.seen_tags[-1] is not None
        server.doc = {"n": 2}
        third = reads.get_json(server.url)
        assert third == {"n": 2} and reads.not_modified == 1
        assert reads.get_json(server.url) is third and reads.not_modified == 2
        # A server that stops tagging is read whole every time; no stale object is returned.
        server.tagged = False
        server.doc = {"n": 3}
        assert reads.get_json(server.url) == {"n": 3}
        assert reads.get_json(server.url) == {"n": 3}
        assert server.seen_tags[-1] is None and reads.not_modified == 2
    finally:
        server.close()


def test_the_threads_of_a_shard_share_each_hosts_kept_alive_connection() -> None:
    # Polls of one host come from any of the shard's threads. Each waits its turn here, so the
    # server closes any connection idle for 0.3 s: a connection per thread (used every 16th
    # poll, 0.8 s apart) would be closed before each use; the one shared is used every 0.05 s.
    server = _Server(idle_timeout=0.3)
    try:
        reads = KeptAlive(timeout=2.0)
        turn = threading.Lock()
        answers: list[Any] = []

        def poll(_: int) -> None:
            with turn:
                answers.append(reads.get_json(server.url))
                time.sleep(0.05)

        with ThreadPoolExecutor(16) as pool:
            list(pool.map(poll, range(48)))
        assert len(answers) == 48 and all(a == {"n": 1} for a in answers)
        assert server.connections == 1 and reads.connects == 1
        # A connection the server closed meanwhile is replaced, and the read still answers.
        time.sleep(0.5)
        assert reads.get_json(server.url) == {"n": 1} and server.connections == reads.connects == 2
    finally:
        server.close()


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
