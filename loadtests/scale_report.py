"""reports/scale.md and its plots from a scale campaign's results.json: polling interval by cell size per replica count, tasks started per minute, CPU per role, and the largest cell meeting Borg's SLOs."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")  # no display: files only
import matplotlib.pyplot as plt  # noqa: E402

from loadtests.scale_results import (  # noqa: E402
    ARRIVAL_PER_MIN,
    CONFIRM_S,
    SLO_POLL_P95_S,
    SLO_READ_P99_S,
    Result,
    failures,
    largest_meeting,
    load,
)

COMMAND = "minborg campaign scale"


def _by_replicas(results: list[Result]) -> dict[int, list[Result]]:
    out: dict[int, list[Result]] = {}
    for r in sorted(results, key=lambda r: (r.replicas, r.machines)):
        out.setdefault(r.replicas, []).append(r)
    return out


def _plot_by_size(
    results: list[Result], path: Path, value: Callable[[Result], float | None], line: tuple[float, str],
    ylabel: str, title: str, log_y: bool,
) -> None:  # fmt: skip
    """One line per replica count of `value` by cell size, with a red dashed `line` (y, label)."""
    fig, ax = plt.subplots(figsize=(7, 4.2))
    for replicas, runs in _by_replicas(results).items():
        points = [(r.machines, v) for r in runs if (v := value(r)) is not None]
        ax.plot([x for x, _ in points], [y for _, y in points], marker="o", label=f"{replicas} replica(s)")
    ax.axhline(line[0], color="red", ls="--", label=line[1])
    ax.set_xscale("log")
    if log_y:
        ax.set_yscale("log")
    ax.set_xlim(50, 20_000)
    ax.set_xlabel("hollow machines in the cell")
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def plot_polling(results: list[Result], path: Path) -> None:
    _plot_by_size(
        results, path, lambda r: r.poll.get("p95"), (SLO_POLL_P95_S, f"Borg's SLO: p95 < {SLO_POLL_P95_S:.0f} s"),
        "borglet polling interval p95 (s)", "Polling interval by cell size", log_y=True,
    )  # fmt: skip


def plot_started(results: list[Result], path: Path) -> None:
    _plot_by_size(
        results, path, lambda r: r.confirmed_per_min, (10_000, "target: 10,000 tasks/min"),
        "arrivals confirmed started per minute", "Scheduling and start throughput under steady arrivals", log_y=False,
    )  # fmt: skip


def plot_cpu(results: list[Result], path: Path) -> None:
    roles = ["leader", "followers", "scheduler", "etcd", "hollow"]
    runs = sorted(results, key=lambda r: (r.machines, r.replicas))
    fig, ax = plt.subplots(figsize=(max(7, 0.7 * len(runs) + 2), 4.2))
    bottom = [0.0] * len(runs)
    for role in roles:
        values = [r.cpu.get(role, 0.0) for r in runs]
        ax.bar(range(len(runs)), values, bottom=bottom, label=role)
        bottom = [b + v for b, v in zip(bottom, values, strict=True)]
    ax.set_xticks(range(len(runs)), [f"{r.machines}\n{r.replicas}r" for r in runs], fontsize=8)
    ax.set_ylabel("cores used during the window")
    ax.set_title("CPU per role (machines / replicas)")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _f(v: float | None, unit: str = "", digits: int = 2) -> str:
    return "-" if v is None else f"{v:.{digits}f}{unit}"


def write_report(results_paths: Path | list[Path], out: Path) -> Path:
    """reports/scale.md from one or more campaigns' results.json (one section each)."""
    paths = [results_paths] if isinstance(results_paths, Path) else list(results_paths)
    lines = [
        "# Scale: hollow cells of 1, 3 and 5 replicas against Borg's SLOs",
        "",
        f"This file: `python -m loadtests.scale_report {' '.join(str(p) for p in paths)} --out {out}`, "
        "from the campaigns named in each section.",
        "",
        f"SLOs (Verma et al. 2015, section 3.4): borglet polling interval p95 under {SLO_POLL_P95_S:.0f} s, "
        f"API read p99 under {SLO_READ_P99_S:.0f} s; every task that arrived in the window confirmed started within the "
        "wait after it (the cell kept up with the arrivals; not judged for older campaigns that did not count them); "
        "and the promises: the fill complete (each task index counted once), no task id started twice, no "
        "task index running twice at the end ('twice': ids / indices; '-': not counted by that campaign, whose fill "
        "counted processes, so a fill over its task count means indices running twice); 'down': how many times a "
        "master declared a machine down (none fails in these cells; '-': not counted). "
        "Machines are hollow borglets (simulated tasks, for scale tests only) served by one process; "
        "the masters, etcd, the scheduler process and the hollow process share one 2-core host. For each "
        "replica count the sizes are tried in order until one fails.",
        "",
        "How to read it: the polling interval is the time between two polls of one machine by the "
        "replica whose link shard owns it (the worst replica's p95 is the cell's); with more replicas "
        "each shard polls fewer machines. CPU is cores used during the measurement window: the leader "
        "includes its own shard; 'others' are the other replicas together (their shards and watch "
        "caches). 'started/min' counts arriving tasks that the hollow borglets confirmed running, "
        "not the API's word: the campaign waits up to `--confirm-s` after the window for every "
        "arriving job to run, then divides the tasks confirmed by the time from the first start to "
        "the last (never less than the time their submits took). A figure marked * is from an older "
        "campaign that counted only what had started within a few seconds of the window's end, "
        "over the window, which reads 0 when starts lag the window by more than that.",
        "",
    ]
    lines += across_campaigns(paths)
    lines += measured_cost(paths)
    lines += estimate(paths)
    for path in paths:
        lines += _section(path, out)
    out.write_text("\n".join(lines))
    return out


