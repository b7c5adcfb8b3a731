"""Runs one section-5 experiment and writes its report section and plot: `python3 -m bench.section5 EXPERIMENT`."""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from .compaction import NONPROD_SHARE, TRIALS
from .experiments import EXPERIMENTS
from .report import plot, relative, section, write_section
from .workload import OPENB_FOLDER, OPENB_PODS, machines_for, openb_workload, synthetic_workload

SYNTHETIC_TASKS = 2000


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python3 -m bench.section5", description=__doc__)
    p.add_argument("experiment", choices=sorted(EXPERIMENTS))
    p.add_argument("--workload", choices=("synthetic", "openb"), default="synthetic")
    p.add_argument("--trials", type=int, default=TRIALS, help="compaction trials, one seed each (default %(default)s)")
    p.add_argument("--tasks", type=int, default=SYNTHETIC_TASKS, help="synthetic workload: tasks (default %(default)s)")
    p.add_argument("--pods", type=int, default=OPENB_PODS, help="openb workload: pods sampled (default %(default)s)")
    p.add_argument("--trace", type=Path, default=OPENB_FOLDER, help="openb workload: the trace's folder")
    p.add_argument("--seed", type=int, default=0, help="the workload's seed (trials use seeds 0..trials-1)")
    p.add_argument("--report", type=Path, default=Path("reports/borg-section5.md"))
    p.add_argument("--plots", type=Path, default=Path("reports/section5"), help="plots and each run's results (JSON)")
    p.add_argument("--report-only", action="store_true", help="rewrite the section and plot from the last run's JSON")
    return p


def command_line(args: argparse.Namespace) -> str:
    size = f"--tasks {args.tasks}" if args.workload == "synthetic" else f"--pods {args.pods}"
    return f"python3 -m bench.section5 {args.experiment} --workload {args.workload} --trials {args.trials} {size} --seed {args.seed}"


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    if args.trials < 1 or args.tasks < 1 or args.pods < 1:
        print("--trials, --tasks and --pods must be at least 1", file=sys.stderr)
        return 2
    name = f"{args.experiment}-{args.workload}"
    png, saved = args.plots / f"{name}.png", args.plots / f"{name}.json"
    if args.report_only:
        if not saved.exists():
            print(f"{saved} does not exist: run the experiment without --report-only first", file=sys.stderr)
            return 2
        run = json.loads(saved.read_text())
    else:
        run = measure(args)
        saved.parent.mkdir(parents=True, exist_ok=True)
        saved.write_text(json.dumps(run, indent=1) + "\n")
    plot(args.experiment, args.workload, run["rows"], png)
    text = section(args.experiment, args.workload, run["rows"], run["about"], run["command"], relative(png, args.report.parent))
    write_section(args.report, name, text)
    print(text)
    return 0


def measure(args: argparse.Namespace) -> dict:
    """Runs the experiment: its rows, a paragraph on the workload, and the command that ran it."""
    if args.workload == "synthetic":
        work = synthetic_workload(args.tasks, args.seed)
        pool = machines_for(work, args.seed)
        source = f"synthetic, seed {args.seed}"
    else:
        pool, work = openb_workload(args.pods, args.seed, args.trace)
        source = f"{args.pods} pods sampled (seed {args.seed}) from {args.trace.name}"
    started = time.monotonic()
    rows = EXPERIMENTS[args.experiment](pool, work, args.trials)
    took = time.monotonic() - started
    prod = sum(w.prod for w in work)
    about = (
        f"Workload: {len(work)} tasks ({prod} prod) in {len({w.task.id.job for w in work})} jobs, {source}; "
        f"pool of {len(pool)} machines. {args.trials} trials; fits: every prod task and {NONPROD_SHARE:.0%} "
        f"of the non-prod requests placed. Took {took:.0f} s."
    )
    return {"rows": rows, "about": about, "command": command_line(args)}


if __name__ == "__main__":
    sys.exit(main())
