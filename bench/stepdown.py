"""`python -m bench.stepdown`: how often the master leader steps down when the etcd Raft leader is SIGKILLed.

Each trial: a 3-member etcd and one master replica (a real process; its lease keepalive is the
one under test) are up and the master leads; the etcd member that is Raft leader is
SIGKILLed at a random moment of the master's refresh interval. The trial counts a step-down
if the master's log says it no longer leads or /healthz ever shows it as a follower within
`2 x ttl + 1` s. It also times etcd's own election (kill to a surviving member naming a
new leader). The member is restarted before the next trial.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.stats import percentile
from reference.launcher.cellapi import ask_leader
from reference.launcher.testcell import LocalCell, wait_for
from reference.store.etcd_cluster import ELECTION_MS, HEARTBEAT_MS

STEP_DOWN_LINE = "no longer leads"


def trial(cell: LocalCell, ttl: float, rng: random.Random) -> dict[str, Any]:
    master = cell.masters[0]
    wait_for(lambda: ask_leader(cell.http, [master.url], itself=True, timeout=1), 30, "master leads")
    before = master.log.read_text(errors="replace").count(STEP_DOWN_LINE)
    # A tuple, so that member 0 (falsy as an int) counts as found.
    (victim,) = wait_for(lambda: (i,) if (i := cell.etcd.leader_index()) is not None else None, 10, "an etcd leader")
    time.sleep(rng.uniform(0.0, ttl / 3))  # a random phase of the keepalive
    killed = time.monotonic()
    cell.etcd.kill_member(victim, signal.SIGKILL)
    etcd_election_s: float | None = None
    follower_seen = False
    while time.monotonic() - killed < 2 * ttl + 1:
        if etcd_election_s is None and cell.etcd.leader_index(timeout=0.2) is not None:
            etcd_election_s = time.monotonic() - killed
        heard: list[str] = []  # a slow answer under load (none heard) is not a step-down
        follower_seen |= ask_leader(cell.http, [master.url], itself=True, timeout=0.5, heard=heard) is None and bool(heard)
        time.sleep(0.05)
    stepped = master.log.read_text(errors="replace").count(STEP_DOWN_LINE) > before or follower_seen
    cell.etcd.restart_member(victim)
    time.sleep(1.0)  # let the restarted member catch up before the next kill
    return {"victim": victim, "stepped_down": stepped, "etcd_election_s": etcd_election_s}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.stepdown", description=__doc__)
    p.add_argument("--trials", type=int, default=10)
    p.add_argument("--lease-ttl", type=float, default=2.0)
    p.add_argument("--etcd-heartbeat-ms", type=int, default=HEARTBEAT_MS)
    p.add_argument("--etcd-election-ms", type=int, default=ELECTION_MS)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--workdir", default=None, help="keep logs here (default: a temporary directory)")
    args = p.parse_args(argv)
    workdir = Path(args.workdir or tempfile.mkdtemp(prefix="minborg-stepdown-"))
    rng = random.Random(args.seed)
    load_before = os.getloadavg()
    cell = LocalCell(
        workdir, masters=1, borglets=0, cell="stepdown", lease_ttl=args.lease_ttl,
        etcd_heartbeat_ms=args.etcd_heartbeat_ms, etcd_election_ms=args.etcd_election_ms,
    )  # fmt: skip
    results = []
    with cell:
        for k in range(args.trials):
            results.append(trial(cell, args.lease_ttl, rng))
            print(f"  trial {k + 1}/{args.trials}: {results[-1]}", file=sys.stderr)
    elections = [r["etcd_election_s"] for r in results if r["etcd_election_s"] is not None]
    print(json.dumps({
        "lease_ttl": args.lease_ttl, "etcd_heartbeat_ms": args.etcd_heartbeat_ms,
        "etcd_election_ms": args.etcd_election_ms, "trials": len(results),
        "step_downs": sum(r["stepped_down"] for r in results),
        "etcd_election_p50_s": percentile(elections, 0.5), "etcd_election_max_s": max(elections, default=None),
        "etcd_election_mean_s": statistics.mean(elections) if elections else None,
        "loadavg_before": load_before, "loadavg_after": os.getloadavg(), "workdir": str(workdir),
    }, indent=2))  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
