"""The maintenance campaign: a cell-wide rolling "OS upgrade" (drain, restart the borglet, uncordon, machine by machine) on a real local cell, with every job's tasks up sampled throughout.

    minborg campaign maintenance --out reports            # writes maintenance.md and maintenance.png

It starts a LocalCell (etcd, one master, `--machines` borglets), submits jobs of different
sizes and budgets (max_unavailable), waits until every task runs, then upgrades the machines
one at a time: `POST /v1/machines/{name}/drain`, wait until it is empty, stop its borglet and
start it again (the upgrade), wait until the master sees it up, `POST .../uncordon`. A sampler
reads every job's tasks through the API every `--sample-s` and counts the tasks up (RUNNING
and confirmed started by their borglet). The campaign fails (exit 1) if any sample shows a
job with more tasks down than its budget, and writes the report either way.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]


# --- what is counted -----------------------------------------------------------------------------


def tasks_up(tasks: Iterable[Mapping[str, Any]], task_count: int) -> int:
    """A job's tasks up, from its task list: indices below its count whose newest incarnation
    is RUNNING and confirmed started by its borglet (placed but not started is down)."""
    newest: dict[int, Mapping[str, Any]] = {}
    for t in tasks:
        i = int(t["index"])
        if i < task_count and (i not in newest or t["incarnation"] > newest[i]["incarnation"]):
            newest[i] = t
    return sum(1 for t in newest.values() if t["state"] == "RUNNING" and t.get("confirmed"))


@dataclass
class Samples:
    """Tasks up per job over time, and the phases (which machine was being upgraded when)."""

    jobs: dict[str, dict[str, int]]  # job key -> {"count": n, "budget": b}
    t0: float = field(default_factory=time.monotonic)
    at: list[float] = field(default_factory=list)
    up: dict[str, list[int]] = field(default_factory=dict)
    phases: list[tuple[float, float, str]] = field(default_factory=list)  # (from, to, what)

    def add(self, now: float, counts: Mapping[str, int]) -> None:
        self.at.append(now - self.t0)
        for job in self.jobs:
            self.up.setdefault(job, []).append(counts[job])

    def worst_down(self) -> dict[str, int]:
        """The most tasks each job had down at once in any sample."""
        return {job: max((self.jobs[job]["count"] - u for u in ups), default=0) for job, ups in self.up.items()}

    def over_budget(self) -> dict[str, int]:
        """The jobs that had more tasks down than their budget in some sample (job -> most down)."""
        return {job: down for job, down in self.worst_down().items() if down > self.jobs[job]["budget"]}


class Sampler:
    """A thread that reads each job's tasks every `every_s` and records the tasks up."""

    def __init__(self, read_tasks: Callable[[str], list[dict[str, Any]]], samples: Samples, every_s: float) -> None:
        self.read_tasks, self.samples, self.every_s = read_tasks, samples, every_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="maintenance-sampler", daemon=True)
        self.errors = 0

    def start(self) -> Sampler:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(10)

    def sample(self) -> None:
        counts = {job: tasks_up(self.read_tasks(job), spec["count"]) for job, spec in self.samples.jobs.items()}
        self.samples.add(time.monotonic(), counts)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.sample()
            except Exception:  # a read refused while the leader is busy: the next one counts
                self.errors += 1
            self._stop.wait(self.every_s)


# --- the campaign --------------------------------------------------------------------------------


def job_files(python: str) -> list[dict[str, Any]]:
    """Three services of different sizes and budgets: 6 tasks that may lose 2, 4 that may lose
    1, and 2 that may lose 1 (half of them)."""
    sleeper = [python, "-c", "import time; time.sleep(86400)"]
    base = {"user": "ops", "priority": "production", "request": {"cpu": "100m", "ram": "32MiB"},
            "command": sleeper, "restart_policy": "always"}  # fmt: skip
    return [
        {**base, "name": "frontend", "task_count": 6, "max_unavailable": 2},
        {**base, "name": "api", "task_count": 4, "max_unavailable": 1},
        {**base, "name": "db", "task_count": 2, "max_unavailable": 1},
    ]


