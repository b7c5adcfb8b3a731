"""The certificates a TLS cell's masters and borglets serve with: names, chain to the cell's CA, expiry, reuse; and the flags that hand them to a process."""

from __future__ import annotations

import argparse
import datetime
import ipaddress
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.x509.oid import ExtendedKeyUsageOID

from reference import channel, pki
from reference.launcher import tls as cell_tls


@pytest.fixture
def cell(tmp_path: Path) -> Path:
    pki.create_ca(tmp_path / cell_tls.PKI_DIR, "t")
    return tmp_path


def sans(path: str) -> tuple[set[str], set[str]]:
    names = pki.load_cert(path).extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    return (
        {str(a) for a in names.get_values_for_type(x509.IPAddress)},
        set(names.get_values_for_type(x509.DNSName)),
    )


def test_a_server_certificate_names_its_own_address_and_the_loopback_names(cell: Path) -> None:
    made = cell_tls.server_certificate(cell, "machine3", ["10.77.0.5"])
    ips, dns = sans(made.cert_file)
    assert ips == {"10.77.0.5", "127.0.0.1"}
    assert dns == {"localhost"}
    assert Path(made.cert_file).name == "machine3-https.crt"


def test_a_name_that_is_not_an_address_is_a_dns_name(cell: Path) -> None:
    ips, dns = sans(cell_tls.server_certificate(cell, "master0", ["master0.cell.example", "127.0.0.1"]).cert_file)
    assert ips == {"127.0.0.1"}  # once, though given twice
    assert dns == {"master0.cell.example", "localhost"}


def test_it_is_signed_by_the_cells_ca_for_serving_and_no_ca_itself(cell: Path) -> None:
    made = cell_tls.server_certificate(cell, "master0", ["127.0.0.1"])
    assert pki.signed_by(made.cert_file, cell_tls.ca_file(cell))
    cert = pki.load_cert(made.cert_file)
    assert ExtendedKeyUsageOID.SERVER_AUTH in cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    assert cert.extensions.get_extension_for_class(x509.BasicConstraints).value.ca is False
    other = pki.create_ca(cell / "other", "other")
    assert not pki.signed_by(made.cert_file, other.cert)


def test_it_expires_within_the_leaf_lifetime_and_never_after_its_ca(cell: Path) -> None:
    cert = pki.load_cert(cell_tls.server_certificate(cell, "master0", ["127.0.0.1"]).cert_file)
    now = datetime.datetime.now(datetime.UTC)
    assert cert.not_valid_before_utc <= now
    life = cert.not_valid_after_utc - now
    assert datetime.timedelta(days=pki.LEAF_DAYS - 1) < life <= datetime.timedelta(days=pki.LEAF_DAYS)
    assert cert.not_valid_after_utc <= pki.load_cert(cell_tls.ca_file(cell)).not_valid_after_utc


def test_the_same_names_reuse_the_certificate_other_names_or_a_new_ca_issue_another(cell: Path) -> None:
    first = pki.load_cert(cell_tls.server_certificate(cell, "machine0", ["127.0.0.1"]).cert_file)
    again = pki.load_cert(cell_tls.server_certificate(cell, "machine0", ["127.0.0.1"]).cert_file)
    assert again.serial_number == first.serial_number
    moved = cell_tls.server_certificate(cell, "machine0", ["10.77.0.9"])
    assert pki.load_cert(moved.cert_file).serial_number != first.serial_number
    assert "10.77.0.9" in sans(moved.cert_file)[0]
    pki.create_ca(cell / cell_tls.PKI_DIR, "t")  # cell up --fresh: a new CA
    fresh = cell_tls.server_certificate(cell, "machine0", ["10.77.0.9"])
    assert pki.signed_by(fresh.cert_file, cell_tls.ca_file(cell))


def test_a_certificate_about_to_expire_is_issued_again(cell: Path) -> None:
    short = pki.issue(cell / cell_tls.PKI_DIR, "master0-https", hosts=cell_tls.names_for(["127.0.0.1"]), server=True, days=10)
    old = pki.load_cert(short.cert)
    renewed = pki.load_cert(cell_tls.server_certificate(cell, "master0", ["127.0.0.1"]).cert_file)
    assert renewed.serial_number != old.serial_number
    assert renewed.not_valid_after_utc - old.not_valid_after_utc > datetime.timedelta(days=300)


def test_a_masters_flags_follow_its_url(cell: Path) -> None:
    assert cell_tls.master_args(cell, "master0", "http://127.0.0.1:7000") == []
    args = cell_tls.master_args(cell, "master0", "https://10.77.0.3:7000")
    flags = dict(zip(args[::2], args[1::2], strict=True))
    assert set(flags) == {"--tls-cert-file", "--tls-key-file", "--tls-ca-file"}
    assert flags["--tls-ca-file"] == str(cell_tls.ca_file(cell))
    assert "10.77.0.3" in sans(flags["--tls-cert-file"])[0]


def test_netns_hosts_always_take_tls() -> None:
    assert cell_tls.wanted(False, "netns") and cell_tls.wanted(True, "loopback")
    assert not cell_tls.wanted(False, "loopback")


def parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    channel.add_tls_arguments(parser)
    return parser.parse_args(argv)


def test_the_server_flags_go_together_and_must_match(cell: Path) -> None:
    made = cell_tls.server_certificate(cell, "master0", ["127.0.0.1"])
    other = cell_tls.server_certificate(cell, "master1", ["127.0.0.1"])
    assert channel.tls_from_arguments(parse()) is None
    assert channel.tls_from_arguments(parse("--tls-cert-file", made.cert_file, "--tls-key-file", made.key_file)) == made
    with pytest.raises(ValueError, match="go together"):
        channel.tls_from_arguments(parse("--tls-cert-file", made.cert_file))
    with pytest.raises(ValueError, match="cannot read"):
        channel.tls_from_arguments(parse("--tls-cert-file", made.cert_file, "--tls-key-file", str(cell / "none.key")))
    with pytest.raises(ValueError, match="--tls-cert-file"):  # another certificate's key
        channel.tls_from_arguments(parse("--tls-cert-file", made.cert_file, "--tls-key-file", other.key_file))


def test_a_ca_file_becomes_the_processs_trust(cell: Path) -> None:
    try:
        channel.tls_from_arguments(parse("--tls-ca-file", str(cell_tls.ca_file(cell))))
        trusted = channel.peer_verify()
        assert not isinstance(trusted, bool)
        ca_name = pki.load_cert(cell_tls.ca_file(cell)).subject.get_attributes_for_oid(x509.NameOID.COMMON_NAME)[0].value
        assert [dict(x[0] for x in c["subject"])["commonName"] for c in trusted.get_ca_certs()] == [ca_name]
        with pytest.raises(ValueError, match="--tls-ca-file"):
            channel.tls_from_arguments(parse("--tls-ca-file", str(cell / "missing.crt")))
    finally:
        channel.trust_ca(None)
    assert channel.peer_verify() is True


def test_ip_sans_are_addresses_not_names(cell: Path) -> None:
    cert = pki.load_cert(cell_tls.server_certificate(cell, "m", ["::1"]).cert_file)
    names = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert ipaddress.ip_address("::1") in names.get_values_for_type(x509.IPAddress)


def test_tls_with_toxiproxy_is_refused_before_anything_is_made(tmp_path: Path) -> None:
    from reference import launcher

    with pytest.raises(launcher.LauncherError, match="--tls cannot be combined with --toxiproxy"):
        launcher.up(tmp_path / "cell", tls=True, toxiproxy=True)
    assert not (tmp_path / "cell").exists()
