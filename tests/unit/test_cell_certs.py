"""`minborg cell certs` and renewal (reference/pki.py, reference/cli/certs.py): every certificate of a cell's CA listed with its end, the exit code when one nears it or is not the CA's, renewal for the same names from the same CA, and a CA that is reported, never replaced.

Certificates are made with short lifetimes (`days`) and judged at an injected `now`: nothing waits.
"""

from __future__ import annotations

import datetime
import json
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.x509.oid import ExtendedKeyUsageOID
from typer.testing import CliRunner

from reference import pki
from reference.cli.app import app
from reference.launcher import tls as cell_tls

NOW = datetime.datetime.now(datetime.UTC)


@pytest.fixture
def cell(tmp_path: Path) -> Path:
    """A state dir whose CA has signed a master's and a borglet's https certificates, etcd0's
    server certificate and the store's client certificate, each valid a year."""
    d = tmp_path / cell_tls.PKI_DIR
    pki.create_ca(d, "t")
    cell_tls.server_certificate(tmp_path, "master0", ["127.0.0.1"])
    cell_tls.server_certificate(tmp_path, "machine0", ["10.77.0.5"])
    pki.issue(d, "etcd0-server", hosts=["127.0.0.1", "localhost"], server=True, client=True)
    pki.issue(d, "store-client", client=True)
    return tmp_path


def pki_dir(cell: Path) -> Path:
    return cell / cell_tls.PKI_DIR


def states(cell: Path, now: datetime.datetime | None = None) -> dict[str, pki.CertState]:
    return {s.name: s for s in pki.inventory(pki_dir(cell), now=now)}


