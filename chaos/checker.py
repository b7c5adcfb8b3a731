"""Judges a chaos run's history with harness.history: its check of the whole history, and its lost-write judgement on the final reads."""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field, is_dataclass
from pathlib import Path
from typing import Any

from chaos.history import Op, Outcome, read_ops
from harness import history as hh


@dataclass
class Verdict:
    ok: bool
    checker: str  # which judgement: "harness.history" (the whole history) or "final reads"
    lost_writes: list[Any] = field(default_factory=list)
    nonlinearizable_keys: list[str] = field(default_factory=list)
    undecided_keys: list[str] = field(default_factory=list)  # the search ran out of steps: a failure
    double_running: list[Any] = field(default_factory=list)
    details: dict[str, Any] = field(default_factory=dict)


def final_time(root: Path) -> float:
    """When the final reads began (written by the probe that makes them); inf when none."""
    path = root / "final.json"
    return float(json.loads(path.read_text())["t"]) if path.exists() else float("inf")


def check_file(path: str | Path) -> Verdict:
    """Judge the JSONL history at `path` with harness.history (lost writes to any read,
    linearizability per key, undecided keys failing), and report beside it what the final
    reads alone say (every acknowledged write survived the run); either failing fails."""
    path = Path(path)
    ops = read_ops(path)
    own = final_reads_check(ops, final_time(path.parent))
    whole = _harness_check(ops)
    whole.details["final_reads_check"] = asdict(own)
    whole.ok = whole.ok and own.ok
    return whole


def _harness_check(ops: Iterable[Op]) -> Verdict:
    history = hh.History()
    history.ops = list(ops)
    try:
        result = hh.check(history)
    except Exception as err:  # a history the checker cannot read fails, with the reason
        return Verdict(False, "harness.history (error)", details={"error": repr(err)})
    return Verdict(
        bool(result.ok), "harness.history", lost_writes=[_plain(o) for o in result.lost_writes],
        nonlinearizable_keys=list(result.nonlinearizable_keys), undecided_keys=list(result.undecided_keys),
        double_running=list(result.double_running), details={"harness": list(result.details)[:50]},
    )  # fmt: skip


def _plain(o: Any) -> Any:
    return asdict(o) if is_dataclass(o) and not isinstance(o, type) else o


def final_reads_check(ops: list[Op], final_t: float) -> Verdict:
    """Every acknowledged write must survive: harness.history's lost-write judgement, with only
    the final reads (made after the load stopped and the cell healed) as the reads that judge;
    and every key written must have been read at the end."""
    written = {o.key for o in ops if o.is_write and o.outcome == Outcome.OK}
    final_keys = {o.key for o in ops if o.op == "read" and o.invoke_t >= final_t and o.outcome == Outcome.OK}
    by_key: dict[str, list[Op]] = {}
    for o in ops:
        by_key.setdefault(o.key, []).append(o)
    lost: list[dict[str, Any]] = []
    for key in sorted(written & final_keys):
        for w, r in hh.lost_writes(by_key[key], reads_from=final_t):
            lost.append({"key": key, "op": w.op, "value": w.value, "acknowledged_t": w.complete_t,
                         "final": r.result})  # fmt: skip
    unread = sorted(written - final_keys)
    counts = {str(o): sum(1 for op in ops if op.outcome == o) for o in Outcome}
    details = {"ops": len(ops), "keys": len(written), "outcomes": counts, "unread_keys": unread}
    return Verdict(not lost and not unread, "final reads", lost_writes=lost, details=details)
