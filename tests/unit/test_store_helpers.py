"""Pure helpers of the store's client, watch and cluster modules (no etcd needed)."""

from __future__ import annotations

import argparse
import http.server
import socket
import threading
from pathlib import Path

import etcd3gw
import pytest
import requests
import urllib3
from etcd3gw import exceptions as gw_exceptions

from reference.store import etcd_cluster, etcdbin
from reference.store.client import (
    dumps,
    endpoint_scheme,
    gateway_post,
    never_reached_server,
    normalize_endpoint,
)
from reference.store.etcd_cluster import Member, initial_cluster_flag
from reference.store.etcdbin import MIN_ETCD_VERSION, etcd_version, why_exited
from reference.store.tls import StoreTLS, add_arguments, from_arguments


@pytest.mark.parametrize(
    ("endpoint", "expected"),
    [
        ("http://127.0.0.1:2379", ("127.0.0.1", 2379)),
        ("https://127.0.0.1:2379", ("127.0.0.1", 2379)),
        ("127.0.0.1:2379", ("127.0.0.1", 2379)),
        ("http://localhost:1/", ("localhost", 1)),
    ],
)
def test_normalize_endpoint(endpoint: str, expected: tuple[str, int]) -> None:
    assert normalize_endpoint(endpoint) == expected


@pytest.mark.parametrize("bad", ["ftp://127.0.0.1:2379", "127.0.0.1", "http://:2379"])
def test_normalize_endpoint_refuses_what_it_cannot_reach(bad: str) -> None:
    with pytest.raises(ValueError, match="https://HOST:PORT"):
        normalize_endpoint(bad)


TLS = StoreTLS("/pki/ca.crt", "/pki/store-client.crt", "/pki/store-client.key")


def test_tls_files_make_every_endpoint_https() -> None:
    assert endpoint_scheme(["https://127.0.0.1:1", "127.0.0.1:2"], TLS) == "https"
    assert endpoint_scheme(["http://127.0.0.1:1"], None) == "http"


def test_an_https_store_without_the_cells_certificate_is_refused_with_what_to_give() -> None:
    with pytest.raises(ValueError, match="--etcd-cafile, --etcd-certfile, --etcd-keyfile"):
        endpoint_scheme(["https://127.0.0.1:2379"], None)
    with pytest.raises(ValueError, match="plain http"):
        endpoint_scheme(["http://127.0.0.1:2379"], TLS)


def test_tls_flags_go_together_and_round_trip(tmp_path: Path) -> None:
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    assert from_arguments(parser.parse_args([])) is None
    with pytest.raises(ValueError, match="go together"):
        from_arguments(parser.parse_args(["--etcd-cafile", "x"]))
    files = [tmp_path / n for n in ("ca.crt", "c.crt", "c.key")]
    for f in files:
        f.write_text("pem")
    tls = StoreTLS(*map(str, files))
    assert from_arguments(parser.parse_args(tls.args())) == tls
    assert StoreTLS.from_json(tls.to_json()) == tls
    files[2].unlink()
    with pytest.raises(ValueError, match="c.key"):
        from_arguments(parser.parse_args(tls.args()))


def test_etcd_version_is_read_from_the_binary_and_an_old_one_is_never_taken(tmp_path: Path) -> None:
    fake = tmp_path / "etcd"
    fake.write_text("#!/bin/sh\necho 'etcd Version: 3.5.1'\necho 'Git SHA: d42e8589e'\n")
    fake.chmod(0o755)
    assert etcd_version(str(fake)) == (3, 5, 1)
    assert etcd_version(str(tmp_path / "missing")) is None
    assert (3, 5, 1) < MIN_ETCD_VERSION


