"""The load campaign runner: per replica count, a fresh cell, direct-etcd bench, Locust ladders, samples, report.

    python -m loadtests.campaign load --replicas 1,3,5 --target control-plane --out reports/load/control-plane
    python -m loadtests.campaign load --replicas 1,3,5 --target service --out reports/load/service
    python -m loadtests.campaign smoke --out /tmp/smoke     # 1 replica, low load, ~1 minute

Control plane: N master replicas and N etcd members, one machine running a 2-task
hello_world (so BNS names resolve). Before Locust, the cell's own etcd is written directly
through StoreClient (bench/store.py); then the mixed control-plane ladder; then
a reads-only ladder (the mix's reads with their weights, no writes, over a few jobs
submitted for it: the read path alone); then submit-only runs at the bench's concurrency:
jobs of no task (the master's write path alone), then a short ladder of one-task jobs that
stay pending (writes plus the leader's scheduling passes, which take the same writer).
Service: one master, one etcd, N hello_world tasks, called by ServiceUser.
Every cell process and Locust itself is sampled about once a second.
"""

from __future__ import annotations

import argparse
import json
import shutil
import signal
import sys
import tempfile
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from bench import store as store_bench
from loadtests import cell, locustrun, machine, report
from loadtests.history import count_5xx
from loadtests.jobs import read_job_keys
from loadtests.locustrun import Ladder, Target
from loadtests.sampler import Sampler, write_csv
from loadtests.sampler import Target as Watched
from reference.store.tls import StoreTLS

# Tasks of hello_world in the control-plane cell: enough for BNS resolutions to vary.
CONTROL_SERVICE_TASKS = 2
# Jobs submitted before the reads-only ladder, for its show and tasks reads.
READ_JOBS = 4
# Locust phases of a run directory, each with its own CSV prefix.
PHASES = ("ladder", "reads", "submit0", "submit")


def parse_replicas(text: str) -> list[int]:
    counts = [int(x) for x in text.split(",") if x.strip()]
    if not counts or any(n not in (1, 3, 5) for n in counts):
        raise argparse.ArgumentTypeError(f"replicas must be a list of 1, 3, 5; got {text!r}")
    return counts


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="minborg campaign", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
    sub = p.add_subparsers(dest="command", required=True)
    load = sub.add_parser("load", help="step-load ladders on fresh cells of 1, 3, 5 replicas")
    load.add_argument("--replicas", type=parse_replicas, default=[1, 3, 5])
    load.add_argument("--target", choices=[Target.CONTROL, Target.SERVICE], default=Target.CONTROL)
    load.add_argument("--out", type=Path, required=True, help="report directory")
    load.add_argument("--processes", type=int, default=2, help="Locust worker processes")
    load.add_argument("--replica-cpu", type=float, default=None,
                      help="hold each master replica and scheduler process to this many cores (cgroup quota)")  # fmt: skip
    load.add_argument("--step-start", type=int, default=2)
    load.add_argument("--step-users", type=int, default=4)
    load.add_argument("--max-users", type=int, default=62)
    load.add_argument("--step-seconds", type=float, default=12.0)
    load.add_argument("--slo-p95-ms", type=float, default=None,
                      help="p95 SLO of a step (default 250 control plane, 100 service)")  # fmt: skip
    load.add_argument("--cost-ms", type=float, default=2.0, help="service: CPU per request")
    load.add_argument("--etcd-seconds", type=float, default=5.0, help="direct etcd bench per case")
    load.add_argument("--write-clients", type=int, default=4,
                      help="concurrency of the direct etcd bench and the submit-only ladder's first step")  # fmt: skip
    load.add_argument("--reads-start", type=int, default=2, help="reads-only ladder: first step's users")
    load.add_argument("--reads-step", type=int, default=4, help="reads-only ladder: users added per step")
    load.add_argument("--reads-max-users", type=int, default=24, help="reads-only ladder: last step's users")
    load.add_argument("--reads-step-seconds", type=float, default=10.0, help="reads-only ladder: step length")
    smoke = sub.add_parser("smoke", help="1 replica, low load, about a minute; fails on any 5xx")
    smoke.add_argument("--out", type=Path, required=True)
    return p


