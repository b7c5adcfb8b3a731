"""`python -m bench.pollauth`: what the signed master-borglet channel costs on the poll path, hollow cells polled signed and unsigned in one run.

Each run starts a fresh hollow cell as the scale campaign does (`loadtests.scale.start_cell`:
one master replica with its link shard, held to `--replica-cpu` cores, one scheduler
process, N hollow machines), either as every cell runs (the master signs each request, each
hollow machine checks it as a borglet does) or with the channel off (`insecure_channel`: the
master without the key, the hollow machines with `--insecure-channel`). It fills the cell to
`--tasks-per-machine` tasks per machine, lets the polls settle, then over a fixed window
(`--window-s`) measures:

- the master replica's CPU seconds (from /proc; its link shard polls in the same process)
  per machine poll made, the polls counted by `/v1/shard`; the hollow process's likewise,
  which is where the signatures are checked;
- the polling interval p50 / p95, as the scale campaign takes it from `/v1/shard`;

and over the next `--read-window-s`, the polls going on, API read p50 / p99 of readers
calling `GET /v1/cell` (not in the first window: the master's CPU for them would be
counted as the polls').

Runs go signed, unsigned, unsigned, signed, ... (`order`), so a drift in what else the host
does weighs on both alike; the medians of each side and their ratio (signed / unsigned) are
printed and written as JSON (`--out`); `--report` writes the markdown report from it.

    python -m bench.pollauth --machines 1000 --rounds 3 --out reports/pollauth/m1000.json
    python -m bench.pollauth --report-from reports/pollauth/m1000.json --report reports/pollauth.md
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shlex
import statistics
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import httpx

from bench.stats import percentile
from loadtests import scale
from loadtests.scale_results import poll_summary
from reference import channel
from reference.launcher import CellInfo

TARGET_RATIO = 1.10  # the requirement: under 10% added by authentication on reads and on the poll
# The figures compared, and whether the target applies to them (a cost or latency that must
# not grow by more than 10%) or they are shown for context.
METRICS = {
    "master_us_per_poll": True,
    "poll_p50_s": True,
    "poll_p95_s": True,
    "read_p50_ms": True,
    "read_p99_ms": True,
    "hollow_us_per_poll": False,
    "polls_per_s": False,
    "master_cores": False,
}
SIDES = ("signed", "unsigned")
UP_ATTEMPTS = 2


@dataclass(frozen=True)
class Config:
    machines: int = 1000
    rounds: int = 3  # runs of each side
    tasks_per_machine: int = 2
    replica_cpu: float | None = 0.3  # the scale campaign's budget per replica
    poll_interval: float = 2.0
    window_s: float = 30.0  # polls and CPU measured
    read_window_s: float = 15.0  # then reads measured, the polls going on
    settle_s: float = 6.0  # after the fill, before the window: the last syncs' reports sent
    fill_timeout_s: float = 45.0
    readers: int = 2


# --- the figures (pure) ----------------------------------------------------------------------------


def order(rounds: int) -> list[bool]:
    """Which side each run is (True: signed), pairs alternating which goes first:
    S U, U S, S U, ... so a steady drift over the run weighs on both sides nearly alike."""
    out: list[bool] = []
    for k in range(rounds):
        out += [True, False] if k % 2 == 0 else [False, True]
    return out


def run_figures(
    polls: int, cpu_s: dict[str, float], window_s: float, shard: dict[str, Any], reads: list[float],
) -> dict[str, Any]:  # fmt: skip
    """One run's figures from what its window measured: `polls` machine polls made, the CPU
    seconds each role used (`master`, `hollow`), the shard's `/v1/shard` at the window's end,
    and the reads' latencies in seconds."""

    def per_poll(role: str) -> float | None:
        return round(cpu_s[role] / polls * 1e6, 1) if polls > 0 and role in cpu_s else None

    def ms(q: float) -> float | None:
        p = percentile(reads, q)
        return round(p * 1e3, 2) if p is not None else None

    interval = poll_summary([shard])
    return {
        "window_s": round(window_s, 1),
        "polls": polls,
        "polls_per_s": round(polls / window_s, 1) if window_s > 0 else None,
        "master_us_per_poll": per_poll("master"),
        "hollow_us_per_poll": per_poll("hollow"),
        "master_cores": round(cpu_s.get("master", 0.0) / window_s, 3) if window_s > 0 else None,
        "poll_p50_s": interval.get("p50"),
        "poll_p95_s": interval.get("p95"),
        "read_p50_ms": ms(0.5),
        "read_p99_ms": ms(0.99),
        "reads": len(reads),
    }


