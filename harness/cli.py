"""Command line of the conformance suite: `python -m harness` / `minborg conformance`."""

from __future__ import annotations

import argparse
import shlex
import signal
import sys
from collections.abc import Sequence

from harness.report import write_junit, write_markdown
from harness.runner import Plan, run

#: Full run and CI presets: (examples, steps per example).
FULL = (13, 120)
CI = (3, 60)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="minborg conformance", description="Judge a Minborg cell against the spec.")
    p.add_argument(
        "--target", help="master URL(s), comma separated, of a running cell (its token: $MINBORG_TOKEN)"
    )
    p.add_argument("--start-cell", action="store_true", help="start a local reference cell (always torn down)")
    p.add_argument("--replicas", type=int, default=1, choices=(1, 3, 5), help="master replicas of the started cell")
    p.add_argument("--examples", type=int, default=None, help=f"Hypothesis examples (default {FULL[0]}, --ci {CI[0]})")
    p.add_argument("--steps", type=int, default=None, help=f"steps per example (default {FULL[1]}, --ci {CI[1]})")
    p.add_argument("--ci", action="store_true", help="the short preset for CI")
    p.add_argument("--seed", type=int, default=None, help="Hypothesis seed: the same seed replays the same programs")
    p.add_argument("--replay", default=None, help="a failure blob printed by an earlier run (@reproduce_failure)")
    p.add_argument("--no-drains", action="store_true",
                   help="leave out the admin's drains: the drain and uncordon rules and the rolling maintenance (harness/drain_rules.py)")  # fmt: skip
    p.add_argument("--no-shrink", action="store_true", help="report the first failing program unshrunk (faster)")
    p.add_argument("--junit", default=None, help="write JUnit XML here")
    p.add_argument("--report", default="reports/conformance.md", help="write the Markdown report here")
    p.add_argument("--history", default=None, help="write the operation history (JSON lines) here")
    p.add_argument("--runtime", default="process", choices=("process", "docker"),
                   help="the started cell's borglet runtime; docker: every job names minborg/base and runs as a container")  # fmt: skip
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    # SIGTERM unwinds like ^C, so the started cell is always torn down.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    if not args.target and not args.start_cell:
        build_parser().error("give --target URL or --start-cell")
    examples, steps = CI if args.ci else FULL
    plan = Plan(
        target=args.target,
        replicas=args.replicas if args.start_cell else None,
        examples=args.examples or examples,
        steps=args.steps or steps,
        seed=args.seed,
        shrink=not args.no_shrink,
        replay=args.replay,
        history_path=args.history,
        runtime=args.runtime,
        drains=not args.no_drains,
    )
    result = run(plan)
    result.command = "python -m harness " + " ".join(map(shlex.quote, argv if argv is not None else sys.argv[1:]))
    if args.junit:
        write_junit(args.junit, result)
    if args.report:
        write_markdown(args.report, result)
    ok = result.failure is None and result.history_ok
    print(f"conformance: {'PASS' if ok else 'FAIL'} in {result.seconds:.0f}s; report {args.report}")
    if result.failure:
        # The finding on one line of its own, before anything long: what a CI log keeps.
        print("conformance finding:", " | ".join(result.failure.strip().splitlines()[:3])[:2000])
        print(result.failure)
    for d in result.history_details[:80]:
        print("history:", d)
    return 0 if ok else 1
