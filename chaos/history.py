"""Writes and reads client operation histories as JSONL, one operation per line, in harness.history's `Op` format.

The operation and its outcome are harness.history's (`Op`, `Outcome`): one vocabulary for
the harness, the chaos load and the checker. A write here is a submit (POST) or an update
(PATCH); the value and a read's result are the job's tracked fields, here {"cpu": milli-CPU}.
"""

from __future__ import annotations

import itertools
import json
import threading
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

from harness.history import Op, Outcome

__all__ = ["HistoryFile", "Op", "Outcome", "read_ops", "read_result"]

_ids = itertools.count(int(time.time() * 1000) % 10**9 * 1000)


class HistoryFile:
    """Appends completed operations to a JSONL file, one line per write() call so lines from
    concurrent users never interleave."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()

    def invoke(self, op: str, key: str, value: Any) -> Op:
        return Op(next(_ids), op, key, value, time.time())

    def complete(self, op: Op, outcome: Outcome, result: Any = None) -> Op:
        op.complete_t, op.outcome, op.result = time.time(), str(outcome), result
        line = json.dumps(asdict(op)) + "\n"
        with self._lock, open(self.path, "a") as out:
            out.write(line)
        return op


def read_result(cpu: int | None, revision: int, floor: int) -> dict[str, Any] | None:
    """What a read answered, as the history records it: the job's tracked fields (None when
    it does not exist), stamped with the revision it was read at and, when that is older than
    `floor` (the newest revision an acknowledged write of this client returned), marked stale.
    A stale read is recorded like any other, for the checker to judge: a client that retried
    it instead would hide from the history the very reads it is meant to catch."""
    if cpu is None:
        return None
    shown: dict[str, Any] = {"cpu": cpu, "revision": revision}
    if revision < floor:
        shown["stale"] = True
    return shown


def read_ops(path: str | Path) -> list[Op]:
    p = Path(path)
    if not p.exists():
        return []
    ops = []
    for line in p.read_text().splitlines():
        if line.strip():
            data = json.loads(line)
            ops.append(Op(**{k: v for k, v in data.items() if k in Op.__dataclass_fields__}))
    return ops