READS_ALL = "Readers call every replica in turn, the leader included."


def reads_of(config: dict[str, Any]) -> str:
    """Where a campaign's readers read: its `reads`; campaigns from before `--reads` read every
    replica in turn, which is `--reads all`."""
    return str(config.get("reads", "all"))
READS_FOLLOWERS = (
    "Readers call the replicas that do not lead (a 1-replica cell: its leader); the leader's own "
    "reads, from one more reader that calls only it, are shown in brackets and not judged."
)


def _leader_reads(r: Result) -> str:
    if r.leader_read_p99_s is None:
        return ""
    return f" (leader {_f(r.leader_read_p50_s, '', 3)} / {_f(r.leader_read_p99_s, '', 3)})"


def measured_cost(paths: list[Path], target: float = 1.5) -> list[str]:
    """The CPU each role spent per task filled (from /proc, over the fill), for every campaign
    that filled cells of more than one size with the same replica count: the cost per task at
    each size beside the smallest one's, the ratio issue 43 holds within `target`."""
    rows = []
    for path in paths:
        config, results = load(path)
        for replicas in sorted({r.replicas for r in results}):
            runs = sorted(
                (r for r in results if r.replicas == replicas and r.fill_cpu_ms_per_task.get("leader") and r.fill_s),
                key=lambda r: r.machines,
            )
            if len(runs) < 2:
                continue
            base = runs[0].fill_cpu_ms_per_task["leader"]
            settled_base = runs[0].settled_cpu_ms_per_task.get("leader")
            for r in runs:
                ms = r.fill_cpu_ms_per_task
                ratio = ms["leader"] / base
                verdict = "" if r is runs[0] else f" ({'within' if ratio <= target else 'over'} {target:g})"
                rows.append(
                    f"| `{config['out']}` | {config.get('replica_cpu') or 'none'} | {replicas} | {r.machines:,} | "
                    f"{r.fill_confirmed:,} in {r.fill_s:.0f} s | **{ms['leader']:.3f}** | {ratio:.2f}{verdict} | "
                    f"{_settled(r, settled_base, target, first=r is runs[0])} | "
                    f"{_idle_share(r)} | {_written(r)} | {_views(r)} | "
                    + " / ".join(f"{ms.get(k, 0.0):.3f}" for k in ("followers", "scheduler", "etcd", "hollow"))
                    + " |"
                )
    if not rows:
        return []
    return [
        "## The leader's CPU per task filled, measured",
        "",
        "CPU milliseconds each role spent per task over the fill (from /proc, whatever its budget), in "
        "campaigns that filled more than one size with one replica count (`--every-size` runs every size "
        "even past a miss). The ratio is the leader's cost per task at that size over its cost at the "
        f"campaign's smallest; issue 43 holds it within {target:g} from 1,000 to 10,000 machines, same budget, "
        "same run. A fill that takes longer also carries more of the leader's per-second work (its share of "
        "the polls' reports, the reservations it estimates every 5 s) per task. 'leader idle' is the cores the "
        "leader used with the machines up and no task, measured before the fill ('-': not measured), and the "
        "milliseconds per task that rate comes to over the fill's length: the part of the cost that the "
        "cell's size and the fill's length bring, not its tasks. 'records written' is the records the leader's "
        "committed txns wrote over the fill per task filled, and the txns per task ('-': not counted): a task's "
        "placement, its start, its usage and its reservations are each a write, and the writes a fill leaves "
        "behind (reservations estimated after it) count only where the fill lasts long enough to make them. "
        "'views' is the cell views the leader's watch cache built per task filled, and the map entries they "
        "copied whole per task ('-': not counted): a view copies each map that changed, so the copies grow "
        "with the cell. 'settled' is how long after the borglets ran the whole fill the leader's records "
        "said so too (its `running_confirmed`), and the leader's CPU per task and its ratio measured from the "
        "fill's start to then: the fill's whole cost to the leader, the records it had yet to write included "
        "('-': not waited for, before `settle_s` was measured).",
        "",
        "| campaign | cores per replica | replicas | machines | fill | leader ms/task | ratio to the smallest | "
        "settled: s after, leader ms/task, ratio | leader idle: cores, ms/task | records written, txns per task | views, entries copied per task | "
        "followers / scheduler / etcd / hollow ms/task |",
        "|---|---:|---:|---:|---|---:|---|---|---|---|---|---|",
        *rows,
        "",
    ]