def wait(what: str, ready: Callable[[], Any], timeout: float, every: float = 0.2) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            got = ready()
        except Exception:
            got = None
        if got:
            return got
        time.sleep(every)
    raise TimeoutError(f"{what}: not within {timeout:.0f}s")


def machine_view(cell: Any, name: str) -> dict[str, Any]:
    return next(m for m in cell.get("/v1/machines")["machines"] if m["name"] == name)


def upgrade(cell: Any, proc: Any, samples: Samples, timeout: float) -> dict[str, float]:
    """Drain one machine, restart its borglet, uncordon it; the seconds each step took."""
    name = proc.name
    took: dict[str, float] = {}
    t = time.monotonic()
    r = cell.request("POST", f"/v1/machines/{name}/drain", json={})
    r.raise_for_status()
    wait(f"{name} drained", lambda: (machine_view(cell, name).get("drain") or {}).get("state") == "drained", timeout)
    took["drain_s"] = time.monotonic() - t
    samples.phases.append((t - samples.t0, time.monotonic() - samples.t0, f"drain {name}"))
    t = time.monotonic()
    proc.stop(15)  # the upgrade: the machine's borglet goes away and comes back
    cell.restart(proc)
    wait(f"{name} up again", lambda: machine_view(cell, name)["state"] == "up", timeout)
    took["restart_s"] = time.monotonic() - t
    samples.phases.append((t - samples.t0, time.monotonic() - samples.t0, f"restart {name}"))
    r = cell.request("POST", f"/v1/machines/{name}/uncordon")
    r.raise_for_status()
    return took


def run(args: argparse.Namespace) -> dict[str, Any]:
    from reference.borglet.taskusers import task_python
    from reference.launcher.testcell import LocalCell

    files = job_files(task_python())
    work = Path(tempfile.mkdtemp(prefix="maintenance-"))
    started = time.time()
    with LocalCell(work, masters=1, borglets=args.machines, capacity=args.capacity) as cell:
        cell.wait_leader(30)
        jobs = {}
        for f in files:
            r = cell.submit(f)
            r.raise_for_status()
            budget = int(r.json()["job"].get("max_unavailable", 1))
            jobs[f"{f['user']}/{f['name']}"] = {"count": f["task_count"], "budget": budget}
        samples = Samples(jobs)

        def read(job: str) -> list[dict[str, Any]]:
            return cell.get(f"/v1/jobs/{job}/tasks")["tasks"]

        sampler = Sampler(read, samples, args.sample_s)
        wait("every task started", lambda: all(tasks_up(read(j), s["count"]) == s["count"] for j, s in jobs.items()), 120)
        sampler.start()
        time.sleep(args.settle_s)
        steps = {}
        for proc in list(cell.borglets):
            steps[proc.name] = upgrade(cell, proc, samples, args.timeout_s)
            time.sleep(args.settle_s)
        sampler.stop()
        placement = {m["name"]: len(m["tasks"]) for m in cell.get("/v1/machines")["machines"]}
    return {
        "started": started, "machines": args.machines, "capacity": args.capacity, "jobs": jobs,
        "samples": samples, "steps": steps, "read_errors": sampler.errors, "placement": placement,
    }  # fmt: skip


# --- the report ----------------------------------------------------------------------------------


