"""Wall time of every everyday `minborg` command against a live cell, each run N times in fresh processes, beside `python -c pass`.

    minborg bench cli [--runs 10] [--start-cell | --master URL] [--job USER/NAME] [--before DIR] [--json]
    (or python -m loadtests.cli_startup ...)

Runs `python -c pass` (the interpreter's own start-up, the baseline), `minborg --help`,
`--version`, `cell status`, `job list|show|update`, `job submit --detach` then `job kill` of a
second job, `job submit --dry-run`, `job run` of a third job's file (the first run creates the
job and waits for its task; every measured one finds it unchanged) and `job plan` of it, `task list|show|logs`,
`machine list`, `events` and `bns resolve`, one after another, `--runs` times each (interleaved, so a burst of load on the
machine hits all alike), each in a new process, and prints each one's median and p90 and its
median over the baseline's, and beside them its median CPU (user + system: the command's own
work, which a load on the machine does not inflate) over the baseline's. The target of every everyday command: a median under 0.3 s and
within 3 times the baseline's, measured in the same run.

Every command runs as `python -c "from reference.cli.fast import main; main()" ARGS` (what
the `minborg` script runs) in the source tree it measures: this one, and with `--before DIR`
also the tree in DIR (e.g. `git worktree add /tmp/before HEAD~3`), interleaved with it, so
before and after are measured in one run under the same load. `--start-cell` starts a
1-replica local cell with one machine and a job of two tasks for it; otherwise the cell is
found as the command finds it (--master, $MINBORG_MASTER, or the local cell file).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.stats import percentile

TARGET_S = 0.3
TARGET_RATIO = 3.0
BASELINE = "python -c pass"
REPO = Path(__file__).resolve().parents[1]
# Commands measured but not held to the target (none now: `job submit --dry-run`, the last
# command here the full command line answered, is on the fast path too).
NOT_EVERYDAY: tuple[str, ...] = ()


def job_file(user: str, name: str, directory: Path) -> Path:
    """A job file of one small task that sleeps, for `job submit` and `job run`: a Python the task's user may run."""
    from reference.borglet.taskusers import task_python

    path = directory / f"{name}.yaml"
    path.write_text(
        f"name: {name}\nuser: {user}\npriority: 100\ntask_count: 1\nrequest: {{cpu: 10m, ram: 64MiB}}\n"
        f"command: [{json.dumps(task_python())}, -c, 'import time; time.sleep(3600)']\n"
    )
    return path


def commands(job: str, cell: str, task_count: int, files: Path) -> dict[str, list[str]]:
    """The commands measured, by name: each one's arguments after `minborg`."""
    user, name = job.split("/", 1)
    other = job_file(user, f"{name}-k", files)
    declared = job_file(user, f"{name}-r", files)
    return {
        "minborg --help": ["--help"],
        "minborg --version": ["--version"],
        "minborg cell status": ["cell", "status"],
        "minborg job list": ["job", "list"],
        "minborg job show": ["job", "show", job],
        "minborg job update --tasks": ["job", "update", job, "--tasks", str(task_count)],
        "minborg job submit --detach": ["job", "submit", "--detach", str(other)],
        "minborg job kill": ["job", "kill", f"{user}/{name}-k"],
        "minborg job submit --dry-run": ["job", "submit", "--dry-run", str(other)],
        "minborg job run": ["job", "run", str(declared)],
        "minborg job plan": ["job", "plan", str(declared)],  # after `job run`: "unchanged", exit 0
        "minborg task list": ["task", "list", job],
        "minborg task show": ["task", "show", job, "0"],
        "minborg task logs": ["task", "logs", job, "0"],
        "minborg machine list": ["machine", "list"],
        "minborg events": ["events"],
        "minborg bns resolve": ["bns", "resolve", f"0.{name}.{user}.{cell}.minborg"],
    }


def argv_in(tree: Path, args: list[str]) -> list[str]:
    module = "reference.cli.fast" if (tree / "reference" / "cli" / "fast.py").exists() else "reference.cli_fast"
    return [sys.executable, "-c", f"from {module} import main; main()", *args]


Times = dict[tuple[str, str], list[tuple[float, float]]]  # (tree, command) -> (wall s, CPU s) of each run


def measure(runs: int, trees: dict[str, Path], named: dict[str, list[str]], env: dict[str, str]) -> Times:
    """Wall and CPU seconds of each (tree, command) in fresh processes, interleaved run by
    run. Stopped (Ctrl-C, SIGTERM), it returns the runs it completed."""
    times: Times = {}
    try:
        for _ in range(runs):
            measure_round(trees, named, env, times)
    except KeyboardInterrupt:
        done = min(len(ts) for ts in times.values()) if times else 0
        times = {k: ts[:done] for k, ts in times.items()}
        if not done:
            raise
    return times


