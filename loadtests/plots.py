"""The load report's PNGs drawn with matplotlib: throughput, reads, latency and CPU by role."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # no display: files only
import matplotlib.pyplot as plt  # noqa: E402

from loadtests.figures import READ_P99_MS  # noqa: E402
from loadtests.runs import Run, group  # noqa: E402


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