def _settle(r: Result) -> str:
    """' (+N)': the seconds the leader took to confirm the fill after its borglets ran it."""
    if not r.settled_cpu_ms_per_task:
        return ""
    return f" (+{r.settle_s:.0f})" if r.settle_s is not None else " (+not in time)"


def _settled(r: Result, base: float | None, target: float, *, first: bool) -> str:
    """How long the leader took to confirm the fill after the borglets ran it, and its CPU per
    task to then beside the smallest size's ('-': not measured; 'not in time': never)."""
    ms = r.settled_cpu_ms_per_task.get("leader")
    if ms is None:
        return "-"
    when = f"{r.settle_s:.0f} s" if r.settle_s is not None else "not in time"
    if first or not base:
        return f"{when}, {ms:.3f}"
    ratio = ms / base
    return f"{when}, {ms:.3f}, {ratio:.2f} ({'within' if ratio <= target else 'over'} {target:g})"


def _idle_share(r: Result) -> str:
    """The leader's idle cores before the fill and what they come to per task over the fill."""
    idle = r.idle_cores.get("leader")
    if idle is None or not r.fill_s or not r.fill_confirmed:
        return "-"
    return f"{idle:.3f}, {1000 * idle * r.fill_s / r.fill_confirmed:.3f}"


def _written(r: Result) -> str:
    """The records the leader wrote per task over the fill, and the txns that wrote them."""
    work = r.fill_work_per_task
    if "records_written" not in work:
        return "-"
    return f"{work['records_written']:.2f}, {work.get('txns', 0.0):.3f}"


def _views(r: Result) -> str:
    """The views the leader's cache built per task over the fill, and the entries they copied."""
    work = r.fill_work_per_task
    if "views_built" not in work:
        return "-"
    return f"{work['views_built']:.3f}, {work.get('view_entries_copied', 0.0):,.0f}"


