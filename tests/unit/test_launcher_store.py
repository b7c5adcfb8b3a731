"""How the launcher hands a cell's processes the store's TLS files: the cell file, the masters' and schedulers' command lines, the cell's CA."""

from __future__ import annotations

import json
import time
from pathlib import Path

from reference import pki
from reference.launcher.cellfile import CellInfo
from reference.launcher.roles import make_cell_ca, pki_dir, start_master, start_scheduler
from reference.store.etcd_cluster import EtcdCluster
from reference.store.tls import StoreTLS

TLS = StoreTLS("/s/pki/ca.crt", "/s/pki/store-client.crt", "/s/pki/store-client.key")


def test_the_cell_file_records_the_stores_tls_files_and_version(tmp_path: Path) -> None:
    info = CellInfo("c", str(tmp_path), str(tmp_path), time.time(), (), ("https://127.0.0.1:1",), {},
                    etcd_tls=TLS, etcd_version="3.6.6")  # fmt: skip
    info.save()
    assert CellInfo.load(tmp_path).etcd_tls == TLS
    assert CellInfo.load(tmp_path).etcd_version == "3.6.6"
    # A cell file from before TLS has neither, and stays as it was when saved again.
    old = CellInfo("c", str(tmp_path), str(tmp_path), time.time(), (), ("http://127.0.0.1:1",), {})
    old.save()
    data = json.loads((tmp_path / "cell.json").read_text())
    assert "etcd_tls" not in data and "etcd_version" not in data
    assert CellInfo.load(tmp_path).etcd_tls is None


def test_masters_and_schedulers_are_started_with_the_client_certificate(tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    started: list[list[str]] = []
    monkeypatch.setattr("reference.launcher.roles.spawn", lambda role, name, command, *a: started.append(command))
    urls = {"master0": "http://127.0.0.1:5"}
    start_master(tmp_path, "c", "master0", urls, ["https://127.0.0.1:1"], (), str(tmp_path), {}, True, TLS)
    start_scheduler(tmp_path, "c", "scheduler0", ["https://127.0.0.1:1"], str(tmp_path), {}, True, TLS)
    for command in started:
        flags = dict(zip(command, command[1:], strict=False))
        assert flags["--etcd"] == "https://127.0.0.1:1"
        assert (flags["--etcd-cafile"], flags["--etcd-certfile"], flags["--etcd-keyfile"]) == (
            TLS.ca_file, TLS.cert_file, TLS.key_file
        )
    started.clear()
    start_master(tmp_path, "c", "master0", urls, ["http://127.0.0.1:1"], (), str(tmp_path), {}, True, None)
    assert "--etcd-cafile" not in started[0]  # a plain store (a bench's) gets no TLS flags


def test_a_new_cell_gets_a_new_ca_and_the_store_its_certificates_from_it(tmp_path: Path) -> None:
    make_cell_ca(tmp_path, "c")
    first = pki.ca_pair(pki_dir(tmp_path)).cert.read_bytes()
    cluster = EtcdCluster(tmp_path / "etcd", members=3, etcd_binary="etcd", pki_dir=pki_dir(tmp_path))
    cluster.ensure_certificates()
    tls = cluster.client_tls
    assert tls is not None and pki.signed_by(tls.cert_file, tls.ca_file)
    assert tls.ca_file == str(pki_dir(tmp_path) / "ca.crt")
    # Resumed: the same CA, the same certificates.
    client = Path(tls.cert_file).read_bytes()
    cluster.ensure_certificates()
    assert Path(tls.cert_file).read_bytes() == client
    # A new cell in the same state dir (--fresh): a new CA, and the certificates follow it.
    make_cell_ca(tmp_path, "c")
    assert pki.ca_pair(pki_dir(tmp_path)).cert.read_bytes() != first
    assert not pki.signed_by(tls.cert_file, tls.ca_file)
    cluster.ensure_certificates()
    assert pki.signed_by(tls.cert_file, tls.ca_file)
    for i in range(3):
        assert pki.signed_by(pki_dir(tmp_path) / f"etcd{i}-server.crt", tls.ca_file)
