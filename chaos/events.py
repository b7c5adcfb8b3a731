"""The run directory's event log: when each fault started and ended, and what probes measured."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

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


def fault_windows(events: list[dict[str, Any]]) -> list[tuple[str, float, float]]:
    """(kind, start, end) per fault; a fault never ended counts until the last event."""
    last = max((e["t"] for e in events), default=0.0)
    open_faults: dict[str, float] = {}
    windows = []
    for event in events:
        if event["event"] == "fault-start":
            open_faults[event["fault"]] = event["t"]
        elif event["event"] == "fault-end" and event["fault"] in open_faults:
            windows.append((event["fault"], open_faults.pop(event["fault"]), event["t"]))
    windows += [(kind, start, last) for kind, start in open_faults.items()]
    return sorted(windows, key=lambda w: w[1])


def open_faults(events: list[dict[str, Any]]) -> list[str]:
    """Faults started and not yet ended."""
    opened: dict[str, int] = {}
    for event in events:
        if event["event"] == "fault-start":
            opened[event["fault"]] = opened.get(event["fault"], 0) + 1
        elif event["event"] == "fault-end" and opened.get(event["fault"]):
            opened[event["fault"]] -= 1
    return [kind for kind, n in opened.items() if n > 0]


def last_start(events: list[dict[str, Any]], fault: str | None = None) -> dict[str, Any] | None:
    starts = [e for e in events if e["event"] == "fault-start" and fault in (None, e["fault"])]
    return starts[-1] if starts else None
