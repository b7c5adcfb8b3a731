"""Writes report.md for a chaos campaign or a soak from their measured results."""

from __future__ import annotations

import json
import platform
import time
from pathlib import Path
from typing import Any


def _pct(value: float | None) -> str:
    return "n/a" if value is None else f"{100 * value:.2f}%"


def _s(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.2f} s"


def _load(values: Any) -> str:
    return " / ".join(f"{v:.2f}" for v in values) if values else "n/a"


def _header(title: str, command: str) -> list[str]:
    return [
        f"# {title}", "",
        f"Command: `{command}`  ",
        f"Generated: {time.strftime('%Y-%m-%d %H:%M:%S %Z')} on {platform.node()} "
        f"({platform.machine()}, Python {platform.python_version()})", "",
    ]  # fmt: skip


def write_chaos(out: Path, results: list[dict[str, Any]], command: str) -> Path:
    lines = _header("Minborg chaos experiments", command)
    lines += [
        "Cell: 3 etcd members, 3 master replicas (lease TTL 2 s, poll 1 s, down after 3 misses: the defaults), "
        "4 borglets, Toxiproxy on every link; hello_world (3 tasks) running. Load: Locust, "
        "3 register clients + 1 hello_world caller + 1 watcher.", "",
        "| # | experiment | verdict | time | API avail. in fault | failover (write recovery) | hello_world avail. | lost writes | load avg before / after (1/5/15 min) |",
        "|---|---|---|---|---|---|---|---|---|",
    ]  # fmt: skip
    for r in results:
        f = r["figures"]
        faults = f["faults"]
        avail = ", ".join(f"{x['fault']}: {_pct(x['api_availability'])}" for x in faults) or "n/a"
        recov = (
            ", ".join(
                _s(x["write_recovery_s"]) for x in faults if x["write_recovery_s"] is not None
            )
            or "n/a"
        )
        lost = len((r.get("check") or {}).get("lost_writes", [])) if r.get("check") else "n/a"
        lines.append(
            f"| {r['experiment'][:2]} | {r['title']} | {'PASS' if r['passed'] else 'FAIL'} | {r['seconds']} s "
            f"| {avail} | {recov} | {_pct(f['hello_availability'])} | {lost} "
            f"| {_load(r['loadavg_before'])} -> {_load(r['loadavg_after'])} |"
        )
    for r in results:
        lines += ["", f"## {r['experiment']}: {'PASS' if r['passed'] else 'FAIL'}", ""]
        if r["reasons"]:
            lines += ["Why it failed:", "", *[f"- {reason}" for reason in r["reasons"]], ""]
        f = r["figures"]
        lines += [
            f"- operations: {f['ops']}, API availability over the run {_pct(f['api_availability'])}, "
            f"outside failover windows {_pct(f['api_availability_outside_failover'])}",
            f"- operation latency p99 {_s(f['op_latency_p99_s'])}; hello_world availability "
            f"{_pct(f['hello_availability'])}, while no master led {_pct(f['hello_availability_without_leader'])} "
            f"({f['hello_calls_without_leader']} calls)",
            f"- double-running samples outside a lost-machine window: {f['double_running_samples_outside_lost_machine']}"
            f" (inside: {f['double_running_samples_inside_lost_machine']})",
            f"- history check: {json.dumps(_check_summary(r.get('check')))}",
        ]  # fmt: skip
        for m in f["measures"]:
            fields = {k: v for k, v in m.items() if k not in ("t", "event")}
            lines.append(f"- measured: {json.dumps(fields, default=str)}")
        lines += ["", f"![timeline]({r['experiment']}/timeline.png)"]
    path = out / "report.md"
    path.write_text("\n".join(lines) + "\n")
    return path


def _check_summary(check: dict[str, Any] | None) -> dict[str, Any] | None:
    if not check:
        return None
    details = check.get("details") or {}
    own = details.get("final_reads_check", {"details": details})
    return {k: check.get(k) for k in ("ok", "checker", "nonlinearizable_keys", "undecided_keys")} | {
        "lost_writes": len(check.get("lost_writes") or []),
        "final_read_losses": len(own.get("lost_writes") or []),
        "outcomes": (own.get("details") or {}).get("outcomes"),
    }


def _count_lines(path: Path) -> int:
    return len(path.read_text().splitlines()) if path.exists() else 0


def write_soak(out: Path, result: dict[str, Any], command: str) -> Path:
    lines = _header("Minborg soak: random faults under load", command)
    f = result["figures"]
    t = result["targets"]
    lines += [
        f"Seed {result['seed']}, {result['minutes']} min, {len(result['injected'])} faults injected; "
        f"load average before / after: {_load(result['loadavg_before'])} -> {_load(result['loadavg_after'])}.", "",
        "| target | goal | measured | met |", "|---|---|---|---|",
        *[f"| {name} | {goal} | {measured} | {'yes' if met else 'NO'} |" for name, goal, measured, met in t],
        "", f"History check: {json.dumps(_check_summary(result.get('check')))}", "",
        f"Reads answered below the client's revision floor (recorded in the history as read, "
        f"and judged there): {_count_lines(out / 'stale_reads.jsonl')}. Operations: {result.get('ops')}. "
        f"Failover windows: from a kill_leader, cut_leader_from_etcd or majority kill_etcd_members fault until the "
        f"first acknowledged write invoked after it ends.", "",
        "## Faults", "", "| # | at (s) | fault | duration | API avail. | write recovery | hello_world avail. |",
        "|---|---|---|---|---|---|---|",
    ]  # fmt: skip
    for i, x in enumerate(f["faults"]):
        lines.append(f"| {i + 1} | {x['start_s']} | {x['fault']} | {x['duration_s']} s | {_pct(x['api_availability'])} "
                     f"| {_s(x['write_recovery_s'])} | {_pct(x['hello_availability'])} |")  # fmt: skip
    if result.get("notes"):
        lines += ["", "## Notes", "", *[f"- {n}" for n in result["notes"]]]
    lines += ["", "![timeline](timeline.png)"]
    path = out / "report.md"
    path.write_text("\n".join(lines) + "\n")
    return path
