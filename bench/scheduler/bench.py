"""The scheduler benchmark (shell): `python -m bench.scheduler.bench [--trace DIR] ... --json`."""

from __future__ import annotations

import argparse
import json
import resource
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from bench.stats import percentile
from reference.scheduler import SchedulerConfig, Snapshot, plan_pass
from reference.scheduler.policies import POLICY_NAMES

from .study import arrivals, busiest_moment, compaction, lower_bound
from .trace import DEFAULT_PODS, read_trace
from .workload import synthetic_cell


def peak_rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux reports KiB


def _latency_ms(latencies: list[float], q: float) -> float:
    """The q-th percentile of the per-task latencies in ms, 0.0 for a pass that timed none."""
    return round((percentile(latencies, q) or 0.0) * 1e3, 4)


def timed_pass(snap: Snapshot, cfg: SchedulerConfig, seed: int, limit: int | None = None) -> dict[str, Any]:
    start, cpu_start = time.perf_counter(), time.process_time()
    plan = plan_pass(snap, cfg, seed, clock=time.perf_counter, limit=limit)
    wall = time.perf_counter() - start
    cpu = time.process_time() - cpu_start  # on a shared machine the pass's own CPU time, beside the wall's
    st = plan.stats
    evicted = {p.victim for p in plan.preemptions}
    used = {t.machine for t in snap.running if t.id not in evicted} | {p.machine for p in plan.placements}
    return {
        "tasks": st.processed,
        "placed": len(plan.placements),
        "unschedulable": len(plan.unschedulable),
        "preemptions": len(plan.preemptions),
        "seconds": round(wall, 6),
        "tasks_per_second": round(st.processed / wall, 1) if wall else 0.0,
        "placements_per_second": round(len(plan.placements) / wall, 1) if wall else 0.0,
        "cpu_seconds": round(cpu, 6),
        "placements_per_cpu_second": round(len(plan.placements) / cpu, 1) if cpu else 0.0,
        "latency_ms_p50": _latency_ms(st.latencies, 0.50),
        "latency_ms_p99": _latency_ms(st.latencies, 0.99),
        "evaluations_per_task": round(st.evaluations / max(st.processed, 1), 1),
        "classes": st.classes,
        "machines_used": len(used),
    }


def config_from(args: argparse.Namespace) -> SchedulerConfig:
    return SchedulerConfig(
        policy=args.policy,
        equivalence_classes=not args.no_equivalence_classes,
        score_cache=not args.no_score_cache,
        relaxed_randomization=not args.no_relaxed_randomization,
    )


