"""Pure builders and parsers for etcd's JSON gateway: keys, transaction compares and ops, events.

The gateway speaks the protobuf messages of etcd's v3 API as JSON: bytes fields are base64,
int64 fields are decimal strings, and fields at their default (0, false, empty) are left out.
Everything here is pure so it can be unit tested without an etcd.

A transaction reads as::

    from reference.store import ops

    client.txn(
        compare=[ops.create_revision(LEADER_KEY, "==", token), ops.value(LEADER_KEY, "==", "m1")],
        success=[ops.put("/cell/jobs/web", doc)],
        failure=[ops.get(LEADER_KEY)],
    )
"""

from __future__ import annotations

import base64
from dataclasses import dataclass
from typing import Any, Literal, NamedTuple

Key = str | bytes
Op = dict[str, Any]
Compare = dict[str, Any]

_RESULTS = {"==": "EQUAL", "!=": "NOT_EQUAL", "<": "LESS", ">": "GREATER"}
CompareOp = Literal["==", "!=", "<", ">"]


def to_bytes(data: Key) -> bytes:
    """Keys and values as bytes; text is UTF-8 (etcd3gw's own helper assumes Latin-1)."""
    return data.encode("utf-8") if isinstance(data, str) else bytes(data)


def b64(data: Key) -> str:
    return base64.b64encode(to_bytes(data)).decode("ascii")


def unb64(data: str | None) -> bytes:
    return base64.b64decode(data) if data else b""


def prefix_range_end(prefix: Key) -> bytes:
    """The smallest key greater than every key that starts with `prefix` (etcd's range_end).

    Trailing 0xff bytes cannot be incremented, so they are dropped first; a prefix of only
    0xff bytes (or empty) ranges to the end of the keyspace, written as b"\\0".
    """
    raw = bytearray(to_bytes(prefix))
    while raw and raw[-1] == 0xFF:
        raw.pop()
    if not raw:
        return b"\0"
    raw[-1] += 1
    return bytes(raw)


# -- compares: the guard of a transaction --------------------------------------------------


def _compare(key: Key, op: CompareOp, target: str, field: str, operand: Any) -> Compare:
    if op not in _RESULTS:
        raise ValueError(f"compare operator must be one of {sorted(_RESULTS)}, got {op!r}")
    return {"key": b64(key), "result": _RESULTS[op], "target": target, field: operand}


def value(key: Key, op: CompareOp, expected: Key) -> Compare:
    """Compare the key's value (a missing key has no value and fails every value compare)."""
    return _compare(key, op, "VALUE", "value", b64(expected))


def version(key: Key, op: CompareOp, expected: int) -> Compare:
    """Compare how many times the key was written since its creation (0: missing)."""
    return _compare(key, op, "VERSION", "version", str(expected))


def create_revision(key: Key, op: CompareOp, expected: int) -> Compare:
    """Compare the revision that created the key (0: missing). `== 0` means "absent"."""
    return _compare(key, op, "CREATE", "create_revision", str(expected))


def mod_revision(key: Key, op: CompareOp, expected: int, range_end: Key | None = None) -> Compare:
    """Compare the revision of the key's last write (0: missing); with `range_end`, of every
    key in [key, range_end) that exists (etcd's Compare.range_end: one compare for a run of
    keys, holding only if it holds for each of them)."""
    compare = _compare(key, op, "MOD", "mod_revision", str(expected))
    if range_end is not None:
        compare["range_end"] = b64(range_end)
    return compare


def lease(key: Key, op: CompareOp, lease_id: int) -> Compare:
    """Compare the lease the key is attached to (0: none)."""
    return _compare(key, op, "LEASE", "lease", str(lease_id))


# -- ops: what a transaction does -----------------------------------------------------------


def put(key: Key, data: Key, lease_id: int | None = None) -> Op:
    request: dict[str, Any] = {"key": b64(key), "value": b64(data)}
    if lease_id:
        request["lease"] = str(lease_id)
    return {"request_put": request}


def delete(key: Key) -> Op:
    return {"request_delete_range": {"key": b64(key)}}


def delete_prefix(prefix: Key) -> Op:
    return {"request_delete_range": {"key": b64(prefix), "range_end": b64(prefix_range_end(prefix))}}


def get(key: Key) -> Op:
    return {"request_range": {"key": b64(key)}}


def txn_request(compare: list[Compare], success: list[Op], failure: list[Op]) -> dict[str, Any]:
    return {"compare": list(compare), "success": list(success), "failure": list(failure)}


# -- parsing responses ------------------------------------------------------------------------


class KeyValue(NamedTuple):
    """One key as etcd stores it. Revisions are 0 for a deleted key. (A named tuple, not a
    frozen dataclass: a watch parses thousands a second, and an event is parsed in less than half the time.)"""

    key: bytes
    value: bytes
    create_revision: int
    mod_revision: int
    version: int
    lease: int


def parse_kv(kv: dict[str, Any]) -> KeyValue:
    get = kv.get
    return KeyValue(
        unb64(get("key")), unb64(get("value")), int(get("create_revision", 0)), int(get("mod_revision", 0)),
        int(get("version", 0)), int(get("lease", 0)),
    )  # fmt: skip


def header_revision(response: dict[str, Any]) -> int:
    """The store revision a response reflects."""
    return int(response.get("header", {}).get("revision", 0))


class WatchEvent(NamedTuple):
    """A change seen by a watch. A DELETE has an empty value and mod_revision of the delete."""

    kind: Literal["PUT", "DELETE"]
    key: bytes
    value: bytes
    mod_revision: int
    create_revision: int
    version: int


@dataclass(frozen=True)
class TxnResult:
    """What a transaction did: which branch ran, the revision after it, and for each op of
    that branch its response (the keys read by a `get`, empty for puts and deletes)."""

    succeeded: bool
    revision: int
    responses: tuple[tuple[KeyValue, ...], ...]


def parse_txn(response: dict[str, Any]) -> TxnResult:
    results = []
    for op_response in response.get("responses", []):
        kvs = op_response.get("response_range", {}).get("kvs", [])
        results.append(tuple(parse_kv(kv) for kv in kvs))
    return TxnResult(
        succeeded=bool(response.get("succeeded", False)),
        revision=header_revision(response),
        responses=tuple(results),
    )
