"""The leader's CPU per task filled: a fresh hollow cell of N machines, one replica, no CPU
budget; the leader process's CPU seconds (psutil) from before a fill to its last task
confirmed, divided by the tasks. Issue 43 compares it across cell sizes and commits:

    nice -n 19 python -m loadtests.fillcpu --machines 1000,2000 --tasks-per-machine 5

Shorter than `campaign scale`, which derives the fill's CPU from its wall time at a budget.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import httpx

from loadtests import scale
from reference import launcher


def run(machines: int, tasks_per_machine: int, out: Path, idle_s: float = 0.0) -> dict[str, float | int | None]:
    cfg = scale.Config(replica_cpu=None, tasks_per_machine=tasks_per_machine, out=out)
    root = out / "cells" / f"fillcpu-m{machines}"
    info = scale.start_cell(cfg, machines, 1, root)
    try:
        http = httpx.Client(timeout=60.0, headers=scale.admin_headers(root))
        url = info.master_urls[0]
        leader = launcher.ask_leader(http, [url])
        pids = scale.process_roles(info, leader)["leader"]
        time.sleep(5.0)  # the first reports of every machine are in
        idle: dict[str, float | int] = {}
        if idle_s > 0:
            # The idle cell's polls (and anti-entropy syncs): the leader's CPU per poll its shard made.
            cpu0, polls0 = sum(scale.cpu_seconds(p) for p in pids), http.get(f"{url}/v1/shard").json()["polls"]
            time.sleep(idle_s)
            cpu, polls = sum(scale.cpu_seconds(p) for p in pids) - cpu0, http.get(f"{url}/v1/shard").json()["polls"] - polls0
            idle = {"idle_polls": polls, "idle_cpu_s": round(cpu, 2), "ms_per_poll": round(1000 * cpu / max(1, polls), 4)}
        cpu0 = sum(scale.cpu_seconds(p) for p in pids)
        tasks = tasks_per_machine * machines
        confirmed, took = scale.fill(http, url, scale.hollow_url(info), tasks, 600.0)
        cpu = sum(scale.cpu_seconds(p) for p in pids) - cpu0
        return {"machines": machines, "tasks": tasks, "confirmed": confirmed, "fill_s": took,
                "leader_cpu_s": round(cpu, 2), "ms_per_task": round(1000 * cpu / max(1, confirmed), 3), **idle}  # fmt: skip
    finally:
        scale.stop_cell(root)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--machines", default="1000,2000")
    p.add_argument("--tasks-per-machine", type=int, default=5)
    p.add_argument("--out", type=Path, default=Path("/tmp/fillcpu"))
    p.add_argument("--idle-s", type=float, default=0.0, help="first measure the idle cell's CPU per poll this long")
    args = p.parse_args()
    for m in (int(x) for x in args.machines.split(",")):
        print(json.dumps(run(m, args.tasks_per_machine, args.out, args.idle_s)), flush=True)


if __name__ == "__main__":
    main()
