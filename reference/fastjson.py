"""JSON decoding on the hot paths: the watch stream, every stored record, every borglet's state.

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
        return json.loads(bytes(raw) if isinstance(raw, memoryview) else raw)
