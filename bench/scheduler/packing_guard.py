"""The packing guard: a few seeds of the packing experiment checked against a committed baseline.

    python -m bench.scheduler.packing_guard [--jobs 2]           # check: exit 1 on a drift
    python -m bench.scheduler.packing_guard --write --why "..."  # a new baseline, on purpose

The baseline (bench/packing_baseline.json) names what is run (pod lists, policies, seeds:
techniques on, the default config) and holds each policy's per-seed figures, their mean and
spread. A pass is deterministic for a seed, so the same code gives the same mean; the check
fails when a policy's mean unallocated share moves from the baseline's by more than its
tolerance: the baseline seeds' standard deviation, or `FLOOR` points where that is smaller.
It fails on a gain as on a loss, since either means the code now packs differently from what
the baseline records: a gain is committed as a new baseline, with its reason in `why` and in
the commit. The regression this guard was made after, a class's sample widened to the whole
cell (9858bb5), moved the default list's means by +0.80 (fgd), +0.77 (best_fit), +1.77
(borg_hybrid) and +2.84 (k8s_least_allocated) points over these 3 seeds: several times any
tolerance here (0.10 to 0.18).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from collections.abc import Mapping, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .packing_bench import TRACE, one_pass
from .trace import GPU_MACHINES

BASELINE = Path(__file__).resolve().parents[1] / "packing_baseline.json"
PODS = ("openb_pod_list_default.csv", "openb_pod_list_cpu050.csv")
POLICIES = ("fgd", "best_fit", "borg_hybrid", "k8s_least_allocated")
SEEDS = 3
FLOOR = 0.1  # points: the least drift that fails, where the seeds agree closer than that
TRACE_ENV = "MINBORG_OPENB_TRACE"  # a folder holding the openb pod and node lists


@dataclass(frozen=True)
class Drift:
    pods: str
    policy: str
    baseline: float
    measured: float
    tolerance: float

    def __str__(self) -> str:
        way = "worse" if self.measured > self.baseline else "better"
        return (
            f"{self.pods} {self.policy}: {self.measured:.3f}% unallocated against the baseline's "
            f"{self.baseline:.3f}% ({self.measured - self.baseline:+.3f} points, {way}; tolerance {self.tolerance:.3f})"
        )


def tolerance(seeds: Sequence[float], floor: float = FLOOR) -> float:
    """The drift a policy's mean may show: its seeds' standard deviation, at least `floor`."""
    return max(statistics.pstdev(seeds) if len(seeds) > 1 else 0.0, floor)


def drifts(baseline: Mapping[str, Any], measured: Mapping[str, Mapping[str, Sequence[float]]]) -> list[Drift]:
    """Every (pod list, policy) of the baseline whose measured mean is off by more than its tolerance.
    A pair the baseline names and the run lacks is a drift of its own (measured: NaN)."""
    out = []
    for pods, policies in baseline["figures"].items():
        for policy, base in policies.items():
            got = measured.get(pods, {}).get(policy)
            mean = statistics.mean(got) if got else float("nan")
            tol = tolerance(base["seeds"], baseline.get("floor", FLOOR))
            if not abs(mean - base["mean"]) <= tol:  # NaN fails too
                out.append(Drift(pods, policy, base["mean"], mean, tol))
    return out


def measure(folder: Path, pods: Sequence[str], policies: Sequence[str], seeds: int, jobs: int) -> dict[str, dict[str, list[float]]]:
    """Each policy's unallocated % per seed, techniques on, per pod list."""
    todo = [(str(folder / p), str(folder / GPU_MACHINES), n, "on", s) for p in pods for n in policies for s in range(seeds)]
    out: dict[str, dict[str, list[float]]] = {}
    with ProcessPoolExecutor(max_workers=max(1, jobs)) as pool:
        for r in pool.map(one_pass, *zip(*todo, strict=True)):
            out.setdefault(r["pods"], {}).setdefault(r["policy"], []).append(r["unallocated_pct"])
    return out


def baseline_of(measured: Mapping[str, Mapping[str, Sequence[float]]], seeds: int, why: str) -> dict[str, Any]:
    return {
        "why": why,
        "seeds": seeds,
        "floor": FLOOR,
        "figures": {
            pods: {
                policy: {"mean": round(statistics.mean(v), 4), "std": round(statistics.pstdev(v), 4), "seeds": list(v)}
                for policy, v in policies.items()
            }
            for pods, policies in measured.items()
        },
    }


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m bench.scheduler.packing_guard", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--baseline", type=Path, default=BASELINE)
    p.add_argument("--trace", type=Path, default=None,
                   help=f"the openb folder (default: ${TRACE_ENV}, else {TRACE} from the repository root)")
    p.add_argument("--jobs", type=int, default=2, help="passes run in parallel processes")
    p.add_argument("--write", action="store_true", help="measure and write a new baseline instead of checking")
    p.add_argument("--why", default="", help="with --write: why the baseline changes (kept in the file)")
    p.add_argument("--seeds", type=int, default=SEEDS, help="with --write: seeds 0..N-1 (a check runs the baseline's)")
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    root = Path(__file__).resolve().parents[2]
    folder = args.trace or Path(os.environ.get(TRACE_ENV) or root / TRACE)
    missing = [str(folder / f) for f in (*PODS, GPU_MACHINES) if not (folder / f).is_file()]
    if missing:
        print(f"packing guard: the openb trace is not there ({', '.join(missing)}); give --trace or ${TRACE_ENV}", file=sys.stderr)
        return 2
    start = time.perf_counter()
    if args.write:
        if not args.why:
            print("packing guard: --write needs --why (what changed the packing, and that it is meant)", file=sys.stderr)
            return 2
        measured = measure(folder, PODS, POLICIES, args.seeds, args.jobs)
        args.baseline.write_text(json.dumps(baseline_of(measured, args.seeds, args.why), indent=1) + "\n")
        print(f"wrote {args.baseline} in {time.perf_counter() - start:.0f} s")
        return 0
    baseline = json.loads(args.baseline.read_text())
    figures = baseline["figures"]
    measured = measure(folder, list(figures), sorted({n for v in figures.values() for n in v}), baseline["seeds"], args.jobs)
    for pods, policies in measured.items():
        for policy, v in policies.items():
            base = figures.get(pods, {}).get(policy)
            print(f"{pods} {policy}: {statistics.mean(v):.3f}% (baseline {base['mean']:.3f}%)" if base else f"{pods} {policy}: {statistics.mean(v):.3f}%")
    bad = drifts(baseline, measured)
    for d in bad:
        print(f"packing guard: {d}", file=sys.stderr)
    if bad:
        print(
            f"packing guard: {len(bad)} figure(s) moved from {args.baseline.name}. A regression is a bug to fix; a change "
            "meant to pack differently writes a new baseline (--write --why ...) and says why in its commit.",
            file=sys.stderr,
        )
        return 1
    print(f"packing guard: every figure within its tolerance of {args.baseline.name} ({time.perf_counter() - start:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
