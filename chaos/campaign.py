"""Runs the chaos experiments (`chaos`) or the randomized soak (`soak`) and writes their reports.

python -m chaos.campaign chaos --out reports/chaos/<name> [--only 1,2]
python -m chaos.campaign soak --minutes 10 --seed S --out reports/chaos/soak
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from chaos import analysis, plot, report, runcell
from reference.launcher import CellInfo

EXPERIMENTS = Path(__file__).with_name("experiments")
CHAOS_TIMEOUT_S = 420  # one experiment's `chaos run`, rollbacks included


def experiment_files(only: set[int] | None = None) -> list[Path]:
    files = sorted(EXPERIMENTS.glob("[0-9][0-9]-*.json"))
    return [f for f in files if only is None or int(f.name[:2]) in only]


def chaos_cli() -> str:
    """The `chaos` command of this interpreter's environment (a tox venv), else PATH's."""
    beside = Path(sys.executable).with_name("chaos")
    found = str(beside) if beside.exists() else shutil.which("chaos")
    if not found:
        raise RuntimeError("the `chaos` command is missing: pip install chaostoolkit")
    return found


def judge(journal: dict[str, Any]) -> tuple[bool, list[str]]:
    """Pass only if the hypothesis held before and after and every activity succeeded:
    Chaos Toolkit exits 0 even when the hypothesis fails before the method runs."""
    reasons = []
    if journal.get("status") != "completed":
        reasons.append(f"status {journal.get('status')}")
    if journal.get("deviated"):
        reasons.append("deviated from the steady state")
    states = journal.get("steady_states") or {}
    for phase in ("before", "after"):
        met = (states.get(phase) or {}).get("steady_state_met")
        if met is not True:
            reasons.append(f"steady state {phase}: {met}")
    for run in journal.get("run", []):
        if run.get("status") != "succeeded":
            reasons.append(
                f"{run['activity']['name']}: {run.get('status')} {str(run.get('exception', ''))[-300:]}"
            )
    for run in journal.get("rollbacks", []):
        if run.get("status") != "succeeded":
            reasons.append(f"rollback {run['activity']['name']}: {run.get('status')}")
    return not reasons, reasons


def run_experiment(path: Path, out: Path) -> dict[str, Any]:
    slug = path.stem
    run = out / slug
    shutil.rmtree(run, ignore_errors=True)
    run.mkdir(parents=True)
    load_before = os.getloadavg()
    started = time.time()
    state_dir = runcell.up(slug)
    try:
        info = CellInfo.load(state_dir)
        env = {**os.environ, "MINBORG_STATE_DIR": state_dir, "CHAOS_RUN_DIR": str(run.resolve()),
               "TOXIPROXY_URL": info.toxiproxy_url or ""}  # fmt: skip
        project = Path(__file__).resolve().parent.parent
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(project), env.get("PYTHONPATH", "")]))
        command = [chaos_cli(), "--log-file", str(run / "chaostoolkit.log"), "run",
                   "--rollback-strategy=always", "--journal-path", str(run / "journal.json"), str(path)]  # fmt: skip
        try:
            proc = subprocess.run(command, env=env, cwd=project, capture_output=True, text=True,
                                  timeout=CHAOS_TIMEOUT_S)  # fmt: skip
            exit_code: int | None = proc.returncode
        except subprocess.TimeoutExpired:
            exit_code = None
        runcell.keep_logs(state_dir, run)
    finally:
        from chaos import load

        load.stop(str(run))
        runcell.down(state_dir)
        shutil.rmtree(state_dir, ignore_errors=True)
    journal_path = run / "journal.json"
    journal = json.loads(journal_path.read_text()) if journal_path.exists() else {}
    passed, reasons = judge(journal) if journal else (False, ["no journal.json"])
    figures = analysis.summarize(run)
    check = run / "check.json"
    result = {
        "experiment": slug, "title": journal.get("experiment", {}).get("title", slug),
        "passed": passed, "reasons": reasons, "chaos_exit_code": exit_code,
        "seconds": round(time.time() - started, 1), "loadavg_before": load_before,
        "loadavg_after": os.getloadavg(), "figures": figures,
        "check": json.loads(check.read_text()) if check.exists() else None,
    }  # fmt: skip
    plot.timeline(run, f"{slug}: {'PASS' if passed else 'FAIL'}", run / "timeline.png")
    (run / "result.json").write_text(json.dumps(result, indent=2, default=str))
    return result


def chaos_command(args: argparse.Namespace) -> int:
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    only = {int(x) for x in args.only.split(",")} if args.only else None
    results = []
    for path in experiment_files(only):
        print(f"== {path.stem}", flush=True)
        result = run_experiment(path, out)
        print(f"   {'PASS' if result['passed'] else 'FAIL'} in {result['seconds']}s "
              f"{'; '.join(result['reasons'])}", flush=True)  # fmt: skip
        results.append(result)
        report.write_chaos(out, results, "python -m chaos.campaign " + " ".join(sys.argv[1:]))
    return 0 if results and all(r["passed"] for r in results) else 1


def soak_command(args: argparse.Namespace) -> int:
    from chaos import soak

    if args.report_only:
        result = soak.rejudge(Path(args.out))
    else:
        result = soak.run(Path(args.out), minutes=args.minutes, seed=args.seed)
    command = f"python -m chaos.campaign soak --minutes {result['minutes']} --seed {result['seed']} --out {args.out}"
    if args.report_only:
        command += " (figures re-judged from its files with --report-only)"
    report.write_soak(Path(args.out), result, command)
    return 0 if result["passed"] else 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="minborg campaign", description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    c = sub.add_parser("chaos", help="run the Chaos Toolkit experiments")
    c.add_argument("--out", default="reports/chaos/latest")
    c.add_argument("--only", default=None, help="experiment numbers, e.g. 1,2")
    s = sub.add_parser(
        "soak", help="random faults every 10-20 s under load, then the history check"
    )
    s.add_argument("--minutes", type=float, default=10.0)
    s.add_argument("--seed", type=int, default=1)
    s.add_argument("--out", default="reports/chaos/soak")
    s.add_argument("--report-only", action="store_true", help="re-judge a finished soak's files")
    args = parser.parse_args(argv)
    return chaos_command(args) if args.command == "chaos" else soak_command(args)


if __name__ == "__main__":
    sys.exit(main())
