"""`python -m bench.authcost`: what the API's access checks cost, on reads and writes, with and without them in one run.

Two 1-replica cells run side by side: one as every cell runs (tokens checked, the default
rate limit), one started with `--unsafe-no-auth-benchmark-only`. Requests alternate between
them, one to each in turn, so whatever else the host does weighs on both alike: reads are
`GET /v1/jobs` (each cell holding the same jobs), writes are `POST /v1/jobs` of a job with
no task. The in-process cost of the checks alone (hash the token, find its user, take from
its bucket, authorise) is timed as well, without HTTP around it.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
import timeit
from pathlib import Path
from typing import Any

import httpx

from bench.cell import job
from bench.stats import percentile
from reference.launcher.testcell import LocalCell
from reference.master import access
from reference.master.access import AccessConfig, UserRecord
from reference.master.guard import Guard

NO_AUTH = "--unsafe-no-auth-benchmark-only"


def summary(latencies: list[float]) -> dict[str, float]:
    return {
        "p50_ms": round((percentile(latencies, 0.5) or 0.0) * 1e3, 3),
        "p99_ms": round((percentile(latencies, 0.99) or 0.0) * 1e3, 3),
    }


def in_process_us(rounds: int = 20000) -> float:
    """Microseconds of the guard's checks per request, without HTTP: a user's token found
    among 1,000 users, its bucket taken from, a write to its own job authorised."""
    records = {}
    token = ""
    for i in range(1000):
        t = access.new_token()
        records[access.hash_token(t)] = UserRecord(f"u{i}", access.hash_token(t))
        token = t
    guard = Guard(lambda *_: None, config=AccessConfig(rate=1e9, burst=1e9), user_by_hash=records.get,
                  ui_shell=str)  # type: ignore[arg-type]  # fmt: skip
    header = f"Bearer {token}"

    def check() -> None:
        who = guard.authenticate(header)
        assert who is not None
        guard.limit.take(who.name, time.monotonic())
        access.authorise(who, "PATCH", f"/v1/jobs/{who.name}/web")

    return timeit.timeit(check, number=rounds) / rounds * 1e6


def measure(reads: int, writes: int, workdir: Path) -> dict[str, Any]:
    checked = LocalCell(workdir / "checked", masters=1, borglets=1, cell="authon")
    unchecked = LocalCell(workdir / "unchecked", masters=1, borglets=1, cell="authoff", master_args=(NO_AUTH,))
    with checked, unchecked:
        clients = {
            "with_auth": httpx.Client(base_url=checked.masters[0].url, timeout=10.0, headers=checked.auth),
            "without_auth": httpx.Client(base_url=unchecked.masters[0].url, timeout=10.0),
        }
        for name, http in clients.items():  # the same cell to read on both sides
            for i in range(20):
                assert http.post("/v1/jobs", json=job(f"seed{i}", 0)).status_code == 201, name
        lat: dict[str, dict[str, list[float]]] = {name: {"read": [], "write": []} for name in clients}
        for _ in range(reads):
            for name, http in clients.items():
                t = time.perf_counter()
                http.get("/v1/jobs").raise_for_status()
                lat[name]["read"].append(time.perf_counter() - t)
        for i in range(writes):
            for name, http in clients.items():
                t = time.perf_counter()
                r = http.post("/v1/jobs", json=job(f"w{i}", 0))
                lat[name]["write"].append(time.perf_counter() - t)
                assert r.status_code == 201, r.text
        for http in clients.values():
            http.close()
    return {name: {kind: summary(v) for kind, v in kinds.items()} for name, kinds in lat.items()}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.authcost", description=__doc__)
    p.add_argument("--reads", type=int, default=2000)
    p.add_argument("--writes", type=int, default=300)
    p.add_argument("--workdir", default=None, help="keep logs here (default: a temporary directory)")
    args = p.parse_args(argv)
    workdir = Path(args.workdir or tempfile.mkdtemp(prefix="minborg-authcost-"))
    results = {"reads": args.reads, "writes": args.writes, "checks_in_process_us": round(in_process_us(), 2)}
    results.update(measure(args.reads, args.writes, workdir))
    print(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
