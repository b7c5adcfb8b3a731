"""`python -m bench.tlscost`: what TLS costs a cell, HTTPS against plain HTTP on the same cell shape, in one run.

Each side starts a fresh local cell (1 master replica, `--machines` hollow machines served by
one process, no scheduler process) and measures, in this order:

- the poll: over `--window-s`, the master replica's CPU seconds (its link shard polls every
  machine each second in the same process) and the hollow process's (which answers the polls,
  and on the TLS side decrypts them), per machine poll made (`/v1/shard`'s count) and per
  machine (cores);
- API writes: `--writes` job submissions (POST /v1/jobs, one task each), one at a time;
- API reads: `--reads` GET /v1/jobs/USER/NAME, one at a time, on one kept-alive connection
  (httpx, as the full command line and the libraries read), and as many on a fresh connection
  each (`cli.http.PlainCell`, as the fast path's command line reads: a TLS handshake each).

Sides: `plain` (http, the channel signed), `tls` (`cell up --tls`: https everywhere, the
channel signed on top), and `tls-unsigned` (https, the channel's signature off: what keeping
the HMAC on top of TLS costs). Sides run in the order plain, tls, tls-unsigned, then reversed
for each further `--rounds`, and each figure's median over a side's runs is printed with its
ratio to plain.

    python -m bench.tlscost --machines 100 --rounds 1 --out reports/tlscost.json
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
import psutil

from bench.stats import percentile
from reference import launcher
from reference.cellfile import auth_headers, read_admin_token
from reference.cli.http import PlainCell
from reference.launcher import tls as cell_tls

SIDES = {  # name: (tls, channel signed)
    "plain": (False, True),
    "tls": (True, True),
    "tls-unsigned": (True, False),
}
FIGURES = (
    "master_us_per_poll", "hollow_us_per_poll", "master_cores_per_1000_machines", "write_p50_ms", "write_p99_ms",
    "read_p50_ms", "read_p99_ms", "fresh_read_p50_ms", "fresh_read_p99_ms",
)  # fmt: skip


def order(rounds: int) -> list[str]:
    """plain, tls, tls-unsigned, then reversed, ...: a drift over the run weighs on all alike."""
    names = list(SIDES)
    return [name for k in range(rounds) for name in (names if k % 2 == 0 else names[::-1])]


def ms(values: list[float], q: float) -> float | None:
    p = percentile(values, q)
    return None if p is None else round(p * 1e3, 2)


def cpu_s(pid: int) -> float:
    times = psutil.Process(pid).cpu_times()
    return times.user + times.system


def timed(step: Any, n: int) -> list[float]:
    out = []
    for i in range(n):
        began = time.perf_counter()
        step(i)
        out.append(time.perf_counter() - began)
    return out


def run_one(side: str, machines: int, window_s: float, writes: int, reads: int, root: Path) -> dict[str, Any]:
    tls, signed = SIDES[side]
    info = launcher.up(root, replicas=1, machines=0, hollow=machines, schedulers=0, tls=tls,
                       insecure_channel=not signed, machine_shares=None)  # fmt: skip
    try:
        url = info.master_urls[0]
        master = info.of_role(launcher.Role.MASTER)[0].pid
        hollow = next(p.pid for p in info.of_role(launcher.Role.BORGLET))
        token = read_admin_token(root)
        with httpx.Client(timeout=30.0, headers=auth_headers(token), verify=cell_tls.client_verify(root)) as http:
            time.sleep(3.0)  # every machine polled a few times: the connections made
            polls0, cpu0 = http.get(f"{url}/v1/shard").json()["polls"], (cpu_s(master), cpu_s(hollow))
            began = time.monotonic()
            time.sleep(window_s)
            polls1, cpu1 = http.get(f"{url}/v1/shard").json()["polls"], (cpu_s(master), cpu_s(hollow))
            elapsed, polls = time.monotonic() - began, polls1 - polls0
            master_s, hollow_s = cpu1[0] - cpu0[0], cpu1[1] - cpu0[1]

            def write(i: int) -> None:
                job = {"name": f"w{i}", "user": "bench", "priority": 100, "task_count": 1,
                       "request": {"cpu": "10m", "ram": "16MiB"}, "command": ["sleep", "3600"]}  # fmt: skip
                http.post(f"{url}/v1/jobs", json=job).raise_for_status()

            def read(i: int) -> None:
                http.get(f"{url}/v1/jobs/bench/w{i % writes}").raise_for_status()

            written = timed(write, writes)
            kept = timed(read, reads)
            fresh_cell = PlainCell([url], token, retry_s=0.0, state_dir=root)
            fresh = timed(lambda i: fresh_cell.request("GET", f"/v1/jobs/bench/w{i % writes}"), reads)
    finally:
        launcher.down(root)
    return {
        "side": side, "machines": machines, "window_s": round(elapsed, 1), "polls": polls,
        "master_us_per_poll": round(master_s / polls * 1e6, 1) if polls else None,
        "hollow_us_per_poll": round(hollow_s / polls * 1e6, 1) if polls else None,
        "master_cores_per_1000_machines": round(master_s / elapsed / machines * 1000, 3),
        "write_p50_ms": ms(written, 0.5), "write_p99_ms": ms(written, 0.99),
        "read_p50_ms": ms(kept, 0.5), "read_p99_ms": ms(kept, 0.99),
        "fresh_read_p50_ms": ms(fresh, 0.5), "fresh_read_p99_ms": ms(fresh, 0.99),
    }  # fmt: skip


def summary(runs: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Per figure: each side's median and its ratio to plain's."""
    out: dict[str, dict[str, Any]] = {}
    for figure in FIGURES:
        medians = {}
        for side in SIDES:
            values = [r[figure] for r in runs if r["side"] == side and r.get(figure) is not None]
            medians[side] = round(statistics.median(values), 3) if values else None
        plain = medians["plain"]
        out[figure] = {**medians, **{f"{s}/plain": round(v / plain, 2) for s, v in medians.items()
                                     if s != "plain" and v is not None and plain}}  # fmt: skip
    return out