def compare(runs: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Per metric: the median of the signed runs and of the unsigned runs, their ratio
    (signed / unsigned) and whether it meets the target (None where the target does not
    apply or a side has no figure)."""
    out: dict[str, dict[str, Any]] = {}
    for metric, targeted in METRICS.items():
        medians: dict[str, float | None] = {}
        ranges: dict[str, tuple[float, float] | None] = {}
        for side in SIDES:
            values = [r["figures"][metric] for r in runs if r["side"] == side and r.get("figures", {}).get(metric) is not None]
            medians[side] = round(statistics.median(values), 3) if values else None
            ranges[side] = (min(values), max(values)) if values else None
        signed, unsigned = medians["signed"], medians["unsigned"]
        ratio = round(signed / unsigned, 3) if signed is not None and unsigned else None
        a, b = ranges["signed"], ranges["unsigned"]
        out[metric] = {
            **medians,
            "ratio": ratio,
            "meets_target": (ratio < TARGET_RATIO) if targeted and ratio is not None else None,
            # the two sides' runs overlap: the medians' difference is within the runs' spread
            "overlap": (a[0] <= b[1] and b[0] <= a[1]) if a and b else None,
        }
    return out


def verdict(summary: dict[str, dict[str, Any]]) -> str:
    """One sentence: whether signing adds under 10% to every targeted figure, and if not, to which and by how much."""
    over = [f"{m} +{(s['ratio'] - 1) * 100:.0f}%" for m, s in summary.items() if s["meets_target"] is False]
    unmeasured = [m for m, s in summary.items() if METRICS[m] and s["ratio"] is None]
    if over:
        spread = [m for m, s in summary.items() if s["meets_target"] is False and s.get("overlap")]
        return "target not met: signing adds 10% or more to " + ", ".join(over) + (
            f" (within the runs' spread, the two sides' runs overlapping: {', '.join(spread)})" if spread else ""
        )
    if unmeasured:
        return "target not judged: no figure for " + ", ".join(unmeasured)
    return "target met: signing adds under 10% to every figure it applies to"


# --- the channel's own work per poll, without HTTP ----------------------------------------------------


def in_process_us(polls: int = 20_000) -> dict[str, float]:
    """CPU microseconds per poll of what the channel adds, without HTTP: the master signing a
    `GET /m/<machine>/v1/state` and the hollow server checking it (`channel.check_request`
    on the ASGI scope, as it does for every request)."""
    key, machine = bytes(range(32)), "hollow0000"
    target = f"/m/{machine}/v1/state".encode()

    def sign() -> dict[str, str]:
        return channel.sign(key, "GET", target, b"", machine, time.time())

    headers = [(k.lower().encode(), v.encode()) for k, v in sign().items()]
    scope = {"type": "http", "method": "GET", "path": target.decode(), "raw_path": target, "query_string": b"",
             "headers": [(b"host", b"127.0.0.1:7000"), (b"accept-encoding", b"identity"), *headers]}  # fmt: skip

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def checks() -> None:
        for _ in range(polls):
            problem, _ = await channel.check_request(key, machine, scope, receive, time.time())
            assert problem is None, problem

    began = time.process_time()
    for _ in range(polls):
        sign()
    signed = time.process_time() - began
    began = time.process_time()
    asyncio.run(checks())
    checked = time.process_time() - began
    return {"sign_us": round(signed / polls * 1e6, 2), "check_us": round(checked / polls * 1e6, 2)}


# --- one run (starts a cell) -------------------------------------------------------------------------


def _shard(http: httpx.Client, url: str, tries: int = 10) -> dict[str, Any]:
    """The replica's `/v1/shard`, asked again while it sheds load (503) or does not answer:
    a window whose polls cannot be counted has no figures."""
    for _ in range(tries - 1):
        try:
            response = http.get(f"{url}/v1/shard", timeout=10.0)
            if response.status_code == 200 and "polls" in response.json():
                return response.json()
        except httpx.HTTPError:
            pass
        time.sleep(0.5)
    response = http.get(f"{url}/v1/shard", timeout=30.0)
    response.raise_for_status()
    return response.json()


def _start(campaign: scale.Config, machines: int, root: Path, signed: bool, run: dict[str, Any], say: Any) -> CellInfo:
    """The cell, started again once when it does not come up: on a loaded host a leader
    can lose its lease while a thousand machines register, which says nothing of the channel."""
    for attempt in range(1, UP_ATTEMPTS + 1):
        run["up_attempts"] = attempt
        try:
            return scale.start_cell(campaign, machines, 1, root, insecure_channel=not signed)
        except Exception as err:
            if attempt == UP_ATTEMPTS:
                raise
            say(f"  cell up failed ({type(err).__name__}: {str(err)[:160]}); once more")
            scale.stop_cell(root)
    raise AssertionError("unreachable")


def run_one(cfg: Config, signed: bool, root: Path, say: Any = print) -> dict[str, Any]:
    """Start a cell (signed or not), fill it, measure the polls then the reads, stop it."""
    side = "signed" if signed else "unsigned"
    run: dict[str, Any] = {"side": side, "load_before": round(os.getloadavg()[0], 1)}
    campaign = scale.Config(replica_cpu=cfg.replica_cpu, poll_interval=cfg.poll_interval)
    began = time.monotonic()
    try:
        info = _start(campaign, cfg.machines, root, signed, run, say)
        run["up_s"] = round(time.monotonic() - began, 1)
        headers = scale.admin_headers(root)
        url = info.master_urls[0]
        with httpx.Client(timeout=60.0, headers=headers) as http:
            total = cfg.tasks_per_machine * cfg.machines
            run["fill_tasks"] = total
            try:
                run["fill_confirmed"], run["fill_s"] = scale.fill(
                    http, url, scale.hollow_url(info), total, cfg.fill_timeout_s
                )
            except RuntimeError as err:  # no leader to take the jobs: the polls go on all the same
                run["fill_error"] = str(err)[:200]
            time.sleep(cfg.settle_s)
            roles = scale.process_roles(info, None)
            # The one replica, whether or not it leads at this moment.
            pids = {"master": roles["leader"] + roles["followers"], "hollow": roles["hollow"]}
            polls0 = int(_shard(http, url).get("polls", 0))
            cpu0 = {role: sum(scale.cpu_seconds(p) for p in ps) for role, ps in pids.items()}
            window_began = time.monotonic()
            time.sleep(cfg.window_s)
            shard = _shard(http, url)
            cpu1 = {role: sum(scale.cpu_seconds(p) for p in ps) for role, ps in pids.items()}
            elapsed = time.monotonic() - window_began
            # Reads after the poll window: served by the same process, they would be counted
            # as the polls' CPU, and more of them where they are answered faster.
            probe = scale.Probe([url], headers, cfg.readers)
            probe.start()
            time.sleep(cfg.read_window_s)
            probe.stop()
        cpu_s = {role: cpu1[role] - cpu0[role] for role in pids}
        run["figures"] = run_figures(int(shard.get("polls", 0)) - polls0, cpu_s, elapsed, shard, probe.latencies)
        run["read_errors"] = probe.errors
    except Exception as err:  # a run that fails is recorded, and the others still run
        run["error"] = f"{type(err).__name__}: {err}"
    finally:
        scale.stop_cell(root)
    run["load_after"] = round(os.getloadavg()[0], 1)
    f = run.get("figures", {})
    say(
        f"  {side}: {f.get('master_us_per_poll')} us/poll master, {f.get('hollow_us_per_poll')} us/poll hollow, "
        f"poll p50/p95 {f.get('poll_p50_s')}/{f.get('poll_p95_s')} s, read p50/p99 {f.get('read_p50_ms')}/"
        f"{f.get('read_p99_ms')} ms, fill {run.get('fill_confirmed')}/{run.get('fill_tasks')}"
        + (f", error {run['error']}" if "error" in run else "")
    )
    return run


def measure(cfg: Config, out: Path, command: str, workdir: Path, say: Any = print) -> dict[str, Any]:
    """Every run in `order`, the JSON rewritten after each."""
    doc: dict[str, Any] = {
        "command": command, "config": asdict(cfg), "host_cores": os.cpu_count(), "in_process_us": in_process_us(),
        "runs": [],
    }  # fmt: skip
    out.parent.mkdir(parents=True, exist_ok=True)
    for i, signed in enumerate(order(cfg.rounds)):
        say(f"pollauth: run {i + 1}/{2 * cfg.rounds}, {cfg.machines} hollow machines, {'signed' if signed else 'unsigned'}")
        doc["runs"].append(run_one(cfg, signed, workdir / f"run{i}", say))
        doc["summary"] = compare(doc["runs"])
        doc["verdict"] = verdict(doc["summary"])
        out.write_text(json.dumps(doc, indent=1) + "\n")
    return doc


# --- the table and the report -------------------------------------------------------------------------

COLUMNS = (
    ("master µs/poll", "master_us_per_poll"),
    ("hollow µs/poll", "hollow_us_per_poll"),
    ("polls/s", "polls_per_s"),
    ("master cores", "master_cores"),
    ("poll p50 (s)", "poll_p50_s"),
    ("poll p95 (s)", "poll_p95_s"),
    ("read p50 (ms)", "read_p50_ms"),
    ("read p99 (ms)", "read_p99_ms"),
)


def _cell(value: Any) -> str:
    return "-" if value is None else f"{value:g}" if isinstance(value, float) else str(value)


def table(doc: dict[str, Any]) -> str:
    """The runs in order, then each side's medians and the ratio, as a markdown table."""
    head = "| run | side | " + " | ".join(name for name, _ in COLUMNS) + " | fill | load 1m |"
    lines = [head, "|" + "---|" * (len(COLUMNS) + 4)]
    for i, r in enumerate(doc["runs"]):
        f = r.get("figures", {})
        fill = f"{r.get('fill_confirmed', '-')}/{r.get('fill_tasks', '-')}"
        cells = " | ".join(_cell(f.get(key)) for _, key in COLUMNS)
        note = f" ({r['error']})" if r.get("error") else f" (fill: {r['fill_error'][:80]})" if r.get("fill_error") else ""
        lines.append(f"| {i + 1} | {r['side']}{note} | {cells} | {fill} | {r.get('load_before')} |")
    summary = compare(doc["runs"])
    for side in SIDES:
        cells = " | ".join(_cell(summary[key][side]) for _, key in COLUMNS)
        lines.append(f"| median | {side} | {cells} | | |")
    cells = " | ".join(_cell(summary[key]["ratio"]) for _, key in COLUMNS)
    lines.append(f"| ratio | signed / unsigned | {cells} | | |")
    return "\n".join(lines)


def report(docs: list[dict[str, Any]], command: str) -> str:
    """The markdown report of one or more runs of the bench, each section naming its command."""
    parts = [
        "# What the signed master-borglet channel costs on the poll path",
        "",
        f"This file: `{command}`, from the runs named in each section.",
        "",
        "Each run is a fresh hollow cell (one master replica with its link shard, held to a CPU "
        "budget like the scale campaign's, one scheduler process), filled, then measured over a "
        "fixed window: the master's CPU per machine poll (its process's CPU time over the polls "
        "`/v1/shard` counts), the hollow process's likewise (where signatures are checked), the "
        "polling interval as the scale campaign takes it; then, the polls going on, `GET /v1/cell` "
        "latencies (after the first window, so that the master's CPU for reads is not counted as "
        "the polls'). Signed "
        "and unsigned runs alternate; the ratio is of the medians, signed / unsigned. Target: "
        f"under {(TARGET_RATIO - 1) * 100:.0f}% added on the poll and on reads.",
    ]
    for doc in docs:
        cfg = doc["config"]
        loads = [r.get(k) for r in doc["runs"] for k in ("load_before", "load_after") if r.get(k) is not None]
        parts += [
            "",
            f"## {cfg['machines']:,} hollow machines, {cfg['tasks_per_machine']} task(s) each",
            "",
            f"Produced by `{doc['command']}`: {cfg['rounds']} runs of each side "
            f"({len(doc['runs'])} of {2 * cfg['rounds']} recorded), "
            f"{cfg['replica_cpu']} cores for the replica, poll interval {cfg['poll_interval']} s, "
            f"a {cfg['window_s']:g} s window of polls then {cfg.get('read_window_s', 0):g} s of "
            f"{cfg['readers']} readers; host of {doc.get('host_cores')} cores, "
            f"1-minute load {min(loads, default=0):g} to {max(loads, default=0):g} during the runs.",
            "",
            table(doc),
            "",
            *_in_process_line(doc),
            f"**{verdict(compare(doc['runs'])).capitalize()}.**",
        ]
    return "\n".join(parts) + "\n"


def _in_process_line(doc: dict[str, Any]) -> list[str]:
    costs = doc.get("in_process_us")
    if not costs:
        return []
    return [
        f"The channel's own work per poll, without HTTP, on the same host: {costs['sign_us']:g} µs for the "
        f"master to sign, {costs['check_us']:g} µs for the hollow server to check (CPU time).",
        "",
    ]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.pollauth", description=__doc__.split("\n", 1)[0])
    p.add_argument("--machines", type=int, default=Config.machines, help="hollow machines per cell")
    p.add_argument("--rounds", type=int, default=Config.rounds, help="runs of each side, interleaved")
    p.add_argument("--tasks-per-machine", type=int, default=Config.tasks_per_machine)
    p.add_argument("--replica-cpu", type=float, default=0.3, help="cores for the replica and the scheduler (0: no budget)")
    p.add_argument("--poll-interval", type=float, default=Config.poll_interval)
    p.add_argument("--window-s", type=float, default=Config.window_s, help="seconds of polls measured per run")
    p.add_argument("--read-window-s", type=float, default=Config.read_window_s, help="then seconds of reads measured")
    p.add_argument("--fill-timeout-s", type=float, default=Config.fill_timeout_s)
    p.add_argument("--out", default=None, help="the results JSON (default reports/pollauth/mN.json)")
    p.add_argument("--report", default=None, help="write the markdown report here")
    p.add_argument("--report-from", nargs="+", default=None, metavar="JSON",
                   help="run nothing: write --report from these results")  # fmt: skip
    p.add_argument("--workdir", default=None, help="where the cells' state dirs go (default: a temporary directory)")
    args = p.parse_args(argv)
    command = shlex.join(["python", "-m", "bench.pollauth", *(sys.argv[1:] if argv is None else argv)])
    if args.report_from:
        if not args.report:
            p.error("--report-from needs --report: the file to write")
        docs = [json.loads(Path(path).read_text()) for path in args.report_from]
        Path(args.report).write_text(report(docs, command))
        print(f"wrote {args.report}")
        return 0
    if args.machines < 1 or args.rounds < 1 or min(args.window_s, args.read_window_s) <= 0 or args.tasks_per_machine < 0:
        p.error("--machines and --rounds must be at least 1, --window-s and --read-window-s above 0, "
                "--tasks-per-machine 0 or more")  # fmt: skip
    cfg = Config(
        machines=args.machines, rounds=args.rounds, tasks_per_machine=args.tasks_per_machine,
        replica_cpu=args.replica_cpu or None, poll_interval=args.poll_interval, window_s=args.window_s,
        read_window_s=args.read_window_s,
        settle_s=3 * args.poll_interval, fill_timeout_s=args.fill_timeout_s,
    )  # fmt: skip
    out = Path(args.out or f"reports/pollauth/m{cfg.machines}.json")
    workdir = Path(args.workdir or tempfile.mkdtemp(prefix="minborg-pollauth-"))
    doc = measure(cfg, out, command, workdir)
    print(table(doc))
    print(doc["verdict"])
    print(f"wrote {out}")
    if args.report:
        Path(args.report).write_text(report([doc], command))
        print(f"wrote {args.report}")
    if not args.workdir and workdir.exists() and not any(workdir.iterdir()):
        workdir.rmdir()  # each cell's state dir went with it
    return 0


if __name__ == "__main__":
    sys.exit(main())