def estimate(paths: list[Path], machines: int = 10_000, host_cores: float = 2.0) -> list[str]:
    """What ran out first in the budgeted 5-replica runs that met the SLOs with reads on the
    followers, and what their figures, taken as linear in the cell's size, predict for a cell
    of `machines` machines (10 tasks each) with one host of `host_cores` per replica."""
    runs = []
    for path in paths:
        config, results = load(path)
        if reads_of(config) != "followers" or not config.get("replica_cpu"):
            continue
        # A cell of `machines` or more was measured, not estimated (`measured_cost`).
        runs += [(config, r) for r in results if r.replicas == 5 and not failures(r, arrivals=False) and r.fill_s
                 and r.machines < machines]  # fmt: skip
    if len(runs) < 2:
        return []
    runs.sort(key=lambda cr: cr[1].machines)
    # Lines through runs of one budget: the largest run's.
    budget = float(runs[-1][1].replica_cpu or 0)
    runs = [(c, r) for c, r in runs if r.replica_cpu == budget]
    (_, small), (c1, large) = runs[0], runs[-1]
    if large.machines == small.machines:
        return []
    saturated = [r.machines for _, r in runs if r.cpu.get("leader", 0) >= 0.95 * budget]
    # The leader's CPU per task written during the fill (its whole budget over the fill rate)...
    per_task = {r.machines: budget * (r.fill_s or 0) / r.fill_tasks for _, r in runs}
    slope = (per_task[large.machines] - per_task[small.machines]) / (large.machines - small.machines)
    at = per_task[large.machines] + slope * (machines - large.machines)
    fill_tasks = machines * large.fill_tasks // large.machines
    # ...and a follower's CPU, a base plus a cost per machine its shard polls.
    followers = {r.machines: r.cpu.get("followers", 0.0) / (r.replicas - 1) for _, r in runs}
    per_machine = (followers[large.machines] - followers[small.machines]) / ((large.machines - small.machines) / 5)
    base = followers[small.machines] - per_machine * small.machines / 5
    follower_then = base + per_machine * machines / 5
    interval = float(c1.get("poll_interval", 2.0))
    arrivals = float(c1.get("arrival_per_min", ARRIVAL_PER_MIN)) / 60.0
    return [
        "## What runs out first, and what the figures predict for 10,000 machines",
        "",
        f"From the 5-replica runs at {budget:g} cores per replica that met the polling and read SLOs with reads on the followers "
        f"({', '.join(f'{r.machines:,}' for _, r in runs)} machines; {small.machines:,} and {large.machines:,} "
        "anchor the lines below). Estimates, not measurements: each cost is taken as linear in the cell's size.",
        "",
        f"- **What ran out first: the leader's CPU.** It used at least 95% of its {budget:g} cores in the "
        f"window of every one of these runs ({', '.join(f'{m:,}' for m in saturated)} machines); the followers used "
        f"{min(followers.values()):.3f}-{max(followers.values()):.3f} cores each. The leader is the one writer, and "
        "its write path grows with the cell: the CPU it spent per task filled was "
        + ", ".join(f"{1000 * v:.2f} ms at {m:,} machines" for m, v in sorted(per_task.items()))
        + f" (its budget times the fill's time over the tasks filled), {1000 * slope * 1000:.2f} ms more per "
        "1,000 machines.",
        f"- **Polling is not what limits.** A follower's CPU was {base:.3f} cores plus {1000 * per_machine:.3f} "
        f"millicores per machine its shard polls every {interval:g} s. At {machines:,} machines, five shards of "
        f"{machines // 5:,}: about {follower_then:.2f} cores per replica, within one host of {host_cores:g} cores, so "
        "polling p95 should stay near the interval, and the followers that answer reads keep "
        f"{host_cores - follower_then:.1f} cores.",
        f"- **The writes are.** At {machines:,} machines the line gives {1000 * at:.1f} ms of leader CPU per task: "
        f"filling {fill_tasks:,} tasks takes about {fill_tasks * at / 60:.0f} core-minutes, "
        f"{fill_tasks * at / host_cores / 60:.0f} minutes on a {host_cores:g}-core host of its own, and the steady "
        f"arrival of {arrivals * 60:,.0f} tasks a minute needs about {arrivals * at:.1f} cores for its writes alone. "
        f"So the prediction for one {host_cores:g}-core host per replica: the polling and read SLOs hold, the "
        "fill is slow, and the arrival target is "
        + ("within reach." if arrivals * at < host_cores else "out of reach until the cost per task stops growing with the cell.")
        + f" Not run: at {budget:g} cores per replica the fill alone would take about "
        f"{fill_tasks * at / budget / 3600:.1f} hours.",
        "",
    ]


