"""The cell bundle for hosts of their own (docs/deploy.md): what it issues for whom, kept when a machine is added."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from cryptography import x509

from reference import pki
from reference.launcher import bundle


def sans(path: Path) -> list[str]:
    cert = x509.load_pem_x509_certificate(path.read_bytes())
    names = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    return [str(v) for v in names.get_values_for_type(x509.IPAddress)]


def test_hosts_are_name_equals_address_and_anything_else_is_refused_with_what_to_change() -> None:
    assert bundle.parse_host("machine12=10.0.0.9") == ("machine12", "10.0.0.9")
    with pytest.raises(ValueError, match="give NAME=ADDRESS"):
        bundle.parse_host("web0=10.0.0.9")
    with pytest.raises(ValueError, match="give NAME=ADDRESS"):
        bundle.parse_host("master0")
    with pytest.raises(ValueError, match="'10.0.0' is not an IP address"):
        bundle.parse_host("master0=10.0.0")


def test_each_process_gets_a_certificate_for_its_own_address_and_a_second_run_keeps_them(tmp_path: Path) -> None:
    made = bundle.make(tmp_path, "prod", {"etcd0": "10.9.0.2", "master0": "10.9.0.3", "scheduler0": "10.9.0.4",
                                          "machine0": "10.9.0.5"})  # fmt: skip
    p = tmp_path / "pki"
    assert "10.9.0.2" in sans(p / "etcd0-server.crt") and "10.9.0.2" in sans(p / "etcd0-peer.crt")
    assert "10.9.0.3" in sans(p / "master0-https.crt") and "10.9.0.5" in sans(p / "machine0-https.crt")
    assert not list(p.glob("scheduler0*"))  # it serves nothing
    assert (tmp_path / "channel.key").stat().st_mode & 0o777 == 0o600
    assert (tmp_path / "admin.token").stat().st_mode & 0o777 == 0o600
    assert pki.signed_by(p / "store-client.crt", p / "ca.crt")
    ca, master, token = (p / "ca.crt").read_bytes(), (p / "master0-https.crt").read_bytes(), (tmp_path / "admin.token").read_text()
    again = bundle.make(tmp_path, "prod", {"machine1": "10.9.0.6"})  # a machine added
    assert again == {**made, "machine1": "10.9.0.6"}
    assert (p / "ca.crt").read_bytes() == ca and (p / "master0-https.crt").read_bytes() == master
    assert (tmp_path / "admin.token").read_text() == token
    assert pki.signed_by(p / "machine1-https.crt", p / "ca.crt") and "10.9.0.6" in sans(p / "machine1-https.crt")
    assert json.loads((tmp_path / "hosts.json").read_text())["hosts"]["machine1"] == "10.9.0.6"
    with pytest.raises(ValueError, match="holds cell 'prod', not 'test'"):
        bundle.make(tmp_path, "test", {})