def table(summary_: dict[str, dict[str, Any]]) -> str:
    sides = list(SIDES)
    head = "| figure | " + " | ".join(sides) + " | tls / plain | tls-unsigned / plain |"
    lines = [head, "|" + "---|" * (len(sides) + 3)]
    for figure, row in summary_.items():
        cells = " | ".join("-" if row.get(s) is None else f"{row[s]:g}" for s in sides)
        lines.append(f"| {figure} | {cells} | {row.get('tls/plain', '-')} | {row.get('tls-unsigned/plain', '-')} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.tlscost", description=__doc__.split("\n")[0])
    parser.add_argument("--machines", type=int, default=100, help="hollow machines polled (default 100)")
    parser.add_argument("--rounds", type=int, default=1, help="runs of each side (default 1)")
    parser.add_argument("--window-s", type=float, default=15.0, help="seconds the polls' CPU is measured over")
    parser.add_argument("--writes", type=int, default=100, help="job submissions timed per run")
    parser.add_argument("--reads", type=int, default=300, help="reads timed per run, each way")
    parser.add_argument("--out", type=Path, default=None, help="write the runs and the summary as JSON here")
    args = parser.parse_args(argv)
    if args.machines < 1 or args.rounds < 1 or args.writes < 1 or args.reads < 1 or args.window_s <= 0:
        parser.error("--machines, --rounds, --writes and --reads must be at least 1, --window-s above 0")
    command = "python -m bench.tlscost " + shlex.join(sys.argv[1:] if argv is None else argv)
    runs = []
    with tempfile.TemporaryDirectory(prefix="tlscost-") as tmp:
        for i, side in enumerate(order(args.rounds)):
            print(f"tlscost: run {i + 1}/{len(SIDES) * args.rounds}: {side}, {args.machines} hollow machines", flush=True)
            run = run_one(side, args.machines, args.window_s, args.writes, args.reads, Path(tmp) / f"run{i}")
            print("  " + ", ".join(f"{k} {v}" for k, v in run.items() if k in FIGURES), flush=True)
            runs.append(run)
    result = summary(runs)
    print(f"\n{command}  (host: {os.cpu_count()} cores, load {os.getloadavg()[0]:.1f})\n")
    print(table(result))
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps({"command": command, "runs": runs, "summary": result}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
