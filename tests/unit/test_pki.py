"""The cell's CA and certificates (reference/pki.py): private keys 0600, the CA kept until replaced, certificates issued again when it is."""

from __future__ import annotations

import ipaddress
import stat
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.x509.oid import ExtendedKeyUsageOID

from reference import pki


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_private_keys_are_0600_and_the_directory_0700(tmp_path: Path) -> None:
    d = tmp_path / "pki"
    ca = pki.create_ca(d, "test")
    leaf = pki.issue(d, "store-client", client=True)
    assert mode(ca.key) == mode(leaf.key) == 0o600
    assert mode(ca.cert) == mode(leaf.cert) == 0o644
    assert mode(d) == 0o700
    assert not list(d.glob(".*.tmp"))  # no temporary file left behind


def test_ensure_ca_keeps_the_ca_and_create_ca_replaces_it(tmp_path: Path) -> None:
    first = pki.ensure_ca(tmp_path, "test")
    pem = first.cert.read_bytes()
    assert pki.ensure_ca(tmp_path, "test").cert.read_bytes() == pem  # resume, restart: kept
    client = pki.ensure_issued(tmp_path, "store-client")
    assert pki.signed_by(client.cert, first.cert)
    old_ca = tmp_path / "old-ca.crt"
    old_ca.write_bytes(pem)

    pki.create_ca(tmp_path, "test")  # --fresh: a new CA
    assert first.cert.read_bytes() != pem
    assert not pki.signed_by(client.cert, first.cert)  # the old client certificate is refused
    again = pki.ensure_issued(tmp_path, "store-client")
    assert pki.signed_by(again.cert, first.cert) and not pki.signed_by(again.cert, old_ca)


def test_ensure_issued_reuses_a_good_certificate_and_reissues_for_other_hosts(tmp_path: Path) -> None:
    pki.create_ca(tmp_path)
    hosts = ["127.0.0.1", "localhost"]
    server = pki.ensure_issued(tmp_path, "etcd0-server", hosts=hosts, server=True)
    pem = server.cert.read_bytes()
    assert pki.ensure_issued(tmp_path, "etcd0-server", hosts=hosts, server=True).cert.read_bytes() == pem
    assert pki.ensure_issued(tmp_path, "etcd0-server", hosts=[*hosts, "10.0.0.2"], server=True).cert.read_bytes() != pem
    server.key.unlink()
    assert pki.ensure_issued(tmp_path, "etcd0-server", hosts=hosts, server=True).key.exists()


def test_a_server_certificate_names_its_addresses_and_may_also_authenticate_a_client(tmp_path: Path) -> None:
    # etcd's JSON gateway dials the member's own gRPC port at 127.0.0.1 with the member's
    # certificate: it must be valid for 127.0.0.1 and for client authentication too.
    pki.create_ca(tmp_path)
    cert = pki.load_cert(pki.issue(tmp_path, "etcd0-server", hosts=["127.0.0.1", "localhost"], server=True).cert)
    names = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert names.get_values_for_type(x509.IPAddress) == [ipaddress.ip_address("127.0.0.1")]
    assert names.get_values_for_type(x509.DNSName) == ["localhost"]
    usages = cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    assert set(usages) == {ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH}
    assert not cert.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
    client = pki.load_cert(pki.issue(tmp_path, "store-client", client=True).cert)
    assert list(client.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value) == [ExtendedKeyUsageOID.CLIENT_AUTH]


def test_issuing_needs_a_ca_and_a_purpose(tmp_path: Path) -> None:
    with pytest.raises(pki.PKIError, match="ca.crt"):
        pki.issue(tmp_path, "store-client")
    pki.create_ca(tmp_path)
    with pytest.raises(ValueError, match="server, a client or both"):
        pki.issue(tmp_path, "nothing", server=False, client=False)


def test_an_unreadable_ca_is_made_again(tmp_path: Path) -> None:
    ca = pki.create_ca(tmp_path)
    ca.cert.write_text("not a certificate")
    made = pki.ensure_ca(tmp_path)
    assert pki.load_cert(made.cert).extensions.get_extension_for_class(x509.BasicConstraints).value.ca
