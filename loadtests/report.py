"""Write report.md and its PNGs from a campaign directory (r1/, r3/, r5/ with run.json, shapes, CSVs, samples).

    python -m loadtests.report reports/load/control-plane     # regenerate from the data
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from loadtests.analysis import role_share
from loadtests.figures import (
    THROTTLED_SHARE,
    ReadFigures,
    failing_step,
    peak,
    read_figures,
    relative_to_one,
    step_saturation,
    throttled_share,
    write_figures,
)
from loadtests.history import FailureKind
from loadtests.machine import one_line
from loadtests.plots import plot_cpu, plot_latency, plot_reads, plot_throughput
from loadtests.runs import Run, group, load_runs


def reads_cell(best: dict[str, Any] | None, measured: bool = True) -> str:
    """A 'reads/s with p99 < 50 ms (users)' table cell."""
    if not measured:
        return "not measured"
    return f"{best['rps']:.0f} ({best['users']})" if best else "none"


def times(ratio: float | None) -> str:
    return f"{ratio:.2f}x" if ratio is not None else "n/a"


def describe_verdict(run: Run, shape: dict[str, Any] | None = None) -> str:
    """The stop rule that ended a ladder: the mixed one, or the one whose shape JSON is given."""
    v = run.verdict if shape is None else shape.get("verdict")
    if not v:
        return "ladder did not finish a step"
    if v["reason"] == "error_rate":
        return f"failed at {v['users']} users: error rate {100 * v['value']:.1f}% > {100 * v['limit']:.0f}%"
    if v["reason"] == "p95_slo":
        return f"failed at {v['users']} users: p95 {v['value']:.0f} ms > SLO {v['limit']:.0f} ms"
    return f"held up to the maximum of {v['users']} users (no rule tripped)"


def error_summary(kinds: list[FailureKind], limit: int = 4) -> str:
    if not kinds:
        return "none"
    return "; ".join(f"{k.name} {k.error} x{k.occurrences}" for k in kinds[:limit])


def step_table(run: Run, control: bool, steps: list[dict[str, Any]] | None = None) -> list[str]:
    """One row per step of the mixed ladder, or of `steps` (another ladder of the same run)."""
    head = "| users | req/s | p50 ms | p95 ms | p99 ms | errors |"
    rule = "|---:|---:|---:|---:|---:|---:|"
    if control:
        head += " reads/s (p99) | writes/s (p99) |"
        rule += "---:|---:|"
    head += " machine CPU | busiest processes, others outside the cell (% of one core) |"
    rule += "---:|---|"
    lines = [head, rule]
    for s in run.steps if steps is None else steps:
        sat = step_saturation(run, s)
        busiest = ", ".join(f"{p.name} {p.cpu_mean:.0f}" for p in sat.processes[:3])
        row = (f"| {s['users']} | {s['rps']:.0f} | {s['p50_ms']:.0f} | {s['p95_ms']:.0f} | "
               f"{s['p99_ms']:.0f} | {100 * s['error_rate']:.2f}% |")  # fmt: skip
        if control:
            r, w = group(s, "read"), group(s, "write")
            row += f" {r.get('rps', 0):.0f} ({r.get('p99_ms', 0):.0f}) | {w.get('rps', 0):.0f} ({w.get('p99_ms', 0):.0f}) |"
        row += f" {sat.machine_cpu:.0f}% | {busiest}; others {sat.others:.0f} |"
        lines.append(row)
    return lines


def build(root: Path) -> Path:
    runs = load_runs(root)
    if not runs:
        raise SystemExit(f"no r*/run.json under {root}")
    target = runs[0].record["target"]
    control = target == "control-plane"
    slo = runs[0].ladder.get("rules", {}).get("slo_p95_ms", 250.0)
    plot_throughput(runs, root / "throughput.png", control)
    plot_latency(runs, root / "latency.png", slo)
    plot_cpu(runs, root / "cpu.png")
    reads_plot = control and any(r.reads for r in runs)
    if reads_plot:
        plot_reads(runs, root / "reads.png")

    md = [f"# Load campaign: {target}", ""]
    ladder = runs[0].ladder
    md += [
        f"Replica counts: {', '.join(str(r.replicas) for r in runs)}. Closed-loop Locust users "
        f"(no think time), {ladder.get('step_seconds', 0):g} s steps (the first {ladder.get('settle_s', 0):g} s "
        f"of each step not counted). Stop rules: error rate over "
        f"{100 * ladder.get('rules', {}).get('max_error_rate', 0.01):g}%, p95 over {slo:g} ms, "
        f"or the maximum of {ladder.get('rules', {}).get('max_users', '?')} users. "
        + (
            f"**CPU budget: {runs[0].record['replica_cpu']:g} cores per master replica and for the scheduler "
            "process** (a cgroup quota each, `--replica-cpu`), so more replicas bring more CPU, as hosts would."
            if runs[0].record.get("replica_cpu")
            else "No CPU budget per replica: every replica competes for the same cores."
        ),
        "",
        "## Machine",
        "",
    ]
    for run in runs:
        md.append(f"- {run.replicas} replica(s): {one_line(run.record['machine'])}")
    md += [
        "",
        f"Everything runs on this one machine: etcd, every master replica, the borglet, the "
        f"tasks **and the Locust load generator** share its {runs[0].cores} cores. Other work on "
        f"the machine (see the load average) takes CPU from the cell too.",
        "",
        "![throughput](throughput.png)",
        "",
        "![latency](latency.png)",
        "",
        "![cpu](cpu.png)",
        "",
        *(["![reads: reads-only ladder beside the mixed ladder's reads](reads.png)", ""] if reads_plot else []),
        "## Failure points (mixed ladder)" if control else "## Failure points",
        "",
        "| replicas | peak req/s (users) | failure point | what saturated at that step | errors seen |",
        "|---:|---:|---|---|---|",
    ]
    for run in runs:
        rps, users = peak(run.steps)
        step = failing_step(run)
        sat = step_saturation(run, step).verdict if step else "no step"
        share = throttled_share(run)
        if share is not None and share >= THROTTLED_SHARE:
            sat = (f"**the tasks' CPU quota**: throttled in {100 * share:.0f}% of CFS periods "
                   f"over the ladder (see below). {sat}")  # fmt: skip
        md.append(
            f"| {run.replicas} | {rps:.0f} ({users}) | {describe_verdict(run)} | {sat} | "
            f"{error_summary(run.failures)} |"
        )
    md.append("")
    if control:
        md += control_section(runs)
    else:
        md += service_section(runs)
    for run in runs:
        md += ["", f"## {run.replicas} replica(s): steps" + (" of the mixed ladder" if control else ""), ""]
        md += step_table(run, control)
        if control and run.reads is not None:
            md += ["", f"## {run.replicas} replica(s): steps of the reads-only ladder", ""]
            md += step_table(run, False, run.reads_steps)
    md += [
        "",
        "Data: `r<N>/ladder_*` (Locust CSVs, the shape's per-step JSON), `r<N>/reads_*` (the "
        "reads-only ladder, absent in runs from before it), `r<N>/submit_*` (the "
        "submit-only ladder), `r<N>/samples.csv` (CPU and RSS of every process, about 1 s), "
        "`r<N>/submit0_*` (submissions of jobs with no task), "
        "`r<N>/run.json` (machine, cell, direct etcd bench). Regenerate this page with "
        f"`python -m loadtests.report {root}`.",
        "",
    ]
    path = root / "report.md"
    path.write_text("\n".join(md))
    return path


def control_section(runs: list[Run]) -> list[str]:
    md = ["## Targets (control plane)", ""]
    md += ["Reads are measured twice: in the mixed ladder (reads beside submissions and kills, "
           "which queue on the leader's writer) and in the reads-only ladder (the same reads and "
           "weights, no writes: the read path alone). Submissions come from the submit-only runs.",
           ""]  # fmt: skip
    md += ["| replicas | reads/s with p99 < 50 ms, mixed ladder (users) | "
           "reads/s with p99 < 50 ms, reads-only ladder (users) | "
           "submissions/s with p99 < 250 ms (users) | "
           "direct etcd txn/s (put/s), same client | master submits/s, 0-task jobs (write path alone) | "
           "master/etcd | master submits/s, 1-task pending jobs | master/etcd |",
           "|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]  # fmt: skip
    figures = {run.replicas: read_figures(run) for run in runs}
    for run in runs:
        f = figures[run.replicas]
        w = write_figures(run)
        best = w.get("best")
        same = w.get("master_same")
        ratio = w.get("ratio")
        alone = w.get("alone")
        alone_ratio = w.get("alone_ratio")
        md.append(
            f"| {run.replicas} | "
            + reads_cell(f.mixed_best) + " | "
            + reads_cell(f.only_best, f.only_measured) + " | "
            + (f"{best['rps']:.0f} ({best['users']}, p99 {best['p99_ms']:.0f} ms)" if best else "none") + " | "
            + (f"{w['etcd_txn']:.0f} ({w['etcd_put']:.0f}), {w['clients']} clients" if w else "n/a") + " | "
            + (f"{alone['rps']:.0f} (p99 {alone['p99_ms']:.0f} ms)" if alone else "n/a") + " | "
            + (f"{100 * alone_ratio:.0f}%" if alone_ratio is not None else "n/a") + " | "
            + (f"{same['rps']:.0f} (p99 {same['p99_ms']:.0f} ms)" if same else "n/a") + " | "
            + (f"{100 * ratio:.0f}%" if ratio is not None else "n/a") + " |"
        )  # fmt: skip
    md += ["", "Read throughput relative to 1 replica, per ladder (peak: the step with the most "
           "reads/s whatever their latency; within target: reads/s with p99 < 50 ms):", ""]  # fmt: skip
    md += read_scaling_table(runs, figures)
    md += ["", "CPU by role (% of one core) at each ladder's peak-read step:", ""]
    for run in runs:
        f = figures[run.replicas]
        rps, users = f.mixed_peak
        md.append(f"- {run.replicas} replica(s), mixed ladder: {rps:.0f} reads/s at {users} users; "
                  f"{role_shares(run, run.steps, users)}")  # fmt: skip
        if f.only_peak is not None:
            rps, users = f.only_peak
            md.append(f"- {run.replicas} replica(s), reads-only ladder: {rps:.0f} reads/s at {users} "
                      f"users; {role_shares(run, run.reads_steps, users)}")  # fmt: skip
    if any(r.reads is not None for r in runs):
        md += ["", "Reads-only ladder:", ""]
        for run in runs:
            if run.reads is None:
                md.append(f"- {run.replicas} replica(s): not measured")
                continue
            md.append(f"- {run.replicas} replica(s): {describe_verdict(run, run.reads)}; errors: "
                      f"{error_summary(run.reads_failures)}")  # fmt: skip
    md += [
        "",
        "Every replica, every etcd member and Locust share this machine's CPUs. A master is one "
        "Python process, so it uses at most about one core (the GIL): with reads alone, one "
        "replica leaves the other core mostly idle and more replicas can put it to work. In the "
        "mixed ladder every write costs every replica (each watch cache decodes it and builds a "
        "new view; a write sent to a follower is forwarded and answered once the follower's "
        "cache has it) and every extra etcd member adds Raft replication, on the same two "
        "cores. On machines of their own the replicas would add read capacity in both ladders.",
    ]
    return md


def read_scaling_table(runs: list[Run], figures: dict[int, ReadFigures]) -> list[str]:
    """Per replica count, both ladders' read figures and each over the 1-replica figure."""
    mixed_peak = relative_to_one({n: f.mixed_peak[0] for n, f in figures.items()})
    mixed_best = relative_to_one(
        {n: f.mixed_best["rps"] if f.mixed_best else None for n, f in figures.items()}
    )
    only_peak = relative_to_one({n: f.only_peak[0] if f.only_peak else None for n, f in figures.items()})
    only_best = relative_to_one(
        {n: f.only_best["rps"] if f.only_best else None for n, f in figures.items()}
    )
    md = ["| replicas | mixed ladder: peak reads/s (users) | x 1 replica | mixed ladder: within target | "
          "x 1 replica | reads-only ladder: peak reads/s (users) | x 1 replica | "
          "reads-only ladder: within target | x 1 replica |",
          "|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]  # fmt: skip
    for run in runs:
        n, f = run.replicas, figures[run.replicas]
        only = (f"{f.only_peak[0]:.0f} ({f.only_peak[1]})" if f.only_peak else "not measured")
        md.append(
            f"| {n} | {f.mixed_peak[0]:.0f} ({f.mixed_peak[1]}) | {times(mixed_peak[n])} | "
            f"{reads_cell(f.mixed_best)} | {times(mixed_best[n])} | {only} | {times(only_peak[n])} | "
            f"{reads_cell(f.only_best, f.only_measured)} | {times(only_best[n])} |"
        )
    return md


def role_shares(run: Run, steps: list[dict[str, Any]], users: int) -> str:
    """CPU by role during the step of `steps` at `users`, with the machine's other processes."""
    step = next((s for s in steps if s["users"] == users), None)
    if step is None:
        return "no step"
    sat = step_saturation(run, step)
    shares = ", ".join(f"{k} {v:.0f}%" for k, v in role_share(sat.processes).items())
    return f"{shares}, other processes {sat.others:.0f}%" if shares else "no samples"


def service_section(runs: list[Run]) -> list[str]:
    md = ["## Service throughput", ""]
    base = None
    for run in runs:
        rps, users = peak(run.steps)
        base = base or rps
        md.append(f"- {run.replicas} hello_world task(s): peak {rps:.0f} req/s at {users} users "
                  f"({rps / base:.2f}x of the first)")  # fmt: skip
    md += ["", "CPU quota of the tasks (cgroup v1 CFS counters over the whole ladder):", ""]
    for run in runs:
        md.append(f"- {run.replicas} task(s): {throttling_line(run)}")
    md += [
        "",
        "Clients resolve the job's endpoints through the master every few seconds and balance "
        "round-robin across the healthy tasks themselves; the master is off the data path, so "
        "its CPU stays low while the tasks and Locust take the cores.",
    ]
    return md


def throttling_line(run: Run) -> str:
    counters = run.record.get("task_throttling") or {}
    if not counters:
        return "no cgroup CPU counters (tasks not in a cpu cgroup)"
    parts = []
    for name, c in sorted(counters.items()):
        share = c["nr_throttled"] / c["nr_periods"] if c["nr_periods"] else 0.0
        parts.append(f"{name} throttled in {100 * share:.0f}% of periods ({c['throttled_s']:.1f} s)")
    c0 = next(iter(counters.values()))
    quota = (f"quota {c0['quota_us'] / c0['period_us']:.0%} of a core "
             f"({c0['quota_us'] / 1000:g} ms per {c0['period_us'] / 1000:g} ms)")  # fmt: skip
    return f"{quota}; " + "; ".join(parts)


def main(argv: list[str] | None = None) -> int:
    args = argv if argv is not None else sys.argv[1:]
    if len(args) != 1:
        print("usage: python -m loadtests.report DIR", file=sys.stderr)
        return 2
    print(build(Path(args[0])))
    return 0


if __name__ == "__main__":
    sys.exit(main())