def _terminated(signum: int, frame: object) -> None:
    # SIGTERM unwinds like ^C, so every `finally` stops its cell and its Locust.
    raise SystemExit(128 + signum)


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    signal.signal(signal.SIGTERM, _terminated)
    signal.signal(signal.SIGINT, signal.default_int_handler)  # even when started in background
    if args.command == "smoke":
        return smoke(args.out)
    args.write_phases = True
    slo = args.slo_p95_ms or (250.0 if args.target == Target.CONTROL else 100.0)
    ladder = Ladder(args.step_start, args.step_users, args.max_users, args.step_seconds, slo)
    args.reads_ladder = Ladder(args.reads_start, args.reads_step, args.reads_max_users,
                               args.reads_step_seconds, slo)  # fmt: skip
    args.out.mkdir(parents=True, exist_ok=True)
    for n in args.replicas:
        run_one(Target(args.target), n, ladder, args, args.out / f"r{n}")
    path = report.build(args.out)
    print(f"report: {path}")
    return 0


def say(msg: str) -> None:
    print(f"[campaign {time.strftime('%H:%M:%S')}] {msg}", flush=True)


def run_one(target: Target, n: int, ladder: Ladder, args: Any, out: Path) -> dict[str, Any]:
    """One replica count: fresh cell, measurements, samples, teardown; writes out/run.json."""
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    state_dir = Path(tempfile.mkdtemp(prefix=f"minborg-load-r{n}-"))
    before = machine.describe()
    say(f"{target} r{n}: starting a cell ({before['load_average']} load)")
    control = target == Target.CONTROL
    writes = control and args.write_phases  # the etcd bench and the submit-only runs
    reads: Ladder | None = args.reads_ladder if control else None
    replica_cpu = getattr(args, "replica_cpu", None)
    info = cell.start(state_dir, replicas=n if control else 1, replica_cpu=replica_cpu)
    record: dict[str, Any] = {"target": str(target), "replicas": n, "machine": before, "phases": {},
                              "replica_cpu": replica_cpu}  # fmt: skip
    locust_pids: list[int] = []
    try:
        tasks = CONTROL_SERVICE_TASKS if control else n
        record["endpoints"] = cell.run_service(info, tasks, locustrun.REPO)
        record["cell"] = {"masters": list(info.master_urls), "etcd": list(info.etcd_urls),
                          "service_tasks": tasks, **cell.limits(info)}  # fmt: skip
        env = {
            "LOADTEST_MASTERS": ",".join(info.master_urls),
            "LOADTEST_CELL": cell.CELL_NAME,
            "LOADTEST_SERVICE_JOB": cell.SERVICE_JOB,
            "LOADTEST_SERVICE_TASKS": str(tasks),
            "LOADTEST_COST_MS": f"{args.cost_ms:g}",
            **cell.locust_env(info),
        }
        sampler = Sampler(lambda: watched(info, locust_pids)).start()
        try:
            if writes:
                record["phases"]["etcd_direct"] = etcd_direct(
                    list(info.etcd_urls), args.etcd_seconds, args.write_clients, info.etcd_tls
                )
                say(f"r{n}: direct etcd {record['phases']['etcd_direct']}")
            throttled_before = cell.task_throttling(info)
            record["phases"]["ladder"] = phase(
                target, ladder, out / "ladder", env, args.processes, locust_pids
            )
            record["task_throttling"] = cell.throttling_delta(
                throttled_before, cell.task_throttling(info)
            )
            if reads is not None:
                # Before the submit-only runs, which leave thousands of jobs behind.
                keys = read_job_keys(READ_JOBS)
                cell.submit_jobs(info, keys)
                record["phases"]["reads"] = phase(
                    Target.READS, reads, out / "reads", {**env, "LOADTEST_READ_JOBS": ",".join(keys)},
                    args.processes, locust_pids,
                )  # fmt: skip
            if writes:
                # After the mixed ladder: submit-only users never kill their jobs, and the
                # ladder should not start on a cell holding thousands of their jobs.
                # First jobs of no task (the write path alone: nothing for the scheduler),
                # then one-task jobs that stay pending (writes and scheduling passes).
                alone = Ladder(args.write_clients, 1, args.write_clients, 8.0, ladder.slo_p95_ms)
                record["phases"]["submit0"] = phase(
                    Target.SUBMIT, alone, out / "submit0", {**env, "LOADTEST_SUBMIT_TASKS": "0"},
                    args.processes, locust_pids,
                )  # fmt: skip
                submit = Ladder(args.write_clients, args.write_clients, 3 * args.write_clients,
                                8.0, ladder.slo_p95_ms)  # fmt: skip
                record["phases"]["submit"] = phase(
                    Target.SUBMIT, submit, out / "submit", {**env, "LOADTEST_SUBMIT_TASKS": "1"},
                    args.processes, locust_pids,
                )  # fmt: skip
        finally:
            samples = sampler.stop()
            write_csv(samples, out / "samples.csv")
    finally:
        say(f"r{n}: stopping the cell")
        cell.stop(state_dir)
        shutil.rmtree(state_dir, ignore_errors=True)
    (out / "run.json").write_text(json.dumps(record, indent=2) + "\n")
    return record


