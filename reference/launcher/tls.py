"""TLS on a local cell's links: each master's API (and Sigma) and each borglet serve HTTPS only, with a certificate from the cell's CA; the masters, the scheduler processes and the launcher verify them with that CA.

`cell up --tls` asks for it on loopback hosts; a cell on hosts of its own (`--hosts netns`)
always has it (`wanted`). The CA is the one the store already uses (`<state dir>/pki`,
reference/pki.py); each server's certificate is named `<process>-https` there and covers every
address and name the process is reached by: its own address(es), 127.0.0.1 and localhost.

The netns hosts call `server_args(root, process, addresses)` for a server that answers on
addresses of its own; a master's flags come from its URL (`master_args`).

A resumed or restarted process runs its recorded command, with the same certificate files:
`renew_before_start` issues those files again first when they expire within pki.RENEW_BEFORE
(or are not the CA's), and says when the CA itself nears its end (never renewed: `--fresh`).
"""

from __future__ import annotations

import os
import ssl
from collections.abc import Callable, Sequence
from pathlib import Path
from urllib.parse import urlsplit

from reference import channel, pki

PKI_DIR = "pki"  # in the state dir, as roles.PKI_DIR: the cell's CA and its certificates
LOOPBACK_NAMES = ("127.0.0.1", "localhost")  # every server is also reached on its own host by these
CERT_SUFFIX = "-https"  # `<process>-https.crt`: apart from etcd's `<member>-server`/`-peer`


def wanted(tls: bool, hosts: str = "loopback") -> bool:
    """Whether a new cell serves TLS: asked for (`--tls`), or on hosts of its own, whose
    links are real networks (`--hosts netns`): there it is always on."""
    return tls or hosts != "loopback"


def scheme(tls: bool) -> str:
    return "https" if tls else "http"


def ca_file(root: str | os.PathLike[str]) -> Path:
    """The cell's CA certificate in state dir `root`."""
    return pki.ca_pair(Path(root) / PKI_DIR).cert


def names_for(addresses: Sequence[str]) -> list[str]:
    """The subjectAltNames of a server answering on `addresses`: those, then 127.0.0.1 and
    localhost, each once."""
    return list(dict.fromkeys([*(a for a in addresses if a), *LOOPBACK_NAMES]))


def server_certificate(root: str | os.PathLike[str], process: str, addresses: Sequence[str]) -> channel.ServerTLS:
    """The certificate `process` of the cell in state dir `root` serves HTTPS with, for
    `addresses` (and the loopback names): issued by the cell's CA where missing, of another CA
    (`cell up --fresh`), for other names, or expiring soon; else the one on disk."""
    made = pki.ensure_issued(Path(root) / PKI_DIR, f"{process}{CERT_SUFFIX}", hosts=names_for(addresses), server=True)
    return channel.ServerTLS(str(made.cert), str(made.key))


def server_args(root: str | os.PathLike[str], process: str, addresses: Sequence[str]) -> list[str]:
    """`--tls-cert-file`/`--tls-key-file` for `process` (a master or a borglet) answering on
    `addresses`: the flags that make it serve HTTPS only."""
    return server_certificate(root, process, addresses).args()


def ca_args(root: str | os.PathLike[str]) -> list[str]:
    """`--tls-ca-file` of the cell: a master or scheduler process verifies the https borglets
    and replicas it calls with it."""
    return ["--tls-ca-file", str(ca_file(root))]


def master_args(root: str | os.PathLike[str], name: str, url: str) -> list[str]:
    """A master replica's TLS flags, from the URL it is reached at: none for http; for https
    its certificate (for the URL's host) and the cell's CA."""
    parts = urlsplit(url)
    if parts.scheme != "https":
        return []
    return [*server_args(root, name, [parts.hostname or ""]), *ca_args(root)]


def client_verify(root: str | os.PathLike[str]) -> ssl.SSLContext | bool:
    """httpx's `verify` for the launcher's own requests to the cell in state dir `root`:
    its CA when it has one (every cell made since the store took TLS), else True. An http
    URL ignores it."""
    path = ca_file(root)
    return channel.ca_context(path) if path.is_file() else True


def renew_before_start(root: str | os.PathLike[str], say: Callable[[str], None]) -> list[str]:
    """Before a stopped cell in state dir `root` resumes or its processes restart: every
    certificate of its CA that expires within pki.RENEW_BEFORE, or is not signed by the CA,
    issued again for the same names (pki.renew); returns their names. A CA near its end is
    said, not replaced. A cell without a CA (made before the store took TLS) has nothing to renew."""
    directory = Path(root) / PKI_DIR
    if not pki.ca_pair(directory).cert.is_file():
        return []
    try:
        done = pki.renew(directory)
    except (pki.PKIError, OSError) as err:
        say(f"certificates: not renewed: {err}")
        return []
    if done.renewed:
        say(f"certificates: renewed {', '.join(done.renewed)} (the cell's CA, the same names)")
    for name, why in done.skipped:
        say(f"certificates: {name} {why}; left as it is")
    problem = pki.ca_problem(directory)
    if problem:
        say(f"warning: {problem}")
    return done.renewed
