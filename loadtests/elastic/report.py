"""The elastic campaign's report: one PNG with a shared time axis, report.md and summary.json."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

from loadtests.elastic.analysis import (
    Request,
    Sample,
    per_second,
    read_requests,
    scale_down_s,
    step_reactions,
)

UP_TARGET_S, P95_TARGET_S, DOWN_EXTRA_S = 15.0, 30.0, 30.0


def write_report(
    out: Path, result: dict[str, Any], requests: Sequence[Request], samples: Sequence[Sample], slo_ms: float, minimum: int
) -> dict[str, Any]:
    t0 = result.get("load_start", samples[0].at if samples else 0.0)
    t1 = max([s.at for s in samples] + [r.at for r in requests] + [t0 + 1])
    series = per_second(requests, t0, t1)
    stages = [(float(at), int(n)) for at, n in result.get("stages", [])]
    rel = [Sample(s.at - t0, s.task_count, s.serving, s.draining, s.machines) for s in samples]
    p95 = [(float(x["t"] or 0), float(x["p95_ms"])) for x in series if x["p95_ms"] is not None]
    steps = step_reactions(stages, rel, p95, slo_ms)
    load_end = next((at for at, n in stages if n <= 1 and at > 0), stages[-1][0] if stages else 0.0)
    down_decided, down_done = scale_down_s(load_end, rel, minimum)
    failures = [r for r in requests if not r.ok]
    cooldown = float(result.get("args", {}).get("down_cooldown", 0) or 0)
    headline = {
        "requests": len(requests),
        "failed_requests": len(failures),
        "scale_up_s": [s.decided_s for s in steps],
        "ready_s": [s.ready_s for s in steps],
        "p95_under_slo_s": [s.p95_ok_s for s in steps],
        "scale_down_decided_s": down_decided,
        "scale_down_done_s": down_done,
        "max_tasks": max((s.task_count for s in samples), default=0),
        "max_machines": max((s.machines for s in samples), default=0),
        "loadavg_before": result.get("loadavg_before"),
        "loadavg_after": result.get("loadavg_after"),
    }
    summary = {**result, "headline": headline, "steps": [asdict(s) for s in steps], "load_end_s": load_end}
    (out / "summary.json").write_text(json.dumps(summary, indent=2, default=str) + "\n")
    plot(out / "timeline.png", series, rel, stages, steps, slo_ms, load_end)
    (out / "report.md").write_text(markdown(summary, steps, failures, slo_ms, cooldown))
    return summary


def plot(path: Path, series: list[dict[str, Any]], samples: Sequence[Sample], stages: Sequence[tuple[float, int]],
         steps: Sequence[Any], slo_ms: float, load_end: float) -> None:  # fmt: skip
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(5, 1, sharex=True, figsize=(11, 11), constrained_layout=True)
    t = [x["t"] for x in series]
    ax[0].plot(t, [x["rps"] for x in series], color="tab:blue", label="requests/s offered")
    users = ax[0].twinx()
    users.step([a for a, _ in stages], [n for _, n in stages], where="post", color="tab:gray", ls="--", label="users")
    users.set_ylabel("users")
    ax[0].set_ylabel("req/s")
    ax[0].set_title("offered load")
    st = [s.at for s in samples]
    ax[1].step(st, [s.task_count for s in samples], where="post", color="tab:orange", label="desired (task_count)")
    ax[1].step(st, [s.serving for s in samples], where="post", color="tab:green", label="serving (in endpoints)")
    ax[1].step(st, [s.draining for s in samples], where="post", color="tab:red", ls=":", label="draining")
    ax[1].set_ylabel("tasks")
    ax[1].set_title("tasks of demo/hello_world")
    ax[1].legend(loc="upper left", fontsize=8)
    ax[2].step(st, [s.machines for s in samples], where="post", color="tab:purple")
    ax[2].set_ylabel("machines")
    ax[2].set_title("machines in the cell (up)")
    ax[3].plot([x["t"] for x in series if x["p95_ms"] is not None],
               [x["p95_ms"] for x in series if x["p95_ms"] is not None], color="tab:brown")  # fmt: skip
    ax[3].axhline(slo_ms, color="tab:red", ls="--", lw=1, label=f"SLO {slo_ms:g} ms")
    ax[3].set_ylabel("ms")
    ax[3].set_yscale("log")
    ax[3].set_title("p95 latency (5 s window)")
    ax[3].legend(loc="upper left", fontsize=8)
    ax[4].bar(t, [x["errors"] for x in series], width=1.0, color="tab:red")
    ax[4].set_ylabel("errors/s")
    ax[4].set_title(f"failed requests: {int(sum(x['errors'] for x in series))}")
    ax[4].set_xlabel("seconds since the load started")
    for a in ax:
        for s in steps:
            a.axvline(s.at, color="gray", lw=0.6, ls=":")
        a.axvline(load_end, color="black", lw=0.8, ls="--")
        a.grid(alpha=0.3)
    for s in steps:
        if s.decided_s is not None:
            ax[1].annotate(f"+{s.decided_s:.0f}s", (s.at + s.decided_s, s.tasks_after), fontsize=8)
    fig.savefig(path, dpi=90)
    plt.close(fig)


def _fmt(x: float | None) -> str:
    return "never" if x is None else f"{x:.1f} s"


def markdown(summary: dict[str, Any], steps: Sequence[Any], failures: Sequence[Request], slo_ms: float,
             cooldown: float) -> str:  # fmt: skip
    h = summary["headline"]
    lines = [
        "# Elastic campaign",
        "",
        "![timeline](timeline.png)",
        "",
        f"Command: `{summary.get('args', {}).get('command', '')}`",
        "",
        f"Load stages (s:users): `{summary.get('args', {}).get('stages', '')}`; "
        f"{h['requests']} requests, {h['failed_requests']} failed. "
        f"Host: {summary.get('cpus')} CPUs, load average before {fmt_load(h['loadavg_before'])}, "
        f"after {fmt_load(h['loadavg_after'])}.",
        "",
        "## Reaction to each load step",
        "",
        f"| step at | users | tasks | step -> count raised (target {UP_TARGET_S:g} s) | step -> all serving "
        f"| step -> p95 under {slo_ms:g} ms (target {P95_TARGET_S:g} s) |",
        "|---|---|---|---|---|---|",
    ]
    for s in steps:
        lines.append(
            f"| {s.at:.0f} s | {s.users_before} -> {s.users_after} | {s.tasks_before} -> {s.tasks_after} "
            f"| {_fmt(s.decided_s)} | {_fmt(s.ready_s)} | {_fmt(s.p95_ok_s)} |"
        )
    lines += [
        "",
        "## Scale-down after the load",
        "",
        f"Load ended at {summary['load_end_s']:.0f} s. The job's count reached min after "
        f"{_fmt(h['scale_down_decided_s'])}; only min tasks left running after {_fmt(h['scale_down_done_s'])} "
        f"(target: the scale-down cooldown {cooldown:g} s + {DOWN_EXTRA_S:g} s).",
        "",
        "## Failed requests",
        "",
    ]
    if failures:
        kinds: dict[str, int] = {}
        for f in failures:
            kinds[f.error[:80]] = kinds.get(f.error[:80], 0) + 1
        lines += [f"- {n} x `{k}`" for k, n in sorted(kinds.items(), key=lambda kv: -kv[1])]
    else:
        lines.append("None.")
    lines += ["", "## Autoscaler decisions (leader log)", "", "```", *summary.get("autoscaler_log", []), "```",
              "", "## Cell autoscaler (log tail)", "", "```", *summary.get("cellscaler_log", []), "```", ""]  # fmt: skip
    return "\n".join(lines)


def fmt_load(x: Any) -> str:
    try:
        return " / ".join(f"{v:.2f}" for v in x)
    except TypeError:
        return str(x)


def rerender(out: Path) -> dict[str, Any]:
    """Write the report again from a campaign directory's raw records (summary.json's inputs)."""
    summary = json.loads((out / "summary.json").read_text())
    samples = [Sample(**json.loads(line)) for line in (out / "samples.jsonl").read_text().splitlines() if line]
    args = summary.get("args", {})
    result = {k: v for k, v in summary.items() if k not in ("headline", "steps", "load_end_s")}
    return write_report(out, result, read_requests(out / "requests.csv"), samples,
                        float(args.get("slo_p95_ms", 250)), int(args.get("min_tasks", 1)))  # fmt: skip


if __name__ == "__main__":
    import sys

    for d in sys.argv[1:]:
        print(json.dumps(rerender(Path(d))["headline"], indent=2))
