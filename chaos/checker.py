"""Judges a history: harness.history.check when that module exists, else a lost-acknowledged-write check."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from chaos.history import Op, Outcome, read_ops


@dataclass
class Verdict:
    ok: bool
    checker: str  # which checker judged: "harness.history" or "chaos.checker"
    lost_writes: list[dict[str, Any]] = field(default_factory=list)
    nonlinearizable_keys: list[str] = field(default_factory=list)
    double_running: list[Any] = field(default_factory=list)
    details: dict[str, Any] = field(default_factory=dict)


def check_file(path: str | Path, lost_windows: list[tuple[float, float]] | None = None) -> Verdict:
    """Judge the JSONL history at `path`."""
    harness = _harness_check(Path(path), lost_windows)
    ops = read_ops(path)
    own = lost_acknowledged_writes(ops)
    if harness is not None:
        # Both are reported; the harness's verdict decides, ours is kept as a cross-check.
        harness.details["chaos_checker_lost"] = own.lost_writes
        return harness
    return own


def _harness_check(path: Path, lost_windows: list[tuple[float, float]] | None) -> Verdict | None:
    try:
        from harness import history as hh  # type: ignore[attr-defined]
    except ImportError:
        return None
    if not hasattr(hh, "check"):
        return None
    try:
        text = path.read_text()
        loader = hh.History.from_jsonl
        try:
            hist = loader(text)
        except (OSError, ValueError, TypeError):
            hist = loader(str(path))
        result = hh.check(hist, task_reports=None, lost_windows=lost_windows)
    except Exception as err:  # an incompatible or unfinished harness must not hide our own verdict
        return Verdict(False, "harness.history (failed)", details={"error": repr(err)})
    return Verdict(
        bool(result.ok), "harness.history",
        lost_writes=list(result.lost_writes or []),
        nonlinearizable_keys=list(result.nonlinearizable_keys or []),
        double_running=list(result.double_running or []),
        details={"harness": str(result.details)[:2000]},
    )  # fmt: skip


def lost_acknowledged_writes(ops: list[Op]) -> Verdict:
    """Every acknowledged write must survive: for each key the final read must show that write
    or one that was not surely over before it began. Values are unique per key."""
    writes: dict[str, list[Op]] = defaultdict(list)
    finals: dict[str, Op] = {}
    for op in ops:
        if op.op == "write":
            writes[op.key].append(op)
        elif op.op == "read" and op.final and op.outcome == Outcome.OK:
            finals[op.key] = op
    lost: list[dict[str, Any]] = []
    unread = []
    for key, key_writes in writes.items():
        acked = [w for w in key_writes if w.outcome == Outcome.OK]
        if not acked:
            continue
        final = finals.get(key)
        if final is None:
            unread.append(key)
            continue
        shown = final.result
        source = [w for w in key_writes if w.value == shown]
        for a in acked:
            if shown is None:
                lost.append({"key": key, "value": a.value, "final": None})
                continue
            if not source:
                lost.append({"key": key, "value": a.value, "final": shown, "why": "never written"})
                break
            w = source[0]
            if w.outcome == Outcome.FAILED:
                lost.append(
                    {"key": key, "value": a.value, "final": shown, "why": "failed write shown"}
                )
                break
            if w is not a and w.outcome == Outcome.OK and (w.complete_t or 0) < a.invoke_t:
                lost.append(
                    {
                        "key": key,
                        "value": a.value,
                        "final": shown,
                        "why": "overwritten by an older write",
                    }
                )
    counts = {str(o): sum(1 for op in ops if op.outcome == o) for o in Outcome}
    details = {"ops": len(ops), "keys": len(writes), "outcomes": counts, "unread_keys": unread}
    return Verdict(not lost and not unread, "chaos.checker", lost_writes=lost, details=details)
