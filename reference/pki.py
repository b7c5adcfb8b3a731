"""The cell's certificate authority: a CA kept in the state dir, and the certificates it issues to the cell's processes.

A cell's store (etcd) accepts only clients that present a certificate signed by the cell's
CA (docs/security.md, "The store"); the same CA can sign the API's and the borglets'
certificates. Files, all in one directory (`<state dir>/pki`, mode 0700):

- `ca.crt`, `ca.key`: the CA. `cell up` makes one for a new cell; resume and `cell restart`
  keep it; `cell up --fresh` replaces it, so no certificate of the old cell is accepted.
- `<name>.crt`, `<name>.key`: a certificate and its key, issued by `ensure_issued`, which
  reuses one still signed by the current CA, for the same names, and valid a while longer.

Private keys are written mode 0600 from their first byte (never readable by another user,
not even for an instant). Keys are ECDSA P-256: a key costs about a millisecond, where
RSA-2048 costs tens, and Go's TLS (etcd) takes both.
"""

from __future__ import annotations

import datetime
import ipaddress
import os
import secrets
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

CA_NAME = "ca"
CA_DAYS = 3650
LEAF_DAYS = 365
# A certificate that expires within this long is issued again when a process (re)starts.
RENEW_BEFORE = datetime.timedelta(days=30)
# A clock a little behind the CA's host still accepts a certificate issued just now.
BACKDATE = datetime.timedelta(minutes=5)


class PKIError(RuntimeError):
    """The CA or a certificate could not be read or written as asked."""


@dataclass(frozen=True)
class CertPair:
    """A certificate and its private key, as PEM files."""

    cert: Path
    key: Path


def ca_pair(pki_dir: str | os.PathLike[str]) -> CertPair:
    return pair(pki_dir, CA_NAME)


def pair(pki_dir: str | os.PathLike[str], name: str) -> CertPair:
    """Where certificate `name` of the CA in `pki_dir` lives (it may not exist yet)."""
    base = Path(pki_dir)
    return CertPair(base / f"{name}.crt", base / f"{name}.key")


def create_ca(pki_dir: str | os.PathLike[str], cell: str = "local") -> CertPair:
    """A new CA in `pki_dir`, replacing any CA there: the certificates it signed are refused
    from now on (`ensure_issued` issues them again)."""
    directory = _private_dir(pki_dir)
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name(
        [
            x509.NameAttribute(NameOID.ORGANIZATION_NAME, "minborg"),
            x509.NameAttribute(NameOID.COMMON_NAME, f"minborg cell {cell} CA {secrets.token_hex(4)}"),
        ]
    )
    now = _now()
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - BACKDATE)
        .not_valid_after(now + datetime.timedelta(days=CA_DAYS))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True, content_commitment=False, key_encipherment=False,
                data_encipherment=False, key_agreement=False, key_cert_sign=True, crl_sign=True,
                encipher_only=False, decipher_only=False,
            ),
            critical=True,
        )  # fmt: skip
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(key, hashes.SHA256())
    )
    target = ca_pair(directory)
    _write(target, cert, key)
    return target


def ensure_ca(pki_dir: str | os.PathLike[str], cell: str = "local") -> CertPair:
    """The CA in `pki_dir`, made if there is none (or it is unreadable or expires soon)."""
    target = ca_pair(pki_dir)
    try:
        cert = load_cert(target.cert)
        _load_key(target.key)
        if cert.not_valid_after_utc - _now() > RENEW_BEFORE:
            return target
    except PKIError:
        pass
    return create_ca(pki_dir, cell)


