"""The master's write path against direct etcd, measured again and again on fresh cells.

    minborg bench writes [--runs 3] [--users 4] [--seconds 15] [--store tls,plain] [--out DIR]
    (or python -m loadtests.writes ...)

Each run starts a fresh 1-replica cell, writes fenced txns straight to its etcd through
`StoreClient` (the client and txn shape the master uses, `--users` clients for 5 s), then
has `--users` Locust users submit jobs of no task through the master (the write path alone:
nothing for the scheduler to place) for `--seconds`, and prints both rates, their ratio, the
leader's writer groups, and the CPU of the master, etcd and the whole machine over the
submit run, and a watch's delay (one put at a time, to its event at a watch; 3 s).
`--store tls,plain` interleaves runs on cells whose etcd serves TLS with client certificates
(every cell's) and plain http (only here): what TLS costs the write path and the watch.
The campaign measures the same ratio once per cell; run-to-run spread on a
shared 2-core machine is wide (docs/decisions.md), so compare medians of several runs, and
interleave the variants being compared.
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import statistics
import tempfile
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import psutil

from bench import store as store_bench
from loadtests import cell, locustrun
from loadtests.locustrun import Ladder, Target

SLO_P95_MS = 250.0
TXNS = re.compile(r'^minborg_txns_total\{outcome="committed"\} (\S+)$', re.M)
JOBS = re.compile(r"^minborg_jobs (\S+)$", re.M)


@dataclass(frozen=True)
class Run:
    store: str  # "tls" or "plain": how the cell's etcd served its clients
    direct_txn_per_s: float
    master_submits_per_s: float
    master_p99_ms: float
    groups: int  # over the whole Locust run, start and stop included
    submissions: int
    master_cpu: float  # % of one core over the submit run
    etcd_cpu: float
    machine_busy: float  # % of all cores
    watch_p50_ms: float = 0.0
    watch_p99_ms: float = 0.0

    @property
    def ratio(self) -> float:
        return self.master_submits_per_s / self.direct_txn_per_s if self.direct_txn_per_s else 0.0

    def line(self) -> str:
        per_group = self.submissions / self.groups if self.groups else 0.0
        return (
            f"{self.store:<5} | direct {self.direct_txn_per_s:7.0f} txn/s | master {self.master_submits_per_s:5.0f} submits/s "
            f"(p99 {self.master_p99_ms:.0f} ms) = {100 * self.ratio:3.0f}% | "
            f"{per_group:.1f} per group | CPU: master {self.master_cpu:.0f}%, etcd {self.etcd_cpu:.0f}%, "
            f"machine {self.machine_busy:.0f}% of {psutil.cpu_count()} cores | "
            f"watch p50 {self.watch_p50_ms:.2f} ms, p99 {self.watch_p99_ms:.2f} ms"
        )


def _cpu_seconds(procs: list[psutil.Process]) -> float:
    total = 0.0
    for p in procs:
        try:
            t = p.cpu_times()
            total += t.user + t.system
        except psutil.NoSuchProcess:
            pass
    return total


def _busy(t: object) -> float:
    return sum(getattr(t, f, 0.0) for f in ("user", "system", "nice", "irq", "softirq", "steal"))


def counts(metrics_text: str) -> tuple[int, int]:
    """The leader's committed txns and the jobs in the cell, from its /metrics text."""
    txns, jobs = (TXNS.search(metrics_text), JOBS.search(metrics_text))
    return (int(float(txns.group(1))) if txns else 0, int(float(jobs.group(1))) if jobs else 0)


def _counts(url: str) -> tuple[int, int]:
    return counts(urllib.request.urlopen(f"{url}/metrics", timeout=5).read().decode())