def cli(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(app, ["cell", "certs", *args])
    return result.exit_code, result.output


def test_every_certificate_is_listed_with_its_process_end_and_signer(cell: Path) -> None:
    listed = pki.inventory(pki_dir(cell), now=NOW)
    assert [s.name for s in listed] == ["ca", "etcd0-server", "machine0-https", "master0-https", "store-client"]
    ca, *leaves = listed
    assert ca.is_ca and ca.signed_by_ca and ca.problem is None and pki.CA_DAYS - 2 <= ca.days_left <= pki.CA_DAYS
    for leaf in leaves:
        assert not leaf.is_ca and leaf.signed_by_ca and leaf.problem is None
        assert pki.LEAF_DAYS - 2 <= (leaf.days_left or 0) <= pki.LEAF_DAYS
    assert states(cell)["machine0-https"].hosts == ("10.77.0.5", "127.0.0.1", "localhost")

    code, out = cli("--state-dir", str(cell))
    assert code == 0
    rows = {line.split()[0]: line.split() for line in out.splitlines()[2:]}
    assert rows["machine0-https"][1] == "machine0" and rows["etcd0-server"][1] == "etcd0"
    assert rows["master0-https"][-2:] == ["yes", "ok"] and rows["ca"][-2:] == ["self", "ok"]
    code, out = cli("list", "--state-dir", str(cell), "--json")
    assert cli("--state-dir", str(cell), "--json", "list") == (code, out)  # the options before it count too
    answer = json.loads(out)
    assert code == 0 and answer["problems"] == 0 and answer["renew_before_days"] == pki.RENEW_BEFORE.days
    assert [c["process"] for c in answer["certificates"]][1:3] == ["etcd0", "machine0"]


def test_the_exit_code_says_when_one_expires_within_the_renewal_window(cell: Path) -> None:
    # A year on, by the injected clock, every leaf is within RENEW_BEFORE; the CA is not.
    later = states(cell, now=NOW + datetime.timedelta(days=pki.LEAF_DAYS - 10))
    assert all(s.problem and s.problem.startswith("expires in") for n, s in later.items() if n != "ca")
    assert later["ca"].problem is None
    assert states(cell, now=NOW + datetime.timedelta(days=pki.LEAF_DAYS + 1))["store-client"].problem == "expired"

    pki.issue(pki_dir(cell), "machine0-https", hosts=cell_tls.names_for(["10.77.0.5"]), server=True, days=10)
    code, out = cli("--state-dir", str(cell))
    assert code == 1
    assert "machine0-https: expires in 9 day(s)" in out and "cell certs renew" in out
    code, out = cli("list", "--json", "--state-dir", str(cell))
    assert code == 1 and json.loads(out)["problems"] == 1


def test_renewal_reissues_a_near_expiry_server_certificate_for_the_same_names_from_the_same_ca(cell: Path) -> None:
    d = pki_dir(cell)
    short = pki.issue(d, "machine0-https", hosts=cell_tls.names_for(["10.77.0.5"]), server=True, client=False, days=10)
    old, old_key = pki.load_cert(short.cert), short.key.read_bytes()
    far = {n: pki.pair(d, n).cert.read_bytes() for n in ("master0-https", "etcd0-server", "store-client")}
    ca = pki.ca_pair(d).cert.read_bytes()

    done = pki.renew(d)

    assert done.renewed == ["machine0-https"] and sorted(done.kept) == sorted(far) and not done.skipped
    new = pki.load_cert(short.cert)
    assert new.serial_number != old.serial_number and short.key.read_bytes() != old_key  # a new key
    assert new.not_valid_after_utc - NOW > datetime.timedelta(days=pki.LEAF_DAYS - 1)
    sans = new.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert sans == old.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert new.subject == old.subject and new.issuer == old.issuer
    assert list(new.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value) == [ExtendedKeyUsageOID.SERVER_AUTH]
    assert pki.signed_by(short.cert, pki.ca_pair(d).cert)
    assert {n: pki.pair(d, n).cert.read_bytes() for n in far} == far  # far from their end: untouched
    assert pki.ca_pair(d).cert.read_bytes() == ca
    # A process started with those files finds them good: ensure_issued reuses them.
    assert cell_tls.server_certificate(cell, "machine0", ["10.77.0.5"]).cert_file == str(short.cert)
    assert pki.load_cert(short.cert).serial_number == new.serial_number


def test_renew_all_and_the_cli(cell: Path) -> None:
    d = pki_dir(cell)
    before = {s.name: pki.load_cert(s.path).serial_number for s in pki.inventory(d)}
    code, out = cli("renew", "--state-dir", str(cell))
    assert code == 0 and "none renewed" in out
    assert {s.name: pki.load_cert(s.path).serial_number for s in pki.inventory(d)} == before
    code, out = cli("renew", "--all", "--json", "--state-dir", str(cell))
    answer = json.loads(out)
    assert code == 0 and sorted(answer["renewed"]) == sorted(n for n in before if n != "ca")
    assert answer["running"] is False and answer["ca_problem"] is None
    after = {s.name: pki.load_cert(s.path).serial_number for s in pki.inventory(d)}
    assert after["ca"] == before["ca"]
    assert all(after[n] != before[n] for n in before if n != "ca")
    assert cli("--state-dir", str(cell))[0] == 0


def test_a_clock_later_renews_what_would_then_be_near_its_end(cell: Path) -> None:
    d = pki_dir(cell)
    done = pki.renew(d, now=NOW + datetime.timedelta(days=pki.LEAF_DAYS - pki.RENEW_BEFORE.days + 1))
    assert sorted(done.renewed) == ["etcd0-server", "machine0-https", "master0-https", "store-client"]
    assert pki.renew(d, now=NOW + datetime.timedelta(days=100)).renewed == []


def test_the_ca_is_never_replaced_only_reported(tmp_path: Path) -> None:
    d = tmp_path / cell_tls.PKI_DIR
    ca = pki.create_ca(d, "t", days=20)  # within RENEW_BEFORE of its end
    pem = ca.cert.read_bytes()
    pki.issue(d, "master0-https", hosts=cell_tls.names_for(["127.0.0.1"]), server=True)

    assert pki.ensure_ca(d, "t").cert.read_bytes() == pem  # resume, etcd's start: kept
    leaf = pki.pair(d, "master0-https").cert.read_bytes()
    done = pki.renew(d)  # the leaf ends with the CA: renewing it would gain nothing
    assert done.renewed == [] and [n for n, _ in done.skipped] == ["master0-https"] and "--fresh" in done.skipped[0][1]
    assert pki.pair(d, "master0-https").cert.read_bytes() == leaf
    done = pki.renew(d, everything=True)
    assert done.ca.is_ca and done.ca.problem and done.ca.problem.startswith("expires in")
    assert ca.cert.read_bytes() == pem
    assert pki.signed_by(pki.pair(d, "master0-https").cert, ca.cert)
    problem = pki.ca_problem(d)
    assert problem is not None and "--fresh" in problem
    said: list[str] = []
    cell_tls.renew_before_start(tmp_path, said.append)
    assert ca.cert.read_bytes() == pem and any("--fresh" in line for line in said)

    code, out = cli("--state-dir", str(tmp_path))
    assert code == 1 and "never renewed in place" in out and "ends with the CA" in out
    code, out = cli("renew", "--state-dir", str(tmp_path))
    assert "warning: the cell's CA" in out and ca.cert.read_bytes() == pem


def test_a_certificate_of_another_ca_is_reported_and_renewal_issues_it_from_the_cells(cell: Path) -> None:
    stranger = pki.create_ca(cell / "stranger", "stranger")
    made = pki.issue(cell / "stranger", "master0-https", hosts=cell_tls.names_for(["127.0.0.1"]), server=True)
    pki_dir(cell).joinpath("master0-https.crt").write_bytes(made.cert.read_bytes())
    pki_dir(cell).joinpath("master0-https.key").write_bytes(made.key.read_bytes())

    listed = states(cell)
    assert not listed["master0-https"].signed_by_ca
    assert listed["master0-https"].problem == "not signed by the cell's CA"
    assert all(s.signed_by_ca for n, s in listed.items() if n != "master0-https")
    code, out = cli("--state-dir", str(cell))
    assert code == 1 and "not signed by the cell's CA" in out
    assert json.loads(cli("--json", "--state-dir", str(cell))[1])["certificates"][3]["signed_by_ca"] is False

    said: list[str] = []
    assert cell_tls.renew_before_start(cell, said.append) == ["master0-https"]  # what resume does
    assert pki.signed_by(pki_dir(cell) / "master0-https.crt", cell_tls.ca_file(cell))
    assert not pki.signed_by(pki_dir(cell) / "master0-https.crt", stranger.cert)
    assert states(cell)["master0-https"].hosts == ("127.0.0.1", "localhost")
    assert cli("--state-dir", str(cell))[0] == 0


def test_an_unreadable_certificate_is_reported_and_skipped(cell: Path) -> None:
    pki_dir(cell).joinpath("machine0-https.crt").write_text("not a certificate")
    listed = states(cell)
    assert listed["machine0-https"].problem and listed["machine0-https"].problem.startswith("cannot be read")
    done = pki.renew(pki_dir(cell), everything=True)
    assert [n for n, _ in done.skipped] == ["machine0-https"] and "machine0-https" not in done.renewed
    assert cli("--state-dir", str(cell))[0] == 1


def test_a_state_dir_without_a_ca_is_told_what_to_do(tmp_path: Path) -> None:
    code, out = cli("--state-dir", str(tmp_path))
    assert code == 1 and "no cell CA" in out and "minborg cell up" in out
    assert cell_tls.renew_before_start(tmp_path, lambda _m: None) == []


def test_renew_on_a_running_cell_says_a_restart_loads_the_files(cell: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from reference.cli import certs as cli_certs

    pki.issue(pki_dir(cell), "machine0-https", hosts=cell_tls.names_for(["10.77.0.5"]), server=True, days=10)
    monkeypatch.setattr(cli_certs, "_running", lambda _state_dir: True)
    code, out = cli("renew", "--state-dir", str(cell))
    assert code == 0 and "machine0-https" in out and "`minborg cell restart` loads the new ones" in out
    assert states(cell)["machine0-https"].problem is None
