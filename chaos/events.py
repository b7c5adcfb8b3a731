"""The run directory's event log: when each fault started and ended, and what probes measured."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

from harness.faults import RECORDED_AS

RUN_DIR_ENV = "CHAOS_RUN_DIR"
EVENTS = "events.jsonl"


def run_dir(path: str | None = None) -> Path:
    chosen = path or os.environ.get(RUN_DIR_ENV) or "reports/chaos/scratch"
    root = Path(chosen)
    root.mkdir(parents=True, exist_ok=True)
    return root


def record(kind: str, run: str | None = None, **fields: Any) -> dict[str, Any]:
    """Append one event (`fault-start`, `fault-end`, `measure`, ...) stamped with wall time."""
    event = {"t": time.time(), "event": kind, **fields}
    with open(run_dir(run) / EVENTS, "a") as out:
        out.write(json.dumps(event) + "\n")
    return event


def read(run: str | os.PathLike[str]) -> list[dict[str, Any]]:
    path = Path(run) / EVENTS
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


#: The kind of a kill_etcd_members window that took a majority of the members (writes stop).
ETCD_MAJORITY = "kill_etcd_members/majority"


def fault_name(event: dict[str, Any]) -> str:
    """The catalogue name (harness/faults.py) of the fault an event starts or ends; an earlier
    run's name for it (`leader-kill`, ...) is read through the catalogue's one alias table."""
    return RECORDED_AS.get(event["fault"], event["fault"])


def fault_kind(event: dict[str, Any]) -> str:
    """The fault's name, or ETCD_MAJORITY for a kill of etcd members that lost the quorum."""
    name = fault_name(event)
    if name == "kill_etcd_members" and (event.get("majority") or event["fault"] == "etcd-majority"):
        return ETCD_MAJORITY
    return name


def fault_windows(events: list[dict[str, Any]]) -> list[tuple[str, float, float]]:
    """(kind, start, end) per fault, its kind that of its start (`fault_kind`); a fault never
    ended counts until the last event."""
    last = max((e["t"] for e in events), default=0.0)
    open_faults: dict[str, tuple[str, float]] = {}
    windows = []
    for event in events:
        if event["event"] == "fault-start":
            open_faults[fault_name(event)] = (fault_kind(event), event["t"])
        elif event["event"] == "fault-end" and (began := open_faults.pop(fault_name(event), None)):
            windows.append((began[0], began[1], event["t"]))
    windows += [(kind, start, last) for kind, start in open_faults.values()]
    return sorted(windows, key=lambda w: w[1])


def open_faults(events: list[dict[str, Any]]) -> list[str]:
    """Faults started and not yet ended, by name."""
    opened: dict[str, int] = {}
    for event in events:
        if event["event"] == "fault-start":
            opened[fault_name(event)] = opened.get(fault_name(event), 0) + 1
        elif event["event"] == "fault-end" and opened.get(fault_name(event)):
            opened[fault_name(event)] -= 1
    return [kind for kind, n in opened.items() if n > 0]


def last_start(events: list[dict[str, Any]], fault: str | None = None) -> dict[str, Any] | None:
    starts = [e for e in events if e["event"] == "fault-start" and fault in (None, fault_name(e))]
    return starts[-1] if starts else None
