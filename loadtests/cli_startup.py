"""Start-up time of the `minborg` command: each command run N times in fresh processes against a live cell.

    minborg bench cli [--runs 20] [--start-cell | --master URL] [--job USER/NAME] [--json]
    (or python -m loadtests.cli_startup ...)

Runs `minborg --help`, `minborg job list` and `minborg task list JOB` one after another,
`--runs` times each (interleaved, so a burst of load on the machine hits all three alike),
each in a new process through the installed `minborg` script, and prints the median and p90
wall time of each. `--start-cell` starts a 1-replica local cell with one machine and a job of
two tasks for it; otherwise the cell is found as the command finds it (--master,
$MINBORG_MASTER, or the local cell file).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.stats import percentile

TARGET_S = 0.3


def minborg() -> list[str]:
    """The console script beside this Python (a venv's bin/, not a version manager's shim,
    which adds its own start-up), else the one on PATH."""
    beside = Path(sys.executable).parent / "minborg"
    found = str(beside) if beside.exists() else shutil.which("minborg")
    return [found] if found else [sys.executable, "-c", "from reference.cli_fast import main; main()"]


def measure(commands: dict[str, list[str]], runs: int, env: dict[str, str]) -> dict[str, list[float]]:
    times: dict[str, list[float]] = {name: [] for name in commands}
    for _ in range(runs):
        for name, argv in commands.items():
            started = time.perf_counter()
            done = subprocess.run(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, check=False)
            times[name].append(time.perf_counter() - started)
            if done.returncode != 0:
                raise SystemExit(f"{' '.join(argv)} failed ({done.returncode}): {done.stderr.decode()[-500:]}")
    return times


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="minborg bench cli", description=__doc__.split("\n\n")[0])
    p.add_argument("--runs", type=int, default=20, help="runs of each command (default 20)")
    p.add_argument("--master", default=None, help="a live cell's master URL(s)")
    p.add_argument("--start-cell", action="store_true", help="start a 1-replica local cell for the run")
    p.add_argument("--job", default="bench/cli", help="the job whose tasks `task list` lists")
    p.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = p.parse_args(argv)
    if args.runs < 1:
        p.error("--runs must be at least 1")
    env = dict(os.environ)
    cell = None
    try:
        if args.start_cell:
            from reference.launcher.testcell import LocalCell, wait_for

            cell = LocalCell(Path(tempfile.mkdtemp(prefix="bench-cli-")), masters=1, borglets=1).start()
            user, name = args.job.split("/", 1)
            job = {"name": name, "user": user, "priority": 100, "task_count": 2,
                   "request": {"cpu": "10m", "ram": "8MiB"},
                   "command": [sys.executable, "-c", "import time; time.sleep(3600)"]}  # fmt: skip
            cell.submit(job)
            wait_for(lambda: cell.running(user, name, 2), 30, "the bench job to run")
            env["MINBORG_MASTER"] = cell.masters[0].url
            env["MINBORG_TOKEN"] = cell.admin_token
        elif args.master:
            env["MINBORG_MASTER"] = args.master
        base = minborg()
        commands = {
            "minborg --help": [*base, "--help"],
            "minborg job list": [*base, "job", "list"],
            f"minborg task list {args.job}": [*base, "task", "list", args.job],
        }
        measure(commands, 1, env)  # warm the file cache; not counted
        times = measure(commands, args.runs, env)
    finally:
        if cell is not None:
            cell.stop()
    figures = {
        name: {"median_s": round(percentile(ts, 0.5), 4), "p90_s": round(percentile(ts, 0.9), 4), "runs": len(ts)}
        for name, ts in times.items()
    }
    load = os.getloadavg()[0]
    if args.json:
        print(json.dumps({"commands": figures, "load_1m": load, "cpus": os.cpu_count()}, indent=2))
    else:
        print(f"{args.runs} runs each of {base[0]}, fresh processes; machine load {load:.1f} on {os.cpu_count()} CPU(s)")
        for name, f in figures.items():
            verdict = "ok" if f["median_s"] < TARGET_S else f"over {TARGET_S}s"
            print(f"  {name:<32} median {f['median_s']:.3f}s  p90 {f['p90_s']:.3f}s  ({verdict})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
