"""The cell's certificate authority: a CA kept in the state dir, and the certificates it issues to the cell's processes.

A cell's store (etcd) accepts only clients that present a certificate signed by the cell's
CA (docs/security.md, "The store"); the same CA can sign the API's and the borglets'
certificates. Files, all in one directory (`<state dir>/pki`, mode 0700):

- `ca.crt`, `ca.key`: the CA. `cell up` makes one for a new cell; resume and `cell restart`
  keep it; `cell up --fresh` replaces it, so no certificate of the old cell is accepted.
- `<name>.crt`, `<name>.key`: a certificate and its key, issued by `ensure_issued`, which
  reuses one still signed by the current CA, for the same names, and valid a while longer.

Expiry (`minborg cell certs`): `inventory` lists every certificate of the directory, its
expiry and whether the CA signed it; `renew` issues again, from the same CA, for the same names
and uses, each one that expires within RENEW_BEFORE or is not the CA's (or every one), with a
new key. Resume and `cell restart` renew before starting a process. The CA is never replaced
by either: one within RENEW_BEFORE of its end is reported; `cell up --fresh` makes a new one.

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
from dataclasses import dataclass, field
from pathlib import Path

from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

CA_NAME = "ca"
CA_DAYS = 3650
LEAF_DAYS = 365
# A certificate that expires within this long is issued again when a process (re)starts, by
# `cell certs renew`, and reported by `cell certs` (the CA too, which is reported, never renewed).
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


def create_ca(pki_dir: str | os.PathLike[str], cell: str = "local", *, days: int = CA_DAYS) -> CertPair:
    """A new CA in `pki_dir`, valid `days`, replacing any CA there: the certificates it signed
    are refused from now on (`ensure_issued` issues them again)."""
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
        .not_valid_after(now + datetime.timedelta(days=days))
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
    """The CA in `pki_dir`, made if there is none (or it cannot be read). One that expires soon
    is kept: a new CA would make every certificate of the cell refused at once, so it is only
    reported (`inventory`), and replaced by `cell up --fresh` alone."""
    target = ca_pair(pki_dir)
    try:
        load_cert(target.cert)
        _load_key(target.key)
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


@dataclass(frozen=True)
class CertState:
    """One certificate of a CA's directory, as `inventory` read it at `now`."""

    name: str  # the file's name without .crt: `ca`, `master0-https`, `etcd0-server`, `store-client`
    path: Path
    subject: str  # its common name ("" when unreadable)
    hosts: tuple[str, ...]  # its subject alternative names
    not_after: datetime.datetime | None  # None: the file cannot be read
    days_left: int | None  # whole days to not_after (negative once expired)
    is_ca: bool
    signed_by_ca: bool  # by the directory's CA (the CA: by itself)
    problem: str | None  # None when good: "expires in 12 days", "expired", "not signed by the cell's CA"...

    def to_json(self) -> dict[str, object]:
        return {
            "name": self.name, "file": str(self.path), "subject": self.subject, "hosts": list(self.hosts),
            "not_after": self.not_after.isoformat() if self.not_after else None, "days_left": self.days_left,
            "ca": self.is_ca, "signed_by_ca": self.signed_by_ca, "problem": self.problem,
        }  # fmt: skip


@dataclass
class Renewal:
    """What `renew` did: the certificates issued again, those kept, those it could not renew
    (name and why), and the CA as it is (never renewed)."""

    ca: CertState
    renewed: list[str] = field(default_factory=list)
    kept: list[str] = field(default_factory=list)
    skipped: list[tuple[str, str]] = field(default_factory=list)


def inventory(pki_dir: str | os.PathLike[str], *, now: datetime.datetime | None = None) -> list[CertState]:
    """Every certificate of `pki_dir`, the CA first, then by name: its names, its end, and
    whether the CA signed it, judged at `now` (default: this host's clock). No CA: PKIError."""
    directory = Path(pki_dir)
    at = now or _now()
    ca_file = ca_pair(directory).cert
    ca_cert = load_cert(ca_file)
    states = [_state(ca_file, None, at)]
    for path in sorted(directory.glob("*.crt")):
        if path.name != ca_file.name and not path.name.startswith("."):
            states.append(_state(path, ca_cert, at))
    return states


