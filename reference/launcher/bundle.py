"""The cell bundle for a cell on hosts of its own (docs/deploy.md): the cell's CA, each process's certificate for its address, the store's client certificate, the channel key and the admin token, made in one directory on the operator's host.

    python3 -m reference.launcher.bundle --dir bundle --cell prod \\
        etcd0=10.210.0.2 master0=10.210.0.3 scheduler0=10.210.0.4 machine0=10.210.0.5

A process is named by its role and a number, as `cell up` names them (etcdN, masterN,
schedulerN, machineN); a master's and a machine's certificate is `NAME-https`, an etcd
member's `NAME-server` and `NAME-peer`, as a local cell's. Run again with more hosts (a machine
added), it keeps what it made (the CA, the key, the token, every certificate still good for its
address) and issues the rest. `bundle/hosts.json` records every host given so far. The files
are those a local cell keeps in its state dir, laid out the same way, so the same flags name
them.
"""

from __future__ import annotations

import argparse
import ipaddress
import json
import re
import sys
from pathlib import Path

from reference import channel, pki
from reference.launcher import tls as cell_tls
from reference.launcher.statedir import ensure_admin_token
from reference.store.etcd_cluster import CLIENT_CERT

HOSTS_FILE = "hosts.json"
ROLES = ("etcd", "master", "scheduler", "machine")
NAME = re.compile(rf"({'|'.join(ROLES)})[0-9]+")


def parse_host(text: str) -> tuple[str, str]:
    """'master0=10.0.0.3' -> ('master0', '10.0.0.3'); ValueError naming what to change."""
    name, sep, address = text.partition("=")
    if not sep or not NAME.fullmatch(name):
        raise ValueError(f"{text!r}: give NAME=ADDRESS, NAME one of {', '.join(r + 'N' for r in ROLES)} (master0=10.0.0.3)")
    try:
        ipaddress.ip_address(address)
    except ValueError:
        raise ValueError(f"{text!r}: {address!r} is not an IP address") from None
    return name, address


def make(directory: Path, cell: str, hosts: dict[str, str]) -> dict[str, str]:
    """Make or complete the bundle in `directory` for `hosts` (name -> address); returns every
    host it now holds."""
    known_file = directory / HOSTS_FILE
    known = json.loads(known_file.read_text()) if known_file.exists() else {}
    if known.get("cell", cell) != cell:
        raise ValueError(f"{directory} holds cell {known['cell']!r}, not {cell!r}")
    every = {**known.get("hosts", {}), **hosts}
    pki_dir = directory / cell_tls.PKI_DIR
    pki.ensure_ca(pki_dir, cell)
    key = directory / channel.KEY_FILE
    if not key.exists():
        channel.create_key_file(key)
    ensure_admin_token(directory)
    pki.ensure_issued(pki_dir, CLIENT_CERT, client=True)
    for name, address in sorted(every.items()):
        names = cell_tls.names_for([address])
        if name.startswith("etcd"):
            pki.ensure_issued(pki_dir, f"{name}-server", hosts=names, server=True, client=True)
            pki.ensure_issued(pki_dir, f"{name}-peer", hosts=names, server=True, client=True)
        elif not name.startswith("scheduler"):  # a scheduler serves nothing
            cell_tls.server_certificate(directory, name, [address])
    known_file.write_text(json.dumps({"cell": cell, "hosts": every}, indent=2) + "\n")
    return every


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python3 -m reference.launcher.bundle", description=__doc__.split("\n\n")[0])
    parser.add_argument("--dir", required=True, help="the bundle's directory (made if missing)")
    parser.add_argument("--cell", required=True, help="the cell's name")
    parser.add_argument("hosts", nargs="+", help="NAME=ADDRESS of each process: etcd0=10.0.0.2 master0=10.0.0.3 ...")
    args = parser.parse_args(argv)
    try:
        hosts = dict(parse_host(h) for h in args.hosts)
        every = make(Path(args.dir), args.cell, hosts)
    except (ValueError, pki.PKIError, OSError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    print(f"bundle {args.dir}: cell {args.cell}, {len(every)} host(s): "
          + ", ".join(f"{n}={a}" for n, a in sorted(every.items())))  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
