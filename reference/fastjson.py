"""JSON on the hot paths: decoding the watch stream, every stored record and every borglet's state; encoding a borglet's state and its task table.

A 10,000-task start has each master decode every task record written (several times each)
and the link shards decode a hundred borglets' states a second; the standard library's
decoder was a quarter of a follower's CPU then (docs/decisions.md). orjson parses the same
documents three times as fast. It refuses what the standard library accepts beyond strict
JSON (NaN, Infinity), so those fall back to `json.loads`. One difference stays: an integer
beyond 64 bits comes back as a float, not an int; no record or reply of a cell holds one
(resources, revisions and ids are 64-bit), and the tests hold the 64-bit edges exact.
"""

from __future__ import annotations

import json
from typing import Any

import orjson


def loads(raw: bytes | bytearray | memoryview | str) -> Any:
    """`json.loads`, faster; ValueError (json.JSONDecodeError) for what is not JSON."""
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError:
        try:
            return json.loads(bytes(raw) if isinstance(raw, memoryview) else raw)
        except RecursionError:  # nested past both readers' depth: not JSON a peer of ours sends
            raise ValueError("JSON nested too deep") from None


def dumps(obj: Any, *, sort_keys: bool = False) -> bytes:
    """Compact JSON of `obj` (UTF-8), as `json.dumps(obj, separators=(",", ":"))` gives it,
    decoded; what orjson cannot encode (an integer beyond 64 bits, a type it does not know)
    falls back to the standard library. orjson writes NaN and Infinity as null: a borglet's
    state and table hold neither."""
    try:
        return orjson.dumps(obj, option=orjson.OPT_SORT_KEYS if sort_keys else 0)
    except TypeError:
        return json.dumps(obj, separators=(",", ":"), sort_keys=sort_keys).encode()
