"""How a process reaches the cell's store over TLS: the CA that signed etcd's certificates and the client certificate it presents."""

from __future__ import annotations

import argparse
import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class StoreTLS:
    """A store client's TLS files: `ca_file` verifies the members, `cert_file`/`key_file`
    authenticate the client (etcd runs with --client-cert-auth: no certificate, no access)."""

    ca_file: str
    cert_file: str
    key_file: str

    def args(self) -> list[str]:
        """The command-line flags that give a master or a tool these files (`add_arguments`)."""
        return ["--etcd-cafile", self.ca_file, "--etcd-certfile", self.cert_file, "--etcd-keyfile", self.key_file]

    def requests_kwargs(self) -> dict[str, Any]:
        """`verify` and `cert` for a `requests` call."""
        return {"verify": self.ca_file, "cert": (self.cert_file, self.key_file)}

    def to_json(self) -> dict[str, str]:
        return {"ca_file": self.ca_file, "cert_file": self.cert_file, "key_file": self.key_file}

    @classmethod
    def from_json(cls, data: Mapping[str, Any] | None) -> StoreTLS | None:
        if not data:
            return None
        return cls(str(data["ca_file"]), str(data["cert_file"]), str(data["key_file"]))

    def missing(self) -> list[str]:
        """The files that cannot be read (a useful error beats an SSL stack trace)."""
        return [p for p in (self.ca_file, self.cert_file, self.key_file) if not os.access(p, os.R_OK)]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The store's TLS flags, named as the Kubernetes API server names them."""
    parser.add_argument("--etcd-cafile", help="the CA that signed etcd's certificates (https endpoints)")
    parser.add_argument("--etcd-certfile", help="this process's client certificate for etcd")
    parser.add_argument("--etcd-keyfile", help="the client certificate's private key")


def from_arguments(args: argparse.Namespace) -> StoreTLS | None:
    """The TLS files named by `add_arguments`' flags: all three, or None for none; a
    ValueError for some but not all, or for a file that cannot be read."""
    given = (args.etcd_cafile, args.etcd_certfile, args.etcd_keyfile)
    if not any(given):
        return None
    if not all(given):
        raise ValueError("--etcd-cafile, --etcd-certfile and --etcd-keyfile go together: give all three or none")
    tls = StoreTLS(*given)
    if tls.missing():
        raise ValueError(f"cannot read the store's TLS files: {', '.join(tls.missing())}")
    return tls
