"""Write report.md and its PNGs from a campaign directory (r1/, r3/, r5/ with run.json, shapes, CSVs, samples).

    python -m loadtests.report reports/load/control-plane     # regenerate from the data
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")  # no display: files only
import matplotlib.pyplot as plt  # noqa: E402

from loadtests.analysis import Saturation, role_share, saturation, window  # noqa: E402
from loadtests.history import FailureKind, read_failures  # noqa: E402
from loadtests.machine import one_line  # noqa: E402
from loadtests.sampler import Sample, read_csv  # noqa: E402

READ_P99_MS = 50.0  # the control plane's read target: p99 under this
WRITE_P99_MS = 250.0  # and the submissions' target


@dataclass
class Run:
    replicas: int
    record: dict[str, Any]
    ladder: dict[str, Any]
    reads: dict[str, Any] | None  # the reads-only ladder; None in runs from before it existed
    submit: dict[str, Any] | None
    submit0: dict[str, Any] | None
    samples: list[Sample]
    failures: list[FailureKind]
    submit_failures: list[FailureKind]
    reads_failures: list[FailureKind] = field(default_factory=list)

    @property
    def steps(self) -> list[dict[str, Any]]:
        return self.ladder.get("steps", [])

    @property
    def verdict(self) -> dict[str, Any] | None:
        return self.ladder.get("verdict")

    @property
    def reads_steps(self) -> list[dict[str, Any]]:
        return (self.reads or {}).get("steps", [])

    @property
    def cores(self) -> int:
        return int(self.record["machine"]["logical_cores"])


def _json(path: Path) -> dict[str, Any]:
    return json.loads(path.read_text()) if path.exists() else {}


def load_runs(root: Path) -> list[Run]:
    runs = []
    for run_json in sorted(root.glob("r*/run.json"), key=lambda p: int(p.parent.name[1:])):
        d = run_json.parent
        record = json.loads(run_json.read_text())
        runs.append(
            Run(
                replicas=record["replicas"],
                record=record,
                ladder=_json(d / "ladder_shape.json"),
                reads=_json(d / "reads_shape.json") or None,
                submit=_json(d / "submit_shape.json") or None,
                submit0=_json(d / "submit0_shape.json") or None,
                samples=read_csv(d / "samples.csv") if (d / "samples.csv").exists() else [],
                failures=read_failures(d / "ladder_failures.csv"),
                submit_failures=read_failures(d / "submit_failures.csv"),
                reads_failures=read_failures(d / "reads_failures.csv"),
            )
        )
    return runs


def group(step: dict[str, Any], name: str) -> dict[str, Any]:
    return step.get("groups", {}).get(name, {})


def best_within(steps: list[dict[str, Any]], name: str | None, p99_ms: float) -> dict[str, Any] | None:
    """The step with the highest rate of `name` (all requests if None) whose p99 is under `p99_ms`."""
    ok = []
    for s in steps:
        g = s if name is None else group(s, name)
        if g and g.get("requests") and g["p99_ms"] < p99_ms and g.get("error_rate", 0) <= 0.01:
            ok.append((g["rps"], s["users"], g))
    if not ok:
        return None
    rps, users, g = max(ok, key=lambda x: x[0])
    return {"rps": rps, "users": users, "p99_ms": g["p99_ms"], "p95_ms": g["p95_ms"]}


def peak(steps: list[dict[str, Any]], name: str | None = None) -> tuple[float, int]:
    rates = [((s if name is None else group(s, name)).get("rps", 0.0), s["users"]) for s in steps]
    return max(rates, default=(0.0, 0))


def relative_to_one(values: dict[int, float | None]) -> dict[int, float | None]:
    """Each replica count's value over the 1-replica value; None where either is missing (or
    the 1-replica value is 0)."""
    base = values.get(1)
    return {n: (v / base if base and v is not None else None) for n, v in values.items()}


@dataclass(frozen=True)
class ReadFigures:
    """A run's read throughput from both ladders: the mixed one (reads beside submit/kill) and
    the reads-only one (None: that ladder was not run)."""

    mixed_best: dict[str, Any] | None  # best_within the read target
    mixed_peak: tuple[float, int]  # (reads/s, users)
    only_best: dict[str, Any] | None
    only_peak: tuple[float, int] | None

    @property
    def only_measured(self) -> bool:
        return self.only_peak is not None


def read_figures(run: Run) -> ReadFigures:
    only = run.reads is not None
    return ReadFigures(
        mixed_best=best_within(run.steps, "read", READ_P99_MS),
        mixed_peak=peak(run.steps, "read"),
        only_best=best_within(run.reads_steps, "read", READ_P99_MS) if only else None,
        only_peak=peak(run.reads_steps, "read") if only else None,
    )


def reads_cell(best: dict[str, Any] | None, measured: bool = True) -> str:
    """A 'reads/s with p99 < 50 ms (users)' table cell."""
    if not measured:
        return "not measured"
    return f"{best['rps']:.0f} ({best['users']})" if best else "none"


def times(ratio: float | None) -> str:
    return f"{ratio:.2f}x" if ratio is not None else "n/a"


def limits(run: Run) -> dict[str, float]:
    """Role -> CPU limit in percent of one core, where the cell enforces one (task cgroups)."""
    cell_info = run.record.get("cell", {})
    task_mcpu = cell_info.get("task_cpu_millis")
    if task_mcpu and cell_info.get("isolation", "").startswith("cgroup"):
        return {"task": task_mcpu / 10.0}
    return {}


def step_saturation(run: Run, step: dict[str, Any]) -> Saturation:
    return saturation(
        window(run.samples, step["started_at"], step["ended_at"]), run.cores, limits(run)
    )


def failing_step(run: Run) -> dict[str, Any] | None:
    v = run.verdict
    return run.steps[v["step"]] if v and v["step"] < len(run.steps) else (run.steps[-1] if run.steps else None)


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


# --- plots -------------------------------------------------------------------------------


def plot_throughput(runs: list[Run], path: Path, control: bool) -> None:
    fig, ax = plt.subplots(figsize=(7, 4.2))
    for run in runs:
        users = [s["users"] for s in run.steps]
        line = ax.plot(users, [s["rps"] for s in run.steps], marker="o", label=f"{run.replicas} replica(s): all")[0]
        if control:
            ax.plot(users, [group(s, "read").get("rps", 0) for s in run.steps], ls="--",
                    color=line.get_color(), alpha=0.7, label=f"{run.replicas}: reads")  # fmt: skip
            ax.plot(users, [group(s, "write").get("rps", 0) for s in run.steps], ls=":",
                    color=line.get_color(), alpha=0.7, label=f"{run.replicas}: writes")  # fmt: skip
        v = run.verdict
        if v and v["reason"] != "max_users" and v["step"] < len(run.steps):
            s = run.steps[v["step"]]
            ax.scatter([s["users"]], [s["rps"]], marker="x", s=120, color="red", zorder=5)
    ax.set_xlabel("concurrent users (closed loop)")
    ax.set_ylabel("requests / s")
    ax.set_title("Throughput against users (red x: the step where a stop rule tripped)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, ncol=2)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def plot_reads(runs: list[Run], path: Path) -> None:
    """Reads/s and read p99 against users: the reads-only ladder (solid) beside the mixed
    ladder's reads (dashed)."""
    fig, (rate, p99) = plt.subplots(1, 2, figsize=(10, 4))
    for run in runs:
        only = run.reads_steps
        line = None
        if only:
            users = [s["users"] for s in only]
            line = rate.plot(users, [group(s, "read").get("rps", 0) for s in only], marker="o",
                             label=f"{run.replicas}: reads-only ladder")[0]  # fmt: skip
            p99.plot(users, [group(s, "read").get("p99_ms", 0) for s in only], marker="o",
                     color=line.get_color(), label=f"{run.replicas}: reads-only ladder")  # fmt: skip
        color = line.get_color() if line else None
        users = [s["users"] for s in run.steps]
        rate.plot(users, [group(s, "read").get("rps", 0) for s in run.steps], ls="--", marker=".",
                  color=color, alpha=0.7, label=f"{run.replicas}: mixed ladder")  # fmt: skip
        p99.plot(users, [group(s, "read").get("p99_ms", 0) for s in run.steps], ls="--", marker=".",
                 color=color, alpha=0.7, label=f"{run.replicas}: mixed ladder")  # fmt: skip
    p99.axhline(READ_P99_MS, color="red", lw=0.8, label=f"target p99 {READ_P99_MS:g} ms")
    rate.set_title("reads / s against users")
    p99.set_title("read p99 (ms, log) against users")
    p99.set_yscale("log")
    for ax in (rate, p99):
        ax.set_xlabel("concurrent users (closed loop)")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def plot_latency(runs: list[Run], path: Path, slo_ms: float) -> None:
    fig, axes = plt.subplots(1, len(runs), figsize=(4.2 * len(runs), 3.8), sharey=True, squeeze=False)
    for ax, run in zip(axes[0], runs, strict=True):
        users = [s["users"] for s in run.steps]
        for key, style in (("p50_ms", "-"), ("p95_ms", "--"), ("p99_ms", ":")):
            ax.plot(users, [s[key] for s in run.steps], ls=style, marker=".", label=key[:3])
        ax.axhline(slo_ms, color="red", lw=0.8, label=f"p95 SLO {slo_ms:g} ms")
        ax.set_title(f"{run.replicas} replica(s)")
        ax.set_xlabel("users")
        ax.grid(alpha=0.3)
        ax.set_yscale("log")
    axes[0][0].set_ylabel("latency, ms (log)")
    axes[0][0].legend(fontsize=7)
    fig.suptitle("Latency percentiles against users")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def plot_cpu(runs: list[Run], path: Path) -> None:
    fig, axes = plt.subplots(len(runs), 1, figsize=(8, 2.6 * len(runs)), sharex=False, squeeze=False)
    for ax, run in zip(axes[:, 0], runs, strict=True):
        if not run.samples:
            continue
        t0 = run.samples[0].t
        by_role: dict[str, dict[float, float]] = {}
        for s in run.samples:
            by_role.setdefault(s.role, {}).setdefault(s.t, 0.0)
            by_role[s.role][s.t] += s.cpu_percent
        for role, series in sorted(by_role.items()):
            ts = sorted(series)
            ax.plot([t - t0 for t in ts], [series[t] for t in ts], label=role, lw=1)
        rounds = sorted({(s.t, s.machine_cpu) for s in run.samples})
        ax.plot([t - t0 for t, _ in rounds], [m * run.cores for _, m in rounds], color="black",
                lw=1.5, ls="--", label="whole machine")  # fmt: skip
        followed: dict[float, float] = {}
        for s in run.samples:
            followed[s.t] = followed.get(s.t, 0.0) + s.cpu_percent
        ax.plot([t - t0 for t, _ in rounds],
                [max(0.0, m * run.cores - followed.get(t, 0.0)) for t, m in rounds],
                color="grey", lw=1, ls=":", label="other processes")  # fmt: skip
        ax.axhline(100 * run.cores, color="grey", lw=0.6)
        for step in run.steps:
            ax.axvline(step["started_at"] - t0, color="grey", lw=0.3)
        ax.set_title(f"{run.replicas} replica(s): CPU by role (% of one core; {run.cores} cores = {100 * run.cores}%)", fontsize=9)
        ax.set_ylabel("CPU %")
        ax.grid(alpha=0.3)
        ax.set_ylim(0, 100 * run.cores * 1.35)  # headroom for the legend above the lines
        ax.legend(fontsize=7, ncol=4, loc="upper left")
    axes[-1][0].set_xlabel("seconds since sampling began (thin lines: ladder steps)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


# --- markdown -------------------------------------------------------------------------------


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


def write_figures(run: Run) -> dict[str, Any]:
    """Master write path against direct etcd, from the submit-only ladder and the etcd bench."""
    etcd = run.record["phases"].get("etcd_direct")
    if not etcd or not run.submit:
        return {}
    clients = etcd["clients"]
    steps = run.submit.get("steps", [])
    same = next((s for s in steps if s["users"] == clients), steps[0] if steps else None)
    best = best_within(steps, None, WRITE_P99_MS)
    top = max(steps, key=lambda s: s["rps"]) if steps else None
    alone = (run.submit0 or {}).get("steps", [])
    alone_step = alone[0] if alone else None
    return {
        "clients": clients,
        "alone": alone_step,
        "alone_ratio": (alone_step["rps"] / etcd["txn"]["ops_per_s"])
        if alone_step and etcd["txn"]["ops_per_s"]
        else None,
        "etcd_txn": etcd["txn"]["ops_per_s"],
        "etcd_put": etcd["put"]["ops_per_s"],
        "etcd_txn_p99": etcd["txn"]["p99_ms"],
        "master_same": same,
        "ratio": (same["rps"] / etcd["txn"]["ops_per_s"]) if same and etcd["txn"]["ops_per_s"] else None,
        "best": best,
        "top": top,
    }


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
        f"or the maximum of {ladder.get('rules', {}).get('max_users', '?')} users.",
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


THROTTLED_SHARE = 0.1  # tasks throttled in this share of CFS periods are held by their quota


def throttled_share(run: Run) -> float | None:
    counters = (run.record.get("task_throttling") or {}).values()
    periods = sum(c["nr_periods"] for c in counters)
    return sum(c["nr_throttled"] for c in counters) / periods if periods else None


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