def plot(samples: Samples, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    jobs = list(samples.jobs)
    fig, axes = plt.subplots(len(jobs), 1, figsize=(10, 2.2 * len(jobs) + 0.8), sharex=True, squeeze=False)
    for ax, job in zip(axes[:, 0], jobs, strict=True):
        spec = samples.jobs[job]
        ax.step(samples.at, samples.up[job], where="post", color="tab:blue", label="tasks up")
        ax.axhline(spec["count"] - spec["budget"], color="tab:red", linestyle="--",
                   label=f"count - max_unavailable = {spec['count'] - spec['budget']}")  # fmt: skip
        for lo, hi, what in samples.phases:
            ax.axvspan(lo, hi, color="tab:orange" if what.startswith("drain") else "tab:gray", alpha=0.15, lw=0)
        ax.set_ylim(-0.2, spec["count"] + 0.5)
        ax.set_ylabel("up")
        ax.set_title(f"{job}: {spec['count']} tasks, max_unavailable {spec['budget']}", fontsize=10, loc="left")
        ax.legend(loc="lower right", fontsize=8)
        ax.grid(alpha=0.3)
    axes[-1, 0].set_xlabel("seconds (orange: a machine drains; grey: its borglet restarts)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def report(result: dict[str, Any], png: Path, command: str) -> str:
    samples: Samples = result["samples"]
    worst = samples.worst_down()
    over = samples.over_budget()
    rows = ["| job | tasks | max_unavailable | least up | most down at once | within budget |", "|---|---|---|---|---|---|"]
    for job, spec in samples.jobs.items():
        least = min(samples.up[job], default=0)
        rows.append(f"| {job} | {spec['count']} | {spec['budget']} | {least} | {worst[job]} | {'yes' if job not in over else 'NO'} |")
    steps = ["| machine | drain (s) | borglet restart (s) |", "|---|---|---|"]
    steps += [f"| {m} | {s['drain_s']:.1f} | {s['restart_s']:.1f} |" for m, s in result["steps"].items()]
    span = samples.at[-1] if samples.at else 0.0
    return "\n".join([
        "# Maintenance: a rolling OS upgrade within each job's budget",
        "",
        f"Measured {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime(result['started']))} with `{command}`: a local cell "
        f"(etcd, one master, {result['machines']} borglets of {result['capacity']}), three services, and each machine in turn "
        "drained (`POST /v1/machines/{name}/drain`), its borglet stopped and started again, and uncordoned. "
        f"{len(samples.at)} samples over {span:.0f} s, each reading every job's tasks through the API; a task is up when "
        f"it is RUNNING and its borglet confirmed it started ({result['read_errors']} reads failed and were skipped).",
        "",
        "**Verdict: " + ("no job ever had more tasks down than its max_unavailable.**" if not over else
                         f"over budget: {', '.join(f'{j} ({d} down)' for j, d in over.items())}.**"),
        "",
        *rows,
        "",
        f"![tasks up per job over time]({png.name})",
        "",
        "Each machine's steps:",
        "",
        *steps,
        "",
        "How the drain keeps the budget (reference/master/drain.py): the leader moves a task off a drained "
        "machine only while fewer of its job's tasks are down than the job's max_unavailable, and counts a "
        "moved task down until its replacement's borglet confirms it started elsewhere. A job of budget 1 "
        "therefore moves one task at a time and a job of budget 2 two, which is what sets each drain's length. "
        f"Tasks per machine at the end: {', '.join(f'{m} {n}' for m, n in sorted(result['placement'].items()))} "
        "(tasks do not move back onto an uncordoned machine by themselves, so the last machine upgraded ends empty).",
        "",
    ])  # fmt: skip


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="minborg campaign maintenance", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
    p.add_argument("--out", type=Path, default=REPO / "reports", help="where maintenance.md and maintenance.png go")
    p.add_argument("--machines", type=int, default=4)
    p.add_argument("--capacity", default="cpu=2000m,ram=2GiB")
    p.add_argument("--sample-s", type=float, default=0.2, help="seconds between samples")
    p.add_argument("--settle-s", type=float, default=2.0, help="seconds between machines")
    p.add_argument("--timeout-s", type=float, default=120.0, help="the longest one step may take")
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.machines < 2:
        print("--machines: at least 2 (a drained machine's tasks need somewhere to go)", file=sys.stderr)
        return 2
    result = run(args)
    args.out.mkdir(parents=True, exist_ok=True)
    png = args.out / "maintenance.png"
    plot(result["samples"], png)
    command = "minborg campaign maintenance " + " ".join(argv if argv is not None else sys.argv[1:])
    (args.out / "maintenance.md").write_text(report(result, png, command.strip()))
    samples: Samples = result["samples"]
    summary = {"worst_down": samples.worst_down(), "over_budget": samples.over_budget(), "samples": len(samples.at)}
    print(json.dumps(summary))
    return 1 if samples.over_budget() else 0


if __name__ == "__main__":
    sys.exit(main())
