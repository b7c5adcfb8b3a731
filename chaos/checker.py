"""Judges a history: harness.history.check when that module exists, plus a final-read lost-write check of our own."""

from __future__ import annotations

import json
from collections import defaultdict
from dataclasses import asdict, dataclass, field, is_dataclass
from pathlib import Path
from typing import Any

from chaos.history import Op, Outcome, read_ops


@dataclass
class Verdict:
    ok: bool
    checker: str  # who decided: "harness.history" or "chaos.checker"
    lost_writes: list[Any] = field(default_factory=list)
    nonlinearizable_keys: list[str] = field(default_factory=list)
    double_running: list[Any] = field(default_factory=list)
    details: dict[str, Any] = field(default_factory=dict)


def final_time(root: Path) -> float:
    """When the final reads began (written by the probe that makes them); inf when none."""
    path = root / "final.json"
    return float(json.loads(path.read_text())["t"]) if path.exists() else float("inf")


def check_file(path: str | Path) -> Verdict:
    """Judge the JSONL history at `path` with harness.history when available; our own check
    of the final reads is always run and reported beside it, and a loss it finds fails too."""
    path = Path(path)
    ops = read_ops(path)
    own = final_reads_check(ops, final_time(path.parent))
    harness = _harness_check(path)
    if harness is None:
        return own
    harness.details["final_reads_check"] = asdict(own)
    harness.ok = harness.ok and own.ok
    return harness


def _harness_check(path: Path) -> Verdict | None:
    try:
        from harness import history as hh
    except ImportError:
        return None
    try:
        result = hh.check(hh.History.from_jsonl(path))
    except Exception as err:  # an unfinished harness must not hide our own verdict
        return Verdict(False, "harness.history (error)", details={"error": repr(err)})
    lost = [
        asdict(o) if is_dataclass(o) and not isinstance(o, type) else o for o in result.lost_writes
    ]
    return Verdict(
        bool(result.ok), "harness.history", lost_writes=lost,
        nonlinearizable_keys=list(result.nonlinearizable_keys),
        double_running=list(result.double_running), details={"harness": list(result.details)[:50]},
    )  # fmt: skip


def _cpu(doc: Any) -> Any:
    return doc.get("cpu") if isinstance(doc, dict) else doc


def final_reads_check(ops: list[Op], final_t: float) -> Verdict:
    """Every acknowledged write must survive: for each key the final read (after the load
    stopped and the cell healed) must show that write or one not surely over before it began.
    Values are unique per key, so a value names its write."""
    writes: dict[str, list[Op]] = defaultdict(list)
    finals: dict[str, Op] = {}
    for op in ops:
        if op.is_write:
            writes[op.key].append(op)
        elif op.op == "read" and op.invoke_t >= final_t and op.outcome == Outcome.OK:
            finals[op.key] = op
    lost: list[dict[str, Any]] = []
    unread = []
    for key, key_writes in writes.items():
        acked = [w for w in key_writes if w.outcome == Outcome.OK]
        if not acked:
            continue
        if key not in finals:
            unread.append(key)
            continue
        shown = _cpu(finals[key].result)
        source = [w for w in key_writes if _cpu(w.value) == shown]
        for a in acked:
            entry = {"key": key, "value": _cpu(a.value), "final": shown}
            if shown is None:
                lost.append({**entry, "why": "key missing"})
            elif not source:
                lost.append({**entry, "why": "final value never written"})
            elif source[0].outcome == Outcome.FAILED:
                lost.append({**entry, "why": "a refused write is visible"})
            elif (
                source[0] is not a
                and source[0].outcome == Outcome.OK
                and (source[0].complete_t or 0) < a.invoke_t
            ):
                lost.append({**entry, "why": "overwritten by an older write"})
    counts = {str(o): sum(1 for op in ops if op.outcome == o) for o in Outcome}
    details = {"ops": len(ops), "keys": len(writes), "outcomes": counts, "unread_keys": unread}
    return Verdict(not lost and not unread, "chaos.checker", lost_writes=lost, details=details)
