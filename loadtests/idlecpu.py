"""What an idle cell costs: a fresh hollow cell of N machines and R replicas, no CPU budget, no
task; each role's CPU (psutil, cores) over a window once the first reports are in, and the
masters' CPU per poll their link shards made (`/v1/shard` of each replica). Issue 43 compares
it across commits, on one host:

    python -m loadtests.idlecpu --machines 5000 --replicas 3
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

import httpx

from loadtests import scale
from reference import launcher


def shard_polls(http: httpx.Client, urls: list[str]) -> int:
    """Polls made so far by the link shards of every replica that answers."""
    total = 0
    for url in urls:
        try:
            total += int(http.get(f"{url}/v1/shard").json()["polls"])
        except (httpx.HTTPError, ValueError, KeyError, TypeError):
            pass
    return total


def run(machines: int, replicas: int, out: Path, settle_s: float = 45.0, window_s: float = 30.0) -> dict[str, Any]:
    cfg = scale.Config(replica_cpu=None, tasks_per_machine=0, out=out)
    root = out / "cells" / f"idlecpu-m{machines}-r{replicas}"
    info = scale.start_cell(cfg, machines, replicas, root)
    try:
        http = httpx.Client(timeout=30.0, headers=scale.admin_headers(root))
        urls = list(info.master_urls)
        roles = scale.process_roles(info, launcher.ask_leader(http, urls))
        time.sleep(settle_s)  # every machine reported, the first syncs answered
        cpu0, polls0, began = scale.role_cpu(roles), shard_polls(http, urls), time.monotonic()
        time.sleep(window_s)
        cpu1, polls1, took = scale.role_cpu(roles), shard_polls(http, urls), time.monotonic() - began
        http.close()
    finally:
        scale.stop_cell(root)
    cores = {role: round((cpu1[role] - cpu0[role]) / took, 3) for role in roles}
    masters = (cpu1["leader"] + cpu1["followers"] - cpu0["leader"] - cpu0["followers"]) * 1000
    polls = polls1 - polls0
    return {
        "machines": machines, "replicas": replicas, "poll_interval_s": cfg.poll_interval, "window_s": round(took, 1),
        "cores": cores, "polls": polls, "masters_ms_per_poll": round(masters / polls, 4) if polls else None,
    }  # fmt: skip


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--machines", type=int, default=5000)
    p.add_argument("--replicas", type=int, default=3)
    p.add_argument("--settle-s", type=float, default=45.0)
    p.add_argument("--window-s", type=float, default=30.0)
    p.add_argument("--out", type=Path, default=Path("/tmp/idlecpu"))
    args = p.parse_args()
    print(json.dumps(run(args.machines, args.replicas, args.out, args.settle_s, args.window_s)), flush=True)


if __name__ == "__main__":
    main()