def across_campaigns(paths: list[Path]) -> list[str]:
    """One table over campaigns run alike (same CPU budget, tasks per machine and reads), where
    together they try more than one replica count: per replica count, the largest cell that met
    the SLOs in any of them and the smallest size tried above it that did not."""
    groups: dict[tuple[float | None, int, str], tuple[list[Result], list[str]]] = {}
    for path in paths:
        config, results = load(path)
        key = (config.get("replica_cpu"), config["tasks_per_machine"], reads_of(config))
        runs, names = groups.setdefault(key, ([], []))
        runs += results
        names.append(f"`{config['out']}`")
    rows = []
    for (budget, per_machine, reads), (runs, names) in groups.items():
        best = largest_meeting(runs)
        if len(best) < 2 or len(names) < 2:
            continue  # a single campaign's section says it all
        for replicas_n, b in best.items():
            missed = [r for r in runs if r.replicas == replicas_n and not r.slo_met]
            fails = sorted({r.machines for r in missed})
            above = [f"{m:,}" for m in fails if b["largest"] is None or m > b["largest"]]
            # A size that one run met and another missed is named too, so no miss goes unsaid.
            below = [f"{m:,} (another run met it)" for m in fails if b["largest"] is not None and m <= b["largest"]]
            first = b["first_failure"] or (failures(min(missed, key=lambda r: r.machines))[0] if missed else "-")
            rows.append(
                f"| {budget or 'none'} | {per_machine} | {reads} | {replicas_n} | "
                f"{b['largest'] if b['largest'] is not None else 'none'} | "
                f"{', '.join(above + below) or '-'} | {first} | {', '.join(names)} |"
            )
    if not rows:
        return []
    return [
        "## Across campaigns run alike",
        "",
        "Campaigns with the same CPU budget, tasks per machine and reads, taken together (their other "
        "settings, such as the fill's time bound, are in their sections). 'failed at': every size at "
        "which a run of that replica count missed the SLOs.",
        "",
        "| cores per replica | tasks per machine | reads | replicas | largest cell meeting the SLOs | failed at | "
        "what failed first (above the largest met, else at the smallest miss) | campaigns |",
        "|---:|---:|---|---:|---:|---|---|---|",
        *rows,
        "",
    ]


