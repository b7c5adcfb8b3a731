"""A borglet's report carries an ETag of its content, and a link shard's reads send it back:
an unchanged report is answered 304 with no body, and the shard keeps the object it read."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from reference.borglet.server import state_response, state_tag
from reference.master.linkshard import KeptAlive


def test_equal_reports_have_equal_tags_and_a_matching_tag_gets_304() -> None:
    report = {"machine": "m1", "tasks": [{"task_id": "a/b/0#0", "state": "RUNNING"}]}
    first = state_response(report, None)
    assert first.status_code == 200
    tag = first.headers["etag"]
    assert json.loads(first.body) == report
    assert state_response(dict(report), None).headers["etag"] == tag  # content, not identity
    again = state_response(report, tag)
    assert again.status_code == 304 and again.body == b"" and again.headers["etag"] == tag
    changed = state_response({**report, "tasks": []}, tag)
    assert changed.status_code == 200 and changed.headers["etag"] != tag
    assert state_response(report, '"another"').status_code == 200
    assert state_tag(b"{}") != state_tag(b"[]")


class _Server:
    """A real HTTP server answering GET with its current JSON body and ETag, counting 304s."""

    def __init__(self) -> None:
        self.doc: dict[str, Any] = {"n": 1}
        self.tagged = True
        self.seen_tags: list[str | None] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

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