def one(users: int, seconds: float, out: Path, store: str = "tls") -> Run:
    state = Path(tempfile.mkdtemp(prefix="minborg-writes-"))
    info = cell.start(state, replicas=1, store_tls=store == "tls")
    try:
        direct = {r.name: r for r in store_bench.bench(list(info.etcd_urls), 5.0, users, info.etcd_tls)}["txn"]
        watch = store_bench.watch_delay(list(info.etcd_urls), 3.0, info.etcd_tls)
        procs = {p.role: psutil.Process(p.pid) for p in cell.processes(info) if p.role in ("master", "etcd")}
        master, etcd = procs["master"], [procs["etcd"]]
        env = {
            "LOADTEST_MASTERS": ",".join(info.master_urls),
            "LOADTEST_CELL": cell.CELL_NAME,
            "LOADTEST_SUBMIT_TASKS": "0",
            **cell.locust_env(info),
        }
        txns0, jobs0 = _counts(info.master_urls[0])
        m0, e0, c0, w0 = _cpu_seconds([master]), _cpu_seconds(etcd), psutil.cpu_times(), time.monotonic()
        run = locustrun.run(Target.SUBMIT, Ladder(users, 1, users, seconds, SLO_P95_MS), out / "submit0", env, 2)
        m1, e1, c1, w1 = _cpu_seconds([master]), _cpu_seconds(etcd), psutil.cpu_times(), time.monotonic()
        txns1, jobs1 = _counts(info.master_urls[0])
        if run.returncode != 0:
            raise RuntimeError(f"locust exited {run.returncode}; see {run.log}")
        step = json.loads(run.shape.read_text())["steps"][0]
        wall = w1 - w0  # Locust's start and stop included: the CPU shares are a little low
        return Run(
            store=store,
            direct_txn_per_s=direct.per_second,
            master_submits_per_s=step["rps"],
            master_p99_ms=step.get("p99_ms") or 0.0,
            groups=txns1 - txns0,  # 0-task jobs: one txn per group
            submissions=jobs1 - jobs0,
            master_cpu=100 * (m1 - m0) / wall,
            etcd_cpu=100 * (e1 - e0) / wall,
            machine_busy=100 * (_busy(c1) - _busy(c0)) / wall / (psutil.cpu_count() or 1),
            watch_p50_ms=watch.percentile_ms(0.5),
            watch_p99_ms=watch.percentile_ms(0.99),
        )
    finally:
        cell.stop(state)
        shutil.rmtree(state, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--users", type=int, default=4, help="Locust users, and direct etcd clients")
    parser.add_argument("--seconds", type=float, default=15.0, help="of submissions per run")
    parser.add_argument("--out", type=Path, help="keep each run's Locust files here")
    parser.add_argument(
        "--store", default="tls",
        help="how the cells' etcd serves: tls (every cell's), plain (http, only here), or both "
        "interleaved (tls,plain) to measure what TLS costs",
    )  # fmt: skip
    args = parser.parse_args(argv)
    stores = [s.strip() for s in args.store.split(",") if s.strip()]
    if not stores or any(s not in ("tls", "plain") for s in stores):
        parser.error(f"--store takes tls, plain or tls,plain, not {args.store!r}")
    runs = []
    for i in range(args.runs):
        for store in stores:
            out = (args.out or Path(tempfile.mkdtemp(prefix="minborg-writes-out-"))) / f"run{i + 1}-{store}"
            out.mkdir(parents=True, exist_ok=True)
            r = one(args.users, args.seconds, out, store)
            runs.append(r)
            print(f"run {i + 1}: {r.line()}", flush=True)
    for store in stores:
        mine = [r for r in runs if r.store == store]
        if len(mine) > 1:
            print(
                f"median {store}: direct {statistics.median(r.direct_txn_per_s for r in mine):.0f} txn/s, "
                f"master {statistics.median(r.master_submits_per_s for r in mine):.0f} submits/s, "
                f"ratio {100 * statistics.median(r.ratio for r in mine):.0f}% "
                f"(range {100 * min(r.ratio for r in mine):.0f}-{100 * max(r.ratio for r in mine):.0f}%), "
                f"watch p50 {statistics.median(r.watch_p50_ms for r in mine):.2f} ms"
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
