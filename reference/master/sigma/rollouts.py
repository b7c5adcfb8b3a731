"""Sigma's view of a job's rolling update: where the rollout stands (master/rollout.py) and the versions the job has had (master/jobhistory.py)."""

from __future__ import annotations

import time

from reference.cli.plain import ago
from reference.master import jobhistory, rollout
from reference.master.cell import Cell
from reference.master.sigma.html import e, key_values, table

ROLLOUT_CLASS = {"rolling": "warn", "stopped": "bad", "complete": "ok"}
VERSIONS_SHOWN = 10


def rollout_section(cell: Cell, key: str, now: float, ready: rollout.Ready | None = None) -> str:
    """The rollout's state, its reason and progress, then the newest versions with what each
    changed; `ready`: the leader's borglets' word (rollout.status)."""
    status = rollout.status(cell, key, now, ready)
    found = jobhistory.history(cell, key)
    if status is None or found is None:
        return ""
    css = ROLLOUT_CLASS.get(status["state"], "")
    live = cell.state.jobs[key].task_count
    stale = len(status["stale"])
    pairs = [("rollout", f'<span class="{css}">{e(status["state"])}</span> to version {e(status["version"])}'
                         + (f': {e(status["reason"])}' if status["reason"] else ": every task runs it"))]  # fmt: skip
    if status["state"] != "complete" and live:
        pairs.append(("progress", f"{max(0, live - stale)} of {live} task(s) on version {status['version']}, "
                                  f"at most {status['max_unavailable']} down at once"))  # fmt: skip
    rows = []
    for v in found["versions"][:VERSIONS_SHOWN]:
        when = time.strftime("%H:%M:%S", time.localtime(v["at"])) + f" ({ago(v['at'])})" if v["at"] else "-"
        current = '<span class="ok">current</span>' if v["current"] else ""
        changed = "submitted" if v["version"] == 0 else ", ".join(v["changed"]) or "-"
        rows.append([e(v["version"]), current, e(when), e(changed)])
    more = len(found["versions"]) - VERSIONS_SHOWN
    note = f'<p class="note">{more} older version(s): <code>minborg job history {e(key)}</code></p>' if more > 0 else ""
    return (key_values(pairs) + "<h2>Versions (newest first)</h2>"
            + table(["version", "", "submitted", "changed"], rows) + note)  # fmt: skip
