"""Renewal on a real cell (TLS on loopback, 1 replica, 1 machine): `cell certs renew --all` on the stopped cell issues every certificate again from its CA, `cell up` resumes it, and the API then answers over HTTPS with the new certificate (another serial, the same CA), the command line still finding that CA in the state dir with no flag; a borglet's certificate near its end is renewed by `cell up` itself."""

from __future__ import annotations

import os
import socket
import ssl
import subprocess
import sys
from pathlib import Path
from urllib.parse import urlsplit

import httpx
import pytest
from cryptography import x509

from reference import launcher, pki
from reference.launcher import tls as cell_tls
from tests.integration.cellkit import REPO

pytestmark = pytest.mark.integration


def served_serial(url: str, ca: Path) -> int:
    """The serial of the certificate the server at `url` presents, verified with `ca`."""
    parts = urlsplit(url)
    context = ssl.create_default_context(cafile=str(ca))
    with socket.create_connection((parts.hostname, parts.port), timeout=5.0) as sock:
        with context.wrap_socket(sock, server_hostname=parts.hostname) as tls:
            der = tls.getpeercert(binary_form=True)
    assert der is not None
    return x509.load_der_x509_certificate(der).serial_number


def minborg(state_dir: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """The command line on the cell's state dir (from the environment), no CA named."""
    clean = {k: v for k, v in os.environ.items() if not k.startswith("MINBORG_")}
    return subprocess.run(
        [sys.executable, "-m", "reference.cli", *args],
        env={**clean, "MINBORG_STATE_DIR": str(state_dir), "NO_COLOR": "1", "COLUMNS": "200"},
        cwd=REPO, capture_output=True, text=True, timeout=120,
    )  # fmt: skip


def test_renew_all_on_a_stopped_cell_then_resume_serves_the_new_certificates(tmp_path: Path) -> None:
    state_dir = tmp_path / "cell"
    info = launcher.up(state_dir, replicas=1, machines=1, tls=True, machine_shares=None)
    try:
        ca = cell_tls.ca_file(state_dir)
        ca_pem = ca.read_bytes()
        master = info.master_urls[0]
        assert master.startswith("https://")
        cert_file = Path(state_dir) / cell_tls.PKI_DIR / f"master0{cell_tls.CERT_SUFFIX}.crt"
        before = served_serial(master, ca)
        assert before == pki.load_cert(cert_file).serial_number

        launcher.down(state_dir)
        renewed = minborg(state_dir, "cell", "certs", "renew", "--all")
        assert renewed.returncode == 0, renewed.stdout + renewed.stderr
        assert "master0-https" in renewed.stdout and "store-client" in renewed.stdout
        assert "cell is running" not in renewed.stdout
        on_disk = pki.load_cert(cert_file).serial_number
        assert on_disk != before and ca.read_bytes() == ca_pem

        up = minborg(state_dir, "cell", "up")
        assert up.returncode == 0, up.stdout + up.stderr
        assert "again on its data" in up.stdout
        info = launcher.CellInfo.load(state_dir)
        master = info.master_urls[0]
        assert served_serial(master, ca) == on_disk != before  # the new certificate, the same CA
        assert ca.read_bytes() == ca_pem
        assert httpx.get(f"{master}/healthz", verify=cell_tls.client_verify(state_dir), timeout=5.0).status_code == 200

        listed = minborg(state_dir, "job", "list")
        assert listed.returncode == 0, listed.stdout + listed.stderr
        checked = minborg(state_dir, "cell", "certs")
        assert checked.returncode == 0, checked.stdout + checked.stderr
        assert "master0-https" in checked.stdout

        # A borglet's certificate 10 days from its end: `cell certs` exits 1, resume renews it.
        launcher.down(state_dir)
        machine = next(iter(info.borglet_urls))
        short = pki.issue(Path(state_dir) / cell_tls.PKI_DIR, f"{machine}{cell_tls.CERT_SUFFIX}",
                          hosts=cell_tls.names_for(["127.0.0.1"]), server=True, days=10)  # fmt: skip
        near = pki.load_cert(short.cert).serial_number
        assert minborg(state_dir, "cell", "certs").returncode == 1
        up = minborg(state_dir, "cell", "up")
        assert up.returncode == 0, up.stdout + up.stderr
        assert f"certificates: renewed {machine}{cell_tls.CERT_SUFFIX}" in up.stdout + up.stderr
        info = launcher.CellInfo.load(state_dir)
        assert served_serial(info.borglet_urls[machine], ca) == pki.load_cert(short.cert).serial_number != near
        assert minborg(state_dir, "cell", "certs").returncode == 0
    finally:
        launcher.down(state_dir)