def children_cpu() -> float:
    """User and system seconds of every child process reaped so far."""
    import resource

    used = resource.getrusage(resource.RUSAGE_CHILDREN)
    return used.ru_utime + used.ru_stime


def measure_round(trees: dict[str, Path], named: dict[str, list[str]], env: dict[str, str], times: Times) -> None:
    for tree_name, tree in trees.items():
        for name, args in [(BASELINE, None), *named.items()]:
            argv = [sys.executable, "-c", "pass"] if args is None else argv_in(tree, args)
            started, cpu = time.perf_counter(), children_cpu()
            done = subprocess.run(argv, env=env, cwd=tree, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, check=False)
            run = (time.perf_counter() - started, children_cpu() - cpu)
            times.setdefault((tree_name, name), []).append(run)
            if done.returncode != 0 and tree_name == "before":
                times[(tree_name, name)][-1] = (float("nan"), float("nan"))  # e.g. --version, which it lacked
            elif done.returncode != 0:
                raise SystemExit(f"{tree_name}: minborg {' '.join(args or [])} failed ({done.returncode}): "
                                 f"{done.stderr.decode()[-500:]}")  # fmt: skip


def start_cell(job: str, env: dict[str, str]) -> object:
    from reference.borglet.taskusers import task_python
    from reference.launcher.testcell import LocalCell, wait_for

    cell = LocalCell(Path(tempfile.mkdtemp(prefix="bench-cli-")), masters=1, borglets=1).start()
    user, name = job.split("/", 1)
    cell.submit({"name": name, "user": user, "priority": 100, "task_count": 2,
                 "request": {"cpu": "10m", "ram": "64MiB"},  # a Python's own start needs more than 8MiB
                 "command": [task_python(), "-c", "import time; time.sleep(3600)"]})  # fmt: skip
    wait_for(lambda: cell.running(user, name, 2), 30, "the bench job to run")
    env["MINBORG_MASTER"] = cell.masters[0].url
    env["MINBORG_TOKEN"] = cell.admin_token
    return cell


def main(argv: list[str] | None = None) -> int:
    import signal

    signal.signal(signal.SIGTERM, signal.default_int_handler)  # a timeout's SIGTERM: report the runs done
    p = argparse.ArgumentParser(prog="minborg bench cli", description=__doc__.split("\n\n")[0])
    p.add_argument("--runs", type=int, default=10, help="runs of each command (default 10)")
    p.add_argument("--master", default=None, help="a live cell's master URL(s)")
    p.add_argument("--start-cell", action="store_true", help="start a 1-replica local cell for the run")
    p.add_argument("--job", default="bench/cli", help="a running job whose task 0 the commands read (default bench/cli)")
    p.add_argument("--before", type=Path, default=None, help="also time the source tree in this directory, interleaved")
    p.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = p.parse_args(argv)
    if args.runs < 1:
        p.error("--runs must be at least 1")
    if "/" not in args.job:
        p.error("--job: USER/NAME")
    env = dict(os.environ)
    # Bytecode as an installed command has it: compiled once (the warm-up run) into a cache of
    # the run's own, whatever PYTHONDONTWRITEBYTECODE says; without it every run compiles
    # every module it imports from source, which measures the compiler, not the command.
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    pycache = tempfile.TemporaryDirectory(prefix="bench-cli-pycache-")
    env["PYTHONPYCACHEPREFIX"] = pycache.name
    cell = None
    trees = {"now": REPO}
    if args.before is not None:
        if not any((args.before / "reference" / f).exists() for f in ("cli/fast.py", "cli_fast.py")):
            p.error(f"--before: {args.before} holds no reference/cli/fast.py (nor the older reference/cli_fast.py)")
        trees["before"] = args.before.resolve()
    try:
        if args.start_cell:
            cell = start_cell(args.job, env)
        elif args.master:
            env["MINBORG_MASTER"] = args.master
        from reference.cellfile import ClientError, find_token, master_urls
        from reference.cli.http import PlainCell

        state_dir = env.get("MINBORG_STATE_DIR")
        if "MINBORG_STATE_DIR" in env:
            env["MINBORG_STATE_DIR"] = str(Path(state_dir).resolve())
        reader = PlainCell(master_urls(env.get("MINBORG_MASTER"), env.get("MINBORG_STATE_DIR")),
                           find_token(env.get("MINBORG_TOKEN"), env.get("MINBORG_STATE_DIR")))  # fmt: skip
        cell_name = reader.request("GET", "/v1/cell").get("cell", "local")
        task_count = reader.request("GET", f"/v1/jobs/{args.job}")["job"]["task_count"]
        for left in ("k", "r"):  # the second job, left by a run stopped between its submit and its kill; the third
            try:
                reader.request("DELETE", f"/v1/jobs/{args.job}-{left}")
            except ClientError:
                pass
        with tempfile.TemporaryDirectory(prefix="bench-cli-files-") as files:
            named = commands(args.job, cell_name, task_count, Path(files))
            measure(2, trees, named, env)  # compile the bytecode, warm the file cache; not counted
            times = measure(args.runs, trees, named, env)
            try:  # the third job, which `job run` made
                reader.request("DELETE", f"/v1/jobs/{args.job}-r")
            except ClientError:
                pass
    finally:
        if cell is not None:
            import shutil

            cell.stop()  # type: ignore[attr-defined]
            shutil.rmtree(cell.workdir, ignore_errors=True)  # type: ignore[attr-defined]  # etcd's data, the logs
        pycache.cleanup()
    return report(times, trees, args)