def synthetic(args: argparse.Namespace) -> dict[str, Any]:
    snap = synthetic_cell(args.machines, args.tasks, args.seed)
    cfg = config_from(args)
    # The same pass run `repeats` times: the figure is the run of median speed (the plans are identical).
    runs = sorted((timed_pass(snap, cfg, args.seed) for _ in range(max(args.repeats, 1))), key=lambda r: r["placements_per_second"])
    out: dict[str, Any] = {
        "workload": f"synthetic: {args.machines} machines, {args.tasks} pending tasks, seed {args.seed}",
        "config": {
            "policy": cfg.policy,
            "equivalence_classes": cfg.equivalence_classes,
            "score_cache": cfg.score_cache,
            "relaxed_randomization": cfg.relaxed_randomization,
        },
        "run": runs[len(runs) // 2],
        "peak_rss_mib": round(peak_rss_mib(), 1),
        "runs_placements_per_second": [r["placements_per_second"] for r in runs],
    }
    if args.ablation:
        n = args.ablation_sample
        on = replace(cfg, equivalence_classes=True, score_cache=True, relaxed_randomization=True)
        variants = {
            "all on": on,
            "no equivalence classes": replace(on, equivalence_classes=False),
            "no score cache": replace(on, score_cache=False),
            "no relaxed randomization": replace(on, relaxed_randomization=False),
            "all off": on.without_techniques(),
        }
        sample = {name: timed_pass(snap, c, args.seed, limit=n) for name, c in variants.items()}
        full_on = out["run"] if cfg == on else timed_pass(snap, on, args.seed)
        off_rate = sample["all off"]["tasks_per_second"]
        out["ablation"] = {
            "note": (
                f"every variant runs the first {n} tasks of the same ordered queue on the same "
                f"initial cell; 'all on' also runs all {args.tasks} tasks; rates are tasks per second"
            ),
            "sample_tasks": n,
            "sample": sample,
            "full_all_on_tasks_per_second": full_on["tasks_per_second"],
            "speedup_on_vs_off_same_sample": round(sample["all on"]["tasks_per_second"] / off_rate, 1),
            "speedup_full_on_vs_sample_off": round(full_on["tasks_per_second"] / off_rate, 1),
        }
    return out


def trace_study(args: argparse.Namespace) -> dict[str, Any]:
    machines, pods = read_trace(Path(args.trace), args.pods)
    when, live = busiest_moment(pods)
    bound = lower_bound(machines, live)
    seeds = list(range(args.seed, args.seed + args.compaction_seeds))
    policies = [args.policy] if args.only_policy else list(POLICY_NAMES)
    rows = {}
    for name in policies:
        cfg = SchedulerConfig(policy=name)
        arr = arrivals(machines, pods, cfg, args.seed)
        median, each = compaction(machines, live, cfg, seeds)
        rows[name] = {
            "placed_before_first_failure": arr.placed_before_first_failure,
            "placed_total": arr.placed_total,
            "allocation_at_first_failure": {k: round(v, 4) for k, v in arr.alloc_at_first_failure.items()},
            "allocation_at_saturation": {k: round(v, 4) for k, v in arr.alloc_at_end.items()},
            "compaction_machines_median": median,
            "compaction_machines_per_seed": each,
            "compaction_ratio_to_lower_bound": round(median / bound, 3) if bound and median is not None else None,
        }
    return {
        "workload": f"trace {args.trace}: {len(machines)} machines, {len(pods)} tasks in creation order",
        "busiest_moment": {"time_s": when, "tasks_alive": len(live), "lower_bound_machines": bound},
        "compaction_seeds": seeds,
        "policies": rows,
        "peak_rss_mib": round(peak_rss_mib(), 1),
    }


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="minborg bench scheduler", description=__doc__)
    p.add_argument("--machines", type=int, default=10000)
    p.add_argument("--tasks", type=int, default=100000)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--policy", default="borg_hybrid", choices=sorted(POLICY_NAMES))
    p.add_argument("--no-equivalence-classes", action="store_true")
    p.add_argument("--no-score-cache", action="store_true")
    p.add_argument("--no-relaxed-randomization", action="store_true")
    p.add_argument("--repeats", type=int, default=1, help="run the full pass this many times and report the median run")
    p.add_argument("--ablation", action="store_true", help="also compare all techniques on vs off")
    p.add_argument("--ablation-sample", type=int, default=2000, help="tasks timed per ablation variant")
    p.add_argument("--trace", help="the openb trace folder: run the policy study on it instead")
    p.add_argument("--pods", default=DEFAULT_PODS, help="the pod list: a file name in --trace or a path")
    p.add_argument("--compaction-seeds", type=int, default=5)
    p.add_argument("--only-policy", action="store_true", help="trace study of --policy alone")
    p.add_argument("--json", action="store_true")
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    result = trace_study(args) if args.trace else synthetic(args)
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        _print(result)
    return 0


def _print(d: dict[str, Any], indent: str = "") -> None:
    for k, v in d.items():
        if isinstance(v, dict):
            print(f"{indent}{k}:")
            _print(v, indent + "  ")
        else:
            print(f"{indent}{k}: {v}")


if __name__ == "__main__":
    sys.exit(main())