def ca_problem(pki_dir: str | os.PathLike[str], *, now: datetime.datetime | None = None) -> str | None:
    """Why the CA of `pki_dir` needs a person (it expires within RENEW_BEFORE, or has expired),
    with what to do; None when it is good or there is none."""
    try:
        state = _state(ca_pair(pki_dir).cert, None, now or _now())
    except PKIError:
        return None
    if state.problem is None or state.not_after is None:
        return state.problem
    return (f"the cell's CA {state.path} {state.problem} ({state.not_after:%Y-%m-%d %H:%M} UTC); "
            "it is never replaced on its own: `minborg cell up --fresh` starts a new cell with a new CA")  # fmt: skip


def renew(
    pki_dir: str | os.PathLike[str],
    *,
    everything: bool = False,
    now: datetime.datetime | None = None,
    days: int = LEAF_DAYS,
) -> Renewal:
    """Issue again, from the CA of `pki_dir`, each certificate that expires within RENEW_BEFORE
    of `now` or is not signed by that CA (or, `everything`, each one): the same name, names and
    addresses, server/client uses, `days` long, with a new key. The CA is never renewed. A file
    that cannot be read is skipped (its names are unknown): the process it serves issues it
    again when it starts, and so is one that already ends with the CA (none may outlive it:
    renewing gains nothing). No CA: PKIError."""
    at = now or _now()
    states = inventory(pki_dir, now=at)
    result = Renewal(ca=states[0])
    for state in states[1:]:
        if state.not_after is None:
            result.skipped.append((state.name, state.problem or "cannot be read"))
            continue
        if not (everything or state.problem):
            result.kept.append(state.name)
            continue
        if not everything and state.signed_by_ca and _ends_with_ca(state, result.ca):
            result.skipped.append((state.name, f"{state.problem}, with the CA: a new CA alone gives it longer (`cell up --fresh`)"))
            continue
        cert = load_cert(state.path)
        server, client = _uses(cert)
        issue(pki_dir, state.name, hosts=state.hosts, server=server, client=client, days=days)
        result.renewed.append(state.name)
    return result


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


def _state(path: Path, ca_cert: x509.Certificate | None, now: datetime.datetime) -> CertState:
    """`path` read at `now`; `ca_cert` None: path is the CA itself."""
    is_ca = ca_cert is None
    try:
        cert = load_cert(path)
    except PKIError as err:
        if is_ca:
            raise
        return CertState(path.stem, path, "", (), None, None, False, False, f"cannot be read: {err}")
    issuer = cert if ca_cert is None else ca_cert
    try:
        cert.verify_directly_issued_by(issuer)
        signed = True
    except (ValueError, TypeError, InvalidSignature):
        signed = False
    left = cert.not_valid_after_utc - now
    days_left = left // datetime.timedelta(days=1)
    problem = None
    if left <= datetime.timedelta(0):
        problem = "expired"
    elif left <= RENEW_BEFORE:
        problem = f"expires in {days_left} day(s)" if days_left else "expires within a day"
    if not signed:
        problem = "not self-signed" if is_ca else "not signed by the cell's CA"
    common = cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)
    return CertState(
        name=path.stem, path=path, subject=str(common[0].value) if common else cert.subject.rfc4514_string(),
        hosts=tuple(_hosts_of(cert)), not_after=cert.not_valid_after_utc, days_left=days_left, is_ca=is_ca,
        signed_by_ca=signed, problem=problem,
    )  # fmt: skip


def _ends_with_ca(state: CertState, ca: CertState) -> bool:
    """Whether `state` ends when the CA does (`issue` never goes past the CA's end)."""
    return state.not_after is not None and ca.not_after is not None and state.not_after >= ca.not_after


def _hosts_of(cert: x509.Certificate) -> list[str]:
    try:
        names = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        return []
    return [str(n.value) for n in names if isinstance(n, (x509.IPAddress, x509.DNSName))]


def _uses(cert: x509.Certificate) -> tuple[bool, bool]:
    """(server, client): what the certificate may do, as `issue` takes it (a client's alone
    when it says nothing)."""
    try:
        usages = set(cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value)
    except x509.ExtensionNotFound:
        return False, True
    server, client = ExtendedKeyUsageOID.SERVER_AUTH in usages, ExtendedKeyUsageOID.CLIENT_AUTH in usages
    return server, client or not server


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
