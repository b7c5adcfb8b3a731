"""Checks from etcd and the old leader's metrics that a deposed leader's writes were refused."""

from __future__ import annotations

import re

import httpx

from reference.launcher import CellInfo
from reference.master import codec
from reference.store import ops
from reference.store.client import StoreClient

PROBE_KEY = "/minborg-chaos/fence-probe"


def leader_key(info: CellInfo) -> tuple[str, int] | None:
    """(value "name=url", fencing token) of the leader key, read from etcd directly."""
    with StoreClient(list(info.etcd_urls), timeout=2.0, tls=info.etcd_tls) as store:
        kv = store.get_kv(codec.Keys(info.cell).leader)
    return None if kv is None else (kv.value.decode(), kv.create_revision)


def committed_txns(master_url: str) -> float | None:
    """The master's count of committed leader txns, from its /metrics."""
    try:
        text = httpx.get(master_url + "/metrics", timeout=2.0).text
    except httpx.HTTPError:
        return None
    found = re.search(r'^minborg_txns_total\{outcome="committed"\} ([0-9.e+]+)$', text, re.M)
    return float(found.group(1)) if found else 0.0


def old_token_refused(info: CellInfo, value: str, token: int) -> bool:
    """Replay the old leader's fence in etcd: a txn guarded by its token must not commit."""
    key = codec.Keys(info.cell).leader
    with StoreClient(list(info.etcd_urls), timeout=2.0, tls=info.etcd_tls) as store:
        succeeded, _rev = store.txn(
            [ops.create_revision(key, "==", token), ops.value(key, "==", value)],
            [ops.put(PROBE_KEY, "written under a stale fencing token")],
        )
    return not succeeded