def report(times: Times, trees: dict[str, Path], args: argparse.Namespace) -> int:
    figures: dict[str, dict[str, dict[str, float | int | bool]]] = {}
    for (tree, name), runs in times.items():
        walls, cpus = [w for w, _ in runs], [c for _, c in runs]
        base = percentile([w for w, _ in times[(tree, BASELINE)]], 0.5) or 1e-9
        base_cpu = percentile([c for _, c in times[(tree, BASELINE)]], 0.5) or 1e-9
        if any(t != t for t in walls):  # nan: the command failed there
            figures.setdefault(tree, {})[name] = {"median_s": float("nan"), "p90_s": float("nan"), "runs": len(runs),
                                                  "ratio": float("nan"), "cpu_s": float("nan"), "cpu_ratio": float("nan"),
                                                  "everyday": False, "ok": False}  # fmt: skip
            continue
        median, cpu = percentile(walls, 0.5) or 0.0, percentile(cpus, 0.5) or 0.0
        everyday = name != BASELINE and not name.startswith(tuple(f"minborg {c}" for c in NOT_EVERYDAY))
        figures.setdefault(tree, {})[name] = {
            "median_s": round(median, 4), "p90_s": round(percentile(walls, 0.9) or 0.0, 4), "runs": len(runs),
            "ratio": round(median / base, 2), "everyday": everyday,
            # The command's own CPU (user + system) beside the interpreter's: what a load on the
            # machine does not change, where the wall time also holds the cell's processes' share.
            "cpu_s": round(cpu, 4), "cpu_ratio": round(cpu / base_cpu, 2),
            "ok": (median < TARGET_S and median / base <= TARGET_RATIO) if everyday else True,
        }  # fmt: skip
    load = os.getloadavg()[0]
    if args.json:
        print(json.dumps({"trees": {k: str(v) for k, v in trees.items()}, "figures": figures, "load_1m": load,
                          "cpus": os.cpu_count(), "runs": args.runs}, indent=2))  # fmt: skip
    else:
        print(f"{args.runs} runs each, fresh processes, {sys.executable}; load {load:.1f} on {os.cpu_count()} CPU(s); "
              f"target: median < {TARGET_S}s and <= {TARGET_RATIO:g}x `{BASELINE}`")  # fmt: skip
        head = f"  {'command':<30}  {'median':>7}  {'p90':>7}  {'x base':>6}  {'CPU':>6}  {'x base':>6}"
        if "before" in figures:
            head += f"  {'before':>7}  {'x base':>6}  {'CPU':>6}  {'x base':>6}"
        print(head)
        for name, f in figures["now"].items():
            line = (f"  {name:<30}  {f['median_s']:>6.3f}s  {f['p90_s']:>6.3f}s  {f['ratio']:>5.1f}x"
                    f"  {f['cpu_s']:>5.3f}s  {f['cpu_ratio']:>5.1f}x")  # fmt: skip
            if "before" in figures:
                b = figures["before"][name]
                line += (f"  {b['median_s']:>6.3f}s  {b['ratio']:>5.1f}x  {b['cpu_s']:>5.3f}s  {b['cpu_ratio']:>5.1f}x"
                         if b["median_s"] == b["median_s"] else f"  {'fails':>7}  {'-':>6}  {'-':>6}  {'-':>6}")  # fmt: skip
            verdict = "" if name == BASELINE else ("  ok" if f["ok"] else "  MISSED") if f["everyday"] else "  (full command line)"
            print(line + verdict)
    return 0 if all(f["ok"] for f in figures["now"].values()) else 1


if __name__ == "__main__":
    raise SystemExit(main())