def issue(
    pki_dir: str | os.PathLike[str],
    name: str,
    *,
    hosts: Sequence[str] = (),
    server: bool = False,
    client: bool = True,
    days: int = LEAF_DAYS,
) -> CertPair:
    """Sign a new certificate `name` with the CA in `pki_dir` (which must exist).

    `hosts`: the names and IP addresses it is valid for (subject alternative names);
    `server`/`client`: whether it may serve TLS and whether it may authenticate a client."""
    if not (server or client):
        raise ValueError("a certificate must be for a server, a client or both")
    ca = ca_pair(pki_dir)
    ca_cert, ca_key = load_cert(ca.cert), _load_key(ca.key)
    key = ec.generate_private_key(ec.SECP256R1())
    now = _now()
    usages = ([ExtendedKeyUsageOID.SERVER_AUTH] if server else []) + (
        [ExtendedKeyUsageOID.CLIENT_AUTH] if client else []
    )
    builder = (
        x509.CertificateBuilder()
        .subject_name(
            x509.Name(
                [
                    x509.NameAttribute(NameOID.ORGANIZATION_NAME, "minborg"),
                    x509.NameAttribute(NameOID.COMMON_NAME, name),
                ]
            )
        )
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - BACKDATE)
        .not_valid_after(min(now + datetime.timedelta(days=days), ca_cert.not_valid_after_utc))
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True, content_commitment=False, key_encipherment=False,
                data_encipherment=False, key_agreement=False, key_cert_sign=False, crl_sign=False,
                encipher_only=False, decipher_only=False,
            ),
            critical=True,
        )  # fmt: skip
        .add_extension(x509.ExtendedKeyUsage(usages), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_cert.public_key()),  # type: ignore[arg-type]
            critical=False,
        )
    )
    if hosts:
        builder = builder.add_extension(x509.SubjectAlternativeName(_names(hosts)), critical=False)
    cert = builder.sign(ca_key, hashes.SHA256())
    target = pair(pki_dir, name)
    _write(target, cert, key)
    return target


def ensure_issued(
    pki_dir: str | os.PathLike[str],
    name: str,
    *,
    hosts: Sequence[str] = (),
    server: bool = False,
    client: bool = True,
) -> CertPair:
    """Certificate `name`, reused when it is signed by the current CA for the same `hosts`
    and valid for more than RENEW_BEFORE, else issued again."""
    target = pair(pki_dir, name)
    try:
        cert = load_cert(target.cert)
        _load_key(target.key)
        if _still_good(cert, load_cert(ca_pair(pki_dir).cert), hosts):
            return target
    except PKIError:
        pass
    return issue(pki_dir, name, hosts=hosts, server=server, client=client)


def signed_by(cert_file: str | os.PathLike[str], ca_file: str | os.PathLike[str]) -> bool:
    """Whether the certificate in `cert_file` was signed by the CA in `ca_file`."""
    try:
        load_cert(cert_file).verify_directly_issued_by(load_cert(ca_file))
    except (ValueError, TypeError, InvalidSignature):
        return False
    return True


def load_cert(path: str | os.PathLike[str]) -> x509.Certificate:
    try:
        return x509.load_pem_x509_certificate(Path(path).read_bytes())
    except (OSError, ValueError) as err:
        raise PKIError(f"cannot read certificate {path}: {err}") from None


def _load_key(path: str | os.PathLike[str]) -> ec.EllipticCurvePrivateKey:
    try:
        key = serialization.load_pem_private_key(Path(path).read_bytes(), password=None)
    except (OSError, ValueError, TypeError) as err:
        raise PKIError(f"cannot read private key {path}: {err}") from None
    if not isinstance(key, ec.EllipticCurvePrivateKey):
        raise PKIError(f"{path} is not an EC private key")
    return key


def _still_good(cert: x509.Certificate, ca_cert: x509.Certificate, hosts: Sequence[str]) -> bool:
    try:
        cert.verify_directly_issued_by(ca_cert)
    except (ValueError, TypeError, InvalidSignature):
        return False
    if cert.not_valid_after_utc - _now() <= RENEW_BEFORE:
        return False
    try:
        names = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
        present = set(names)
    except x509.ExtensionNotFound:
        present = set()
    return present == set(_names(hosts))


def _names(hosts: Sequence[str]) -> list[x509.GeneralName]:
    result: list[x509.GeneralName] = []
    for host in dict.fromkeys(hosts):  # in order, once each
        try:
            result.append(x509.IPAddress(ipaddress.ip_address(host)))
        except ValueError:
            result.append(x509.DNSName(host))
    return result


def _private_dir(pki_dir: str | os.PathLike[str]) -> Path:
    directory = Path(pki_dir)
    directory.mkdir(mode=0o700, parents=True, exist_ok=True)
    os.chmod(directory, 0o700)
    return directory


def _write(target: CertPair, cert: x509.Certificate, key: ec.EllipticCurvePrivateKey) -> None:
    """Write the key (0600 from its creation) and the certificate, each file replaced in one
    rename: a reader never sees half a file."""
    _private_dir(target.key.parent)
    key_pem = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    _replace(target.key, key_pem, 0o600)
    _replace(target.cert, cert.public_bytes(serialization.Encoding.PEM), 0o644)


def _replace(path: Path, data: bytes, mode: int) -> None:
    tmp = path.with_name(f".{path.name}.{secrets.token_hex(4)}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.chmod(tmp, mode)  # the umask may have taken bits off a certificate's 0644
        tmp.replace(path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def _now() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)
