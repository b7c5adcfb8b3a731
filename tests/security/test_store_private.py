"""Attacks on a live cell's store from another process of the same host: etcd takes no client without the cell's certificate.

Without TLS and client certificates, any local process (any user's task included) could read
every user's token hash and write a user record with `admin: true` and a token hash of its
choice, which the masters' watch caches would take: the API's checks bypassed at the store.
Each attack here is made as such a process would, with every means it has: plain http, https
without a certificate, a certificate of a CA of its own. `docs/security.md`, "The store".
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import requests

from reference import launcher, pki
from reference.master import codec
from reference.master.access import UserRecord
from reference.store import ops
from reference.store.client import StoreClient, StoreError
from reference.store.etcd_cluster import EtcdCluster
from reference.store.tls import StoreTLS

pytestmark = [
    pytest.mark.integration,
    # The attacker does not check the store's certificate (verify=False): that is the point.
    pytest.mark.filterwarnings("ignore::urllib3.exceptions.InsecureRequestWarning"),
]

CELL = "sec"
EVIL_TOKEN = "mbt_" + "e" * 43


@pytest.fixture(scope="module")
def cell(tmp_path_factory: pytest.TempPathFactory) -> Iterator[launcher.CellInfo]:
    root = tmp_path_factory.mktemp("store-private") / "cell"
    info = launcher.up(root, cell=CELL, replicas=1, machines=0, schedulers=0)
    try:
        yield info
    finally:
        if launcher.CellInfo.load(root).running():
            launcher.down(root)


@pytest.fixture(scope="module")
def stranger(tmp_path_factory: pytest.TempPathFactory) -> StoreTLS:
    """A client certificate of a CA the attacker made itself, for the same names."""
    d = tmp_path_factory.mktemp("stranger-pki")
    pki.create_ca(d, CELL)
    pair = pki.issue(d, "store-client", hosts=["127.0.0.1", "localhost"], server=True, client=True)
    return StoreTLS(str(pki.ca_pair(d).cert), str(pair.cert), str(pair.key))


def forged_admin() -> bytes:
    record = UserRecord("evil", hashlib.sha256(EVIL_TOKEN.encode()).hexdigest(), admin=True)
    return codec.encode_user(record)


def plain(url: str) -> str:
    return url.replace("https://", "http://", 1)


def attempts(info: launcher.CellInfo, stranger: StoreTLS) -> list[tuple[str, str, dict[str, Any]]]:
    """(how, base URL, requests arguments) for every way a local process might call etcd."""
    url = info.etcd_urls[0]
    assert info.etcd_tls is not None
    return [
        ("plain http", plain(url), {}),
        ("https, no certificate, server unchecked", url, {"verify": False}),
        ("https, no certificate, the cell's CA trusted", url, {"verify": info.etcd_tls.ca_file}),
        ("https, a certificate of another CA", url, {"verify": False, "cert": (stranger.cert_file, stranger.key_file)}),
    ]


def answered(method: str, url: str, **kwargs: Any) -> requests.Response | None:
    """The response, or None when the store closed the connection or refused the handshake."""
    try:
        return requests.request(method, url, timeout=5, **kwargs)
    except requests.RequestException:
        return None


def test_the_store_serves_tls_with_client_certificates_only(cell: launcher.CellInfo) -> None:
    assert cell.etcd_tls is not None
    assert all(u.startswith("https://") for u in cell.etcd_urls)
    assert cell.etcd_version is not None and tuple(map(int, cell.etcd_version.split("."))) >= (3, 6, 0)


def test_no_process_without_the_cells_certificate_reads_the_store(
    cell: launcher.CellInfo, stranger: StoreTLS
) -> None:
    users = {"key": ops.b64(codec.Keys(CELL).users), "range_end": ops.b64(ops.prefix_range_end(codec.Keys(CELL).users))}
    for how, base, kwargs in attempts(cell, stranger):
        for method, path, body in (("POST", "/v3/kv/range", users), ("GET", "/version", None), ("GET", "/health", None)):
            response = answered(method, base + path, json=body, **kwargs)
            assert response is None or response.status_code >= 400, f"{how}: {method} {path} answered {response.status_code}: {response.text[:200]}"
            assert response is None or "token_sha256" not in response.text


def test_no_process_without_the_cells_certificate_forges_an_admin(cell: launcher.CellInfo, stranger: StoreTLS) -> None:
    key = codec.Keys(CELL).user("evil")
    put = {"key": ops.b64(key), "value": ops.b64(forged_admin())}
    for how, base, kwargs in attempts(cell, stranger):
        response = answered("POST", base + "/v3/kv/put", json=put, **kwargs)
        assert response is None or response.status_code >= 400, f"{how}: the put answered {response.status_code}"
    # Through our own client library too, with the stranger's files: refused in the handshake.
    with StoreClient(list(cell.etcd_urls), timeout=3.0, connect_timeout=3.0, tls=stranger) as client:
        with pytest.raises(StoreError):
            client.put(key, forged_admin())
    # The library will not even try https without a certificate.
    with pytest.raises(ValueError, match="--etcd-certfile"):
        StoreClient(list(cell.etcd_urls))
    # Nothing was written, and the masters know no such admin.
    with StoreClient(list(cell.etcd_urls), tls=cell.etcd_tls) as own:
        assert own.get(key) is None
    answer = httpx.get(cell.master_urls[0] + "/v1/cell", headers={"Authorization": f"Bearer {EVIL_TOKEN}"}, timeout=5)
    assert answer.status_code == 401


def test_no_process_without_a_certificate_of_the_cells_ca_joins_as_a_peer(
    cell: launcher.CellInfo, stranger: StoreTLS
) -> None:
    cluster = EtcdCluster.load(Path(cell.state_dir) / "etcd")
    peer = f"https://127.0.0.1:{cluster.members[0].peer_port}"
    for kwargs in ({"verify": False}, {"verify": False, "cert": (stranger.cert_file, stranger.key_file)}):
        for path in ("/members", "/version", "/raft/probing"):
            response = answered("GET", peer + path, **kwargs)
            assert response is None or response.status_code >= 400, f"peer {path} with {kwargs}: {response.status_code}"
    assert answered("GET", plain(peer) + "/members") is None or answered("GET", plain(peer) + "/members").status_code >= 400


def test_the_cells_own_client_reads_and_writes(cell: launcher.CellInfo) -> None:
    keys = codec.Keys(CELL)
    with StoreClient(list(cell.etcd_urls), tls=cell.etcd_tls) as client:
        admin = client.get_json(keys.user("admin"))
        assert admin is not None and admin[0]["admin"] is True
        revision = client.put("/minborg-test/probe", b"1")
        assert client.get("/minborg-test/probe") == (b"1", revision)
        assert client.delete("/minborg-test/probe")
    # The masters reach it with the same certificate: the API answers from the store.
    token = launcher.read_admin_token(cell.state_dir)
    answer = httpx.get(cell.master_urls[0] + "/v1/cell", headers={"Authorization": f"Bearer {token}"}, timeout=5)
    assert answer.status_code == 200 and answer.json()["leader"]


def test_private_keys_are_the_cells_alone(cell: launcher.CellInfo) -> None:
    pki_dir = Path(cell.state_dir) / "pki"
    keys = sorted(pki_dir.glob("*.key"))
    assert {k.name for k in keys} >= {"ca.key", "store-client.key", "etcd0-server.key", "etcd0-peer.key"}
    for key in keys:
        info = key.stat()
        assert stat.S_IMODE(info.st_mode) == 0o600, key
        assert info.st_uid == os.geteuid()
    assert stat.S_IMODE(pki_dir.stat().st_mode) == 0o700


def test_restart_keeps_the_ca_and_fresh_replaces_it(cell: launcher.CellInfo, tmp_path: Path) -> None:
    # Last in the file: it restarts the module's cell and replaces it with a fresh one.
    root = Path(cell.state_dir)
    ca = (root / "pki" / "ca.crt").read_bytes()
    launcher.restart(root, control_plane=True)
    assert (root / "pki" / "ca.crt").read_bytes() == ca
    restarted = launcher.CellInfo.load(root)
    with StoreClient(list(restarted.etcd_urls), tls=restarted.etcd_tls) as client:
        assert client.get(codec.Keys(CELL).user("admin")) is not None

    # A copy of the old cell's client certificate, as a process that kept it would hold.
    old = tmp_path / "old"
    shutil.copytree(root / "pki", old)
    launcher.down(root)
    fresh = launcher.up(root, cell=CELL, replicas=1, machines=0, schedulers=0, fresh=True)
    assert (root / "pki" / "ca.crt").read_bytes() != ca
    stale = StoreTLS(str(root / "pki" / "ca.crt"), str(old / "store-client.crt"), str(old / "store-client.key"))
    with StoreClient(list(fresh.etcd_urls), timeout=3.0, connect_timeout=3.0, tls=stale) as client:
        with pytest.raises(StoreError):
            client.get(codec.Keys(CELL).user("admin"))
    with StoreClient(list(fresh.etcd_urls), tls=fresh.etcd_tls) as client:
        assert json.loads(client.get(codec.Keys(CELL).user("admin"))[0])["admin"] is True  # type: ignore[index]
