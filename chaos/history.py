"""Writes and reads client operation histories as JSONL (one operation per line, in harness.history's format)."""

from __future__ import annotations

import itertools
import json
import threading
import time
from dataclasses import asdict, dataclass
from enum import StrEnum
from pathlib import Path
from typing import Any


class Outcome(StrEnum):
    OK = "ok"
    FAILED = "failed"  # surely not applied
    UNKNOWN = "unknown"  # may or may not have been applied


# harness.history's operation kinds: a write is a submit (POST) or an update (PATCH); the
# value and a read's result are the job's tracked fields, here {"cpu": milli-CPU}.
WRITES = ("submit", "update")
_ids = itertools.count(int(time.time() * 1000) % 10**9 * 1000)


@dataclass
class Op:
    id: int
    op: str  # "submit", "update" or "read"
    key: str
    value: Any
    invoke_t: float
    complete_t: float | None = None
    outcome: str = "pending"
    result: Any = None

    @property
    def is_write(self) -> bool:
        return self.op in WRITES


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