def watched(info: Any, locust_pids: list[int]) -> Iterable[Watched]:
    import psutil

    targets = [Watched(p.role, p.name, p.pid) for p in cell.processes(info)]
    for pid in list(locust_pids):
        try:
            proc = psutil.Process(pid)
            kids = proc.children(recursive=True)
        except psutil.NoSuchProcess:
            continue
        targets.append(Watched("locust", "locust", pid))
        targets += [Watched("locust", f"locust-w{i}", k.pid) for i, k in enumerate(kids)]
    return targets


def etcd_direct(
    endpoints: list[str], seconds: float, clients: int, tls: StoreTLS | None = None
) -> dict[str, Any]:
    """bench/store.py's put and fenced-txn cases against the cell's own etcd."""
    started = time.time()
    results = store_bench.bench(endpoints, seconds, clients, tls)
    return {
        "clients": clients,
        "started_at": started,
        "ended_at": time.time(),
        **{
            r.name: {"ops_per_s": round(r.per_second, 1), "p50_ms": round(r.percentile_ms(0.5), 2),
                     "p99_ms": round(r.percentile_ms(0.99), 2), "ops": r.operations}
            for r in results
        },
    }  # fmt: skip


def phase(
    target: Target, ladder: Ladder, prefix: Path, env: dict[str, str], processes: int,
    locust_pids: list[int],
) -> dict[str, Any]:  # fmt: skip
    say(f"{target}: ladder {ladder.start}..{ladder.max_users} by {ladder.step}, "
        f"{ladder.step_seconds:g} s steps, p95 SLO {ladder.slo_p95_ms:g} ms")  # fmt: skip
    started = time.time()
    proc, shape, log = locustrun.start(target, ladder, prefix, env, processes)
    locust_pids.append(proc.pid)
    try:
        rc = locustrun.wait(proc, ladder.bound_s)
    except BaseException:
        locustrun.stop(proc)  # interrupted: Locust must not outlive the campaign
        raise
    finally:
        locust_pids.remove(proc.pid)
    result = {
        "target": str(target),
        "ladder": vars(ladder),
        "returncode": rc,
        "started_at": started,
        "ended_at": time.time(),
        "csv_prefix": prefix.name,
        "shape": shape.name,
        "log": log.name,
    }
    say(f"{target}: done in {result['ended_at'] - started:.0f} s (locust rc {rc})")
    return result


def smoke(out: Path) -> int:
    """1 replica, the control-plane mix at 2 then 4 users for 10 s each, then the reads alone
    at 2 users for 6 s (about a minute with the cell's start and stop); non-zero on any 5xx or
    missing stats."""
    args = argparse.Namespace(
        processes=1, cost_ms=0.0, write_phases=False, reads_ladder=Ladder(2, 2, 2, 6.0, 1000.0)
    )
    ladder = Ladder(2, 2, 4, 10.0, 1000.0)
    out.mkdir(parents=True, exist_ok=True)
    record = run_one(Target.CONTROL, 1, ladder, args, out / "r1")
    problems = []
    for name in ("ladder", "reads"):
        shape_path = out / "r1" / f"{name}_shape.json"
        stats = out / "r1" / f"{name}_stats.csv"
        if not stats.exists() or not shape_path.exists():
            problems.append(f"{name}: Locust wrote no stats")
            continue
        steps = json.loads(shape_path.read_text())["steps"]
        if not steps or not all(s["requests"] > 0 for s in steps):
            problems.append(f"{name}: a step without requests: {steps}")
    fivexx = sum(count_5xx(out / "r1" / f"{p}_failures.csv") for p in PHASES)
    if fivexx:
        problems.append(f"{fivexx} responses were 5xx")
    report.build(out)
    del record
    if problems:
        print("smoke campaign FAILED: " + "; ".join(problems), file=sys.stderr)
        return 1
    print(f"smoke campaign passed: report in {out / 'report.md'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
