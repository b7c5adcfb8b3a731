"""`python -m loadtests.borgletcost`: the CPU an idle borglet spends per task it runs.

Starts a local cell (one master replica, `--machines` real borglets), runs one job of
`--tasks-per-machine` x `--machines` tiny sleeping tasks (`loadtests.overload.flood_job`),
waits until every process is confirmed started, lets it settle, then reads each borglet's
and the master's CPU seconds from /proc over `--window-s` and prints them per second of wall
time. The per-task cost is the difference between two runs of different task counts: an
idle borglet's passes (observe, sample usage, probe, rotate logs) grow with its tasks, and a
host of many machines' borglets (the overload bench's 100 on 2 cores) pays that many times.

    python -m loadtests.borgletcost --tasks-per-machine 1 --machines 2
    python -m loadtests.borgletcost --tasks-per-machine 400 --machines 2

It also prints what the start of the job cost: each role's CPU seconds from the submission
until every process was confirmed, per task started (the borglets', the master's, the
scheduler's and etcd's; a process's own children not included). CPU seconds, not wall time:
the figure holds on a shared machine, where wall times do not.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import httpx

from loadtests.overload import CAPACITY, flood_job
from loadtests.scale import cpu_seconds
from reference import launcher
from reference.cellfile import auth_headers


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--tasks-per-machine", type=int, default=100)
    p.add_argument("--machines", type=int, default=2)
    p.add_argument("--window-s", type=float, default=20.0)
    p.add_argument("--start-timeout", type=float, default=120.0)
    args = p.parse_args(argv)
    total = args.tasks_per_machine * args.machines
    root = Path(tempfile.mkdtemp(prefix="borgletcost-"))
    info = launcher.up(root, cell="cost", replicas=1, machines=args.machines, machine_capacity=CAPACITY,
                       master_args=("--rate-limit", "0"))  # fmt: skip
    try:
        with httpx.Client(base_url=info.master_urls[0], timeout=60, headers=auth_headers(launcher.read_admin_token(root))) as http:
            roles = {
                role: [p.pid for p in info.processes if p.role == launcher.Role(role)]
                for role in ("borglet", "master", "scheduler", "etcd")
            }
            at_submit = {pid: cpu_seconds(pid) for pids in roles.values() for pid in pids}
            http.post("/v1/jobs", json=flood_job(total)).raise_for_status()
            t0 = time.monotonic()
            while http.get("/v1/jobs/load/flood").json()["tasks"].get("running_confirmed") != total:
                if time.monotonic() - t0 > args.start_timeout:
                    print(f"not every task started within {args.start_timeout:.0f} s")
                    return 1
                time.sleep(1.0)
            took = time.monotonic() - t0
            print(f"{total} tasks confirmed started {took:.1f} s after the submission; CPU ms per task started:")
            for role, pids in roles.items():
                spent = sum(cpu_seconds(pid) - at_submit[pid] for pid in pids)
                print(f"  {role:9s} {1000 * spent / total:7.3f}")
            time.sleep(5.0)  # the starts' own work settles
            borglets = [p.pid for p in info.processes if p.role == launcher.Role.BORGLET]
            masters = [p.pid for p in info.processes if p.role == launcher.Role.MASTER]
            before = {pid: cpu_seconds(pid) for pid in borglets + masters}
            w0 = time.monotonic()
            time.sleep(args.window_s)
            wall = time.monotonic() - w0
            rate = {pid: (cpu_seconds(pid) - before[pid]) / wall for pid in before}
            print(f"{args.tasks_per_machine} tasks per borglet, {args.machines} borglets, {wall:.0f} s window")
            print(f"borglet CPU s/s, median: {statistics.median(rate[p] for p in borglets):.4f}")
            print(f"master CPU s/s: {statistics.median(rate[p] for p in masters):.4f}")
            http.delete("/v1/jobs/load/flood")
    finally:
        launcher.down(root)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