def test_no_current_etcd_and_no_build_says_what_to_do(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    old = tmp_path / "etcd"
    old.write_text("#!/bin/sh\necho 'etcd Version: 3.5.1'\n")
    old.chmod(0o755)
    monkeypatch.setattr(etcdbin, "_etcd_candidates", lambda: [str(old)])
    with pytest.raises(etcd_cluster.EtcdClusterError, match=r"install_etcd.sh.*") as err:
        etcdbin.find_etcd_binary(build=False)
    assert "etcd 3.5.1" in str(err.value)  # the old one is named, and not used


def test_members_run_with_tls_on_client_and_peer_urls(tmp_path: Path) -> None:
    cluster = etcd_cluster.EtcdCluster(tmp_path, members=3, base_port=40000, etcd_binary="etcd")
    cmd = cluster.command(1, "new")
    flag = dict(zip(cmd[1::2], cmd[2::2], strict=False))
    assert cluster.client_urls[1] == "https://127.0.0.1:40002"
    assert flag["--listen-client-urls"] == "https://127.0.0.1:40002"
    assert flag["--listen-peer-urls"] == "https://127.0.0.1:40003"
    assert "etcd0=https://127.0.0.1:40001" in flag["--initial-cluster"]
    assert {"--client-cert-auth", "--peer-client-cert-auth"} <= set(cmd)
    assert cmd[cmd.index("--trusted-ca-file") + 1] == cmd[cmd.index("--peer-trusted-ca-file") + 1] == str(tmp_path / "pki" / "ca.crt")
    assert cmd[cmd.index("--cert-file") + 1].endswith("etcd1-server.crt")
    assert "--experimental-watch-progress-notify-interval" not in cmd  # gone from 3.6's names
    plain = etcd_cluster.EtcdCluster(tmp_path / "plain", members=1, etcd_binary="etcd", tls=False)
    assert plain.client_urls[0].startswith("http://") and "--client-cert-auth" not in plain.command(0, "new")
    assert plain.client_tls is None


def _wrapped(cause: BaseException) -> gw_exceptions.Etcd3Exception:
    """Wrap `cause` the way etcd3gw does: a new exception raised inside `except`."""
    try:
        try:
            raise cause
        except requests.exceptions.RequestException as exc:
            raise gw_exceptions.ConnectionFailedError(str(exc))  # noqa: B904
    except gw_exceptions.ConnectionFailedError as wrapped:
        return wrapped


def test_a_refused_connection_never_reached_the_server() -> None:
    refused = urllib3.exceptions.NewConnectionError(None, "Connection refused")  # type: ignore[arg-type]
    cause = requests.exceptions.ConnectionError(urllib3.exceptions.MaxRetryError(None, "/", refused))  # type: ignore[arg-type]
    assert never_reached_server(_wrapped(cause))
    assert never_reached_server(_wrapped(requests.exceptions.ConnectTimeout()))


def test_a_reset_or_read_timeout_leaves_the_outcome_unknown() -> None:
    reset = requests.exceptions.ConnectionError(urllib3.exceptions.ProtocolError("Connection aborted"))
    assert not never_reached_server(_wrapped(reset))
    assert not never_reached_server(_wrapped(requests.exceptions.ReadTimeout()))
    # A 503 answer has no cause at all: etcd got the request.
    assert not never_reached_server(gw_exceptions.ConnectionFailedError("no leader"))


def test_dumps_is_canonical() -> None:
    assert dumps({"b": 1, "a": [1, 2]}) == b'{"a":[1,2],"b":1}'


def test_initial_cluster_flag_lists_every_peer() -> None:
    members = [Member("etcd0", 1, 2), Member("etcd1", 3, 4)]
    assert initial_cluster_flag(members, "127.0.0.1") == (
        "etcd0=http://127.0.0.1:2,etcd1=http://127.0.0.1:4"
    )


@pytest.mark.skipif(
    etcd_version(str(etcdbin.PROJECT / "tools" / "bin" / "etcd")) is None,
    reason="no tools/bin/etcd: this would build it (minutes); bash reference/store/install_etcd.sh",
)
def test_with_no_current_etcd_found_the_pinned_one_is_installed_with_a_message(monkeypatch: pytest.MonkeyPatch) -> None:
    # tools/bin/etcd is there, so the install script only checks its version and returns.
    monkeypatch.setattr(etcdbin, "_etcd_candidates", lambda: [])
    said: list[str] = []
    found = etcdbin.find_etcd_binary(say=said.append)
    assert found == str(etcdbin.PROJECT / "tools" / "bin" / "etcd")
    assert etcd_version(found) == tuple(map(int, etcdbin.PINNED_ETCD.split(".")))
    assert "building etcd 3.6.6" in said[0] and len(said) == 2


def test_the_go_module_pins_the_etcd_the_code_names() -> None:
    go_mod = (etcdbin.PROJECT / "reference" / "store" / "etcdbuild" / "go.mod").read_text()
    assert f"go.etcd.io/etcd/server/v3 v{etcdbin.PINNED_ETCD}\n" in go_mod
    assert tuple(map(int, etcdbin.PINNED_ETCD.split("."))) >= MIN_ETCD_VERSION


def test_why_a_member_exited_is_its_last_fatal_or_error_line() -> None:
    log = [
        '{"level":"info","msg":"starting"}',
        '{"level":"error","msg":"bootstrap failed","error":"cannot access member directory: not a directory"}',
        '{"level":"fatal","msg":"discovery failed","error":"cannot access member directory: not a directory"}',
    ]
    assert why_exited(log) == "discovery failed: cannot access member directory: not a directory"
    assert why_exited(["plain text, no JSON", "the last line"]) == "the last line"
    assert why_exited([]) == "(no log)"


class _Gateway(http.server.BaseHTTPRequestHandler):
    """A stand-in gateway: /ok echoes the body it got, /busy answers 503, /hangup closes the
    connection without an answer (the request reached it)."""

    def do_POST(self) -> None:  # noqa: N802
        body = self.rfile.read(int(self.headers["Content-Length"]))
        if self.path.endswith("/hangup"):
            self.close_connection = True
            self.connection.shutdown(socket.SHUT_RDWR)
            return
        status, answer = (200, b'{"got":' + body + b"}") if self.path.endswith("/ok") else (503, b"no leader")
        self.send_response(status)
        self.send_header("Content-Length", str(len(answer)))
        self.end_headers()
        self.wfile.write(answer)

    def log_message(self, *_args: object) -> None:
        pass


def test_gateway_post_answers_and_fails_as_etcd3gws_post_does() -> None:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Gateway)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        gw = etcd3gw.Etcd3Client(host="127.0.0.1", port=server.server_address[1], timeout=5, api_path="/v3/")
        assert gateway_post(gw, "/ok", {"key": "a2V5", "n": 2**63 - 1}) == {"got": {"key": "a2V5", "n": 2**63 - 1}}
        with pytest.raises(gw_exceptions.ConnectionFailedError) as busy:
            gateway_post(gw, "busy", {})
        assert not never_reached_server(busy.value)  # etcd got it
        with pytest.raises(gw_exceptions.ConnectionFailedError) as hangup:
            gateway_post(gw, "hangup", {})
        assert not never_reached_server(hangup.value)  # sent: the outcome is unknown
    finally:
        server.shutdown()
        server.server_close()
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        closed = s.getsockname()[1]
    with pytest.raises(gw_exceptions.ConnectionFailedError) as refused:
        gateway_post(etcd3gw.Etcd3Client(host="127.0.0.1", port=closed, timeout=5, api_path="/v3/"), "kv/txn", {})
    assert never_reached_server(refused.value)  # safe to try the next member