def _section(results_path: Path, out: Path) -> list[str]:
    config, results = load(results_path)
    name = results_path.parent.name
    figures = out.parent / "scale"
    figures.mkdir(parents=True, exist_ok=True)
    plot_polling(results, figures / f"{name}-polling.png")
    plot_started(results, figures / f"{name}-started.png")
    plot_cpu(results, figures / f"{name}-cpu.png")
    best = largest_meeting(results)
    budget = config.get("replica_cpu")
    machines = ",".join(str(m) for m in config["machines"])
    replicas = ",".join(str(r) for r in config["replicas"])
    command = (
        f"{COMMAND} --machines {machines} --replicas {replicas} --replica-cpu {budget or 0} "
        f"--tasks-per-machine {config['tasks_per_machine']} --measure-s {config['measure_s']:g} "
        f"--fill-timeout-s {config['fill_timeout_s']:g}"
        + (f" --arrival-per-min {config['arrival_per_min']}" if config.get("arrival_per_min", ARRIVAL_PER_MIN) != ARRIVAL_PER_MIN else "")
        + (f" --confirm-s {config['confirm_s']:g}" if config.get("confirm_s", CONFIRM_S) != CONFIRM_S else "")
        + (f" --poll-interval {config['poll_interval']:g}" if config.get("poll_interval", 2.0) != 2.0 else "")
        + (" --reads all" if reads_of(config) == "all" else "")
        + (" --every-size" if config.get("every_size") else "")
        + f" --out {config['out']}"
    )
    lines = [
        f"## {config['tasks_per_machine']} task(s) per machine (`{config['out']}`)",
        "",
        f"Produced by `{command}`"
        + (f" on commit {config['commit']}. " if config.get("commit") else ". ")
        + (f"**{budget} cores per replica** and for the scheduler process (a cgroup CPU quota each)"
           if budget else "No CPU budget per replica")
        + f"; poll interval {config['poll_interval']} s; arrivals {config['arrival_per_min']:,} tasks/min "
        f"for {config['measure_s']:.0f} s, in jobs of {config.get('arrival_job', 100)} tasks. "
        + (READS_ALL if reads_of(config) == "all" else READS_FOLLOWERS),
        "",
        "| replicas | largest cell meeting the SLOs | next size tried | what failed first there |",
        "|---:|---:|---:|---|",
    ]
    for replicas_n, b in best.items():
        lines.append(
            f"| {replicas_n} | {b['largest'] if b['largest'] is not None else 'none'} | "
            f"{b['failed_at'] if b['failed_at'] is not None else '-'} | {b['first_failure'] or '-'} |"
        )
    lines += [
        "",
        "| machines | replicas | up (s) | fill confirmed | fill (s) (+ until the leader confirmed it) | poll p50 / p95 / max (s) | read p50 / p99 (s) | "
        "write p50 / p99 (s) | started/min | start p50 / p95 (s) | CPU leader / others / scheduler / etcd / hollow "
        "(cores) | etcd db (MiB) | twice | down | verdict |",
        "|---:|---:|---:|---:|---:|---|---|---|---:|---|---|---:|---:|---:|---|",
    ]
    for r in sorted(results, key=lambda r: (r.machines, r.replicas)):
        cpu = " / ".join(_f(r.cpu.get(k)) for k in ("leader", "followers", "scheduler", "etcd", "hollow"))
        poll = " / ".join(_f(r.poll.get(k)) for k in ("p50", "p95", "max"))
        verdict = "meets" if r.slo_met else "; ".join(failures(r))
        lines.append(
            f"| {r.machines:,} | {r.replicas} | {r.up_s:.0f} | {r.fill_confirmed:,}/{r.fill_tasks:,} | {_f(r.fill_s, '', 0)}{_settle(r)} | "
            f"{poll} | {_f(r.read_p50_s, '', 3)} / {_f(r.read_p99_s, '', 3)}{_leader_reads(r)} | "
            f"{_f(r.write_p50_s, '', 3)} / {_f(r.write_p99_s, '', 3)} ({r.writes} ok, {r.write_errors} failed) | "
            f"{r.confirmed_per_min:,.0f}{'*' if r.arrivals_confirmed is None else ''} | {_f(r.start_latency_p50_s)} / {_f(r.start_latency_p95_s)} | {cpu} | "
            f"{r.etcd_db_bytes / 2**20:.1f} | {r.started_twice} / {'-' if r.index_twice is None else r.index_twice} | "
            f"{'-' if r.declared_down is None else r.declared_down} | {verdict} |"
        )
    lines += [
        "",
        f"![polling interval p95 by cell size](scale/{name}-polling.png)",
        "",
        f"![arrivals started per minute](scale/{name}-started.png)",
        "",
        f"![CPU per role](scale/{name}-cpu.png)",
        "",
    ]
    return lines


def main(argv: list[str] | None = None) -> None:
    import argparse

    p = argparse.ArgumentParser(description="reports/scale.md from scale campaigns' results.json files")
    p.add_argument("results", nargs="+", type=Path, help="results.json of each campaign, one section each")
    p.add_argument("--out", type=Path, default=Path("reports/scale.md"))
    args = p.parse_args(argv)
    print(write_report(args.results, args.out))


if __name__ == "__main__":
    main()
