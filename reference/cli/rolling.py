"""What `job run`, `job plan` and `job revert` print of a new version, and how they follow its rollout: the standard library alone, for both command lines (the fast path's `job run`)."""

from __future__ import annotations

import time
from collections.abc import Callable

TYPE_CHECKING = False
if TYPE_CHECKING:  # typing costs the fast path's start
    from typing import Any

POLL_S = 1.0


def plan_text(answer: dict[str, Any], current: dict[str, Any] | None) -> str:
    """What a version changes, field by field (old -> new where the job is known), and what
    happens to each task."""
    key, plan, kept = answer["job"], answer["plan"], answer.get("task_count_kept")
    if answer.get("unchanged"):
        return f"{key}: unchanged (version {answer['version']}" + (f"; task_count {kept} kept, the autoscaler's)" if kept is not None else ")")
    if answer.get("created"):
        return "\n".join([f"{key}: new job, {len(plan['added'])} task(s) to start", *_where(answer.get("placements"))])
    lines = [f"{key}: version {answer['version'] - 1} -> {answer['version']}" + (" (dry run: nothing written)" if answer.get("dry_run") else "")]
    for name in answer["changed"]:
        if current is not None:
            lines.append(f"  ~ {name}: {_short(current.get(name))} -> {_short(answer.get('file', {}).get(name, '?'))}")
        else:
            lines.append(f"  ~ {name}")
    for word, indices in (("replaced (rolling)", plan["replaced"]), ("changed in place", plan["in_place"]),
                          ("added", plan["added"]), ("killed", plan["removed"])):  # fmt: skip
        if indices:
            lines.append(f"  {word}: task(s) {', '.join(map(str, indices))}")
    if plan["replaced"]:
        lines.append(f"  at most {answer['max_unavailable']} task(s) down at once")
    if kept is not None:
        lines.append(f"  task_count {kept} kept: the autoscaler's (the file declares the count it declared before)")
    return "\n".join(lines + _where(answer.get("placements")))


def _where(placements: list[dict[str, Any]] | None) -> list[str]:
    """Where a dry run says each replaced or added task would go (none: not a dry run)."""
    if not placements:
        return []
    lines = ["  where they would go:"]
    for p in placements:
        src = p["was_on"] if p.get("was_on") else "(added)"
        dst = p["machine"] if p.get("machine") else f"waits: {p.get('reason') or '?'}"
        lines.append(f"    task {p['index']}: {src} -> {dst}")
    return lines


def _short(value: Any) -> str:
    text = str(value)
    return text if len(text) <= 60 else text[:57] + "..."



def follow_rollout(
    read: Callable[[], dict[str, Any]], say: Callable[[str], None], timeout_s: float,
    sleep: Callable[[float], None] = time.sleep, clock: Callable[[], float] = time.monotonic,
) -> str:
    """Follow a job's rollout (`read` is GET of the job) until every task runs the current
    version and is up ("complete"), a replacement fails ("stopped") or `timeout_s` passes
    ("timeout"); says each change of where it stands."""
    deadline = clock() + timeout_s
    last = None
    while True:
        r = read().get("rollout") or {}
        seen = (r.get("state"), tuple(r.get("stale", ())), tuple(r.get("down", ())))
        if seen != last:
            last = seen
            say(f"rollout of version {r.get('version')}: {r.get('state')}, {len(r.get('stale', []))} to replace, "
                f"{len(r.get('down', []))} down" + (f": {r['reason']}" if r.get("state") == "stopped" else ""))  # fmt: skip
        if r.get("state") == "stopped":
            return "stopped"
        if r.get("state") == "complete" and not r.get("down"):
            return "complete"
        if clock() >= deadline:
            return "timeout"
        sleep(POLL_S)
