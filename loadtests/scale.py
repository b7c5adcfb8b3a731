"""The scale campaign: hollow cells of 100 to 10,000 machines with 1, 3 and 5 master replicas at a fixed CPU budget each, against Borg's SLOs.

Each run starts a fresh cell (`cell up --machines 0 --hollow N --replicas R --replica-cpu B`,
one scheduler process), fills it with jobs up to `tasks_per_machine` tasks per machine, waits
until the leader's records confirm every fill task running (`settle_s`: the hollow borglets
run them first; `--no-settle` skips this wait), then for `measure_s` seconds keeps new tasks arriving at `arrival_per_min` while readers call
`GET /v1/cell` on the replicas that do not lead (`--reads followers`, the default: Borg
spreads read-only RPCs over its replicas while the elected master writes; a 1-replica cell
has only its leader to read from) or on every replica in turn (`--reads all`). It records:

- the borglet polling interval (time between successive polls of a machine by its link
  shard) p50 / p95 / max, from every replica's `/v1/shard` (the worst shard's is the cell's);
- API read p99 (the readers) and write p99 (the arrivals' submits); with reads sent to the
  followers, the leader's own read p50 / p99 too, from one more reader that calls only it;
- arriving tasks confirmed started per minute (by the hollow borglets, not by the API's
  word), at the rate they started once the campaign has waited up to `confirm_s` for them
  (`scale_results.sustained_per_min`), and each arrival job's submit-to-confirmed-start latency;
- CPU seconds per second of the leader, of the other replicas and of the scheduler process
  (from /proc), and the etcd database's size;
- task ids started more than once (must be none).

A run meets Borg's SLOs (Verma et al. 2015, section 3.4) when polling p95 is under 10 s and
read p99 under 1 s, with the fill complete and every arriving task confirmed started within
`confirm_s` after the window (the cell kept up with the arrivals). For each replica count the sizes are tried in
order until one fails: the larger ones are not run. `reports/scale.md` gives, per replica count, the
largest cell that met them and what failed first beyond it. Everything runs on loopback; each
run is bounded in time (`fill_timeout_s`, `measure_s`).

    python -m loadtests.scale --machines 100,1000 --replicas 1,3,5 --replica-cpu 0.3
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import subprocess
import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import httpx
import psutil
from prometheus_client.parser import text_string_to_metric_families

from bench.stats import percentile
from loadtests.scale_results import (
    ARRIVAL_PER_MIN,
    CONFIRM_S,
    Result,
    broke_a_promise,
    count_declared_down,
    failures,
    poll_summary,
    sustained_per_min,
)
from reference import launcher
from reference.cellfile import auth_headers, read_admin_token
from reference.launcher import CellInfo, Role
from reference.launcher.roles import HOLLOW_PROCESS

CELL = "scale"
MAX_JOB_TASKS = 10_000  # the documented largest job


@dataclass(frozen=True)
class Config:
    machines: tuple[int, ...] = (100, 1000, 5000, 10000)
    replicas: tuple[int, ...] = (1, 3, 5)
    replica_cpu: float | None = 0.3
    tasks_per_machine: int = 10
    poll_interval: float = 2.0
    down_after: int = 5
    arrival_per_min: int = ARRIVAL_PER_MIN
    arrival_job: int = 100  # tasks per arriving job
    measure_s: float = 45.0
    confirm_s: float = CONFIRM_S  # how long after the window the arrivals may take to be confirmed
    fill_timeout_s: float = 240.0
    readers: int = 2
    reads: str = "followers"  # where the readers send their reads: READS
    writers: int = 4
    idle_s: float = 20.0  # how long each role's CPU is measured on the cell alone, before the fill (0: not)
    every_size: bool = False  # run every size even after one missed the SLOs (to compare costs across sizes)
    keep_logs: bool = False  # copy each cell's process logs into out/logs/m{machines}-r{replicas}
    # After the borglets run every fill task, wait (within `fill_timeout_s`) until the leader's
    # records say so too, before the window: the arrivals then meet a cell that has taken in
    # its fill, not one still recording it (False: open the window at once, as campaigns did
    # before `settle_s` was measured).
    settle: bool = True
    out: Path = Path("reports/scale")


# --- one run ------------------------------------------------------------------------------------


def admin_headers(root: Path) -> dict[str, str]:
    """The admin's bearer token of the cell in state dir `root`, as request headers."""
    return auth_headers(read_admin_token(root))


def cpu_seconds(pid: int) -> float:
    """CPU seconds (user + system) process `pid` has used so far; 0 once it is gone."""
    try:
        t = psutil.Process(pid).cpu_times()
        return float(t.user + t.system)
    except psutil.Error:
        return 0.0


def role_cpu(roles: dict[str, list[int]]) -> dict[str, float]:
    """CPU seconds used so far by each role's processes together (`process_roles`)."""
    return {role: sum(cpu_seconds(p) for p in pids) for role, pids in roles.items()}


def leader_work(http: httpx.Client, leader_url: str | None) -> dict[str, float]:
    """The leader's work counters so far, from its /metrics: each `minborg_work_total{kind}`
    by its kind, and the records its committed txns wrote (`records_written`) and those txns
    (`txns`); {} when it does not answer."""
    if not leader_url:
        return {}
    out: dict[str, float] = {}
    try:
        for family in text_string_to_metric_families(http.get(f"{leader_url}/metrics").text):
            for s in family.samples:
                if s.name == "minborg_work_total":
                    out[s.labels["kind"]] = s.value
                elif s.name == "minborg_txn_ops_total":
                    out["records_written"] = s.value
                elif s.name == "minborg_txns_total" and s.labels.get("outcome") == "committed":
                    out["txns"] = s.value
    except (httpx.HTTPError, ValueError):
        return {}
    return dict(sorted(out.items()))


def per_task(after: dict[str, float], before: dict[str, float], tasks: int, scale: float = 1.0) -> dict[str, float]:
    """What each counter of `after` grew by since `before` (a counter `before` lacks: from 0),
    per task of `tasks`, times `scale` (1000: CPU seconds as milliseconds), in `after`'s order."""
    return {k: round(scale * (v - before.get(k, 0)) / max(1, tasks), 3) for k, v in after.items()}


def process_roles(info: CellInfo, leader: str | None) -> dict[str, list[int]]:
    """The cell's process ids by what they do: leader, followers, scheduler, etcd, hollow."""
    roles: dict[str, list[int]] = {"leader": [], "followers": [], "scheduler": [], "etcd": [], "hollow": []}
    for p in info.processes:
        if p.role is Role.MASTER:
            roles["leader" if p.name == leader else "followers"].append(p.pid)
        elif p.role is Role.SCHEDULER:
            roles["scheduler"].append(p.pid)
        elif p.role is Role.ETCD:
            roles["etcd"].append(p.pid)
        elif p.role is Role.BORGLET and p.name == HOLLOW_PROCESS:
            roles["hollow"].append(p.pid)
    return roles


def _etcd_bytes(root: Path) -> int:
    return max((f.stat().st_size for f in (root / "etcd").rglob("db") if f.is_file()), default=0)


READS = ("followers", "all")  # where the readers send their reads (Config.reads)


def read_targets(urls: list[str], leader_url: str | None, reads: str) -> list[str]:
    """The replicas the readers call: with `reads` "followers", those that do not lead, when
    the cell has any (Borg spreads read-only RPCs over the replicas; the leader writes);
    with "all", every replica in turn, the leader included."""
    if reads not in READS:
        raise ValueError(f"reads must be one of {', '.join(READS)}, not {reads!r}")
    if reads == "all":
        return list(urls)
    followers = [u for u in urls if u != leader_url]
    return followers if followers and leader_url in urls else list(urls)


class Probe:
    """Readers calling GET /v1/cell on the given replicas in turn until stopped."""

    def __init__(self, urls: list[str], headers: dict[str, str], readers: int, pause_s: float = 0.05) -> None:
        self.urls, self.headers, self.pause_s = urls, headers, pause_s
        self.latencies: list[float] = []
        self.errors = 0
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=self._read, args=(i,), daemon=True) for i in range(readers)]

    def start(self) -> None:
        for t in self._threads:
            t.start()

    def stop(self) -> None:
        self._stop.set()
        for t in self._threads:
            t.join(15)

    def _read(self, i: int) -> None:
        with httpx.Client(timeout=10.0, headers=self.headers) as http:
            n = i
            while not self._stop.is_set():
                url = self.urls[n % len(self.urls)]
                n += 1
                began = time.perf_counter()
                try:
                    ok = http.get(f"{url}/v1/cell").status_code == 200
                except httpx.HTTPError:
                    ok = False
                if ok:
                    self.latencies.append(time.perf_counter() - began)
                else:
                    self.errors += 1
                self._stop.wait(self.pause_s)


def sleeper_job(name: str, count: int) -> dict[str, Any]:
    return {
        "name": name, "user": "scale", "priority": 100, "task_count": count,
        "request": {"cpu": "1m", "ram": "1MiB"}, "command": ["/bin/sleep", "86400"],
        "restart_policy": "never",
    }  # fmt: skip


def hollow_jobs(http: httpx.Client, served: str) -> dict[str, Any]:
    """What the hollow machines served at `served` run, per job (`/v1/hollow/jobs`)."""
    return http.get(f"{served}/v1/hollow/jobs", timeout=60.0).json()


def confirm_arrivals(
    http: httpx.Client, served: str, submitted: dict[str, float], per_job: int, limit_s: float
) -> dict[str, Any]:
    """The hollow borglets' jobs once every submitted job runs all its `per_job` tasks, or
    after `limit_s` seconds, whichever comes first (polled every 2 s)."""
    deadline = time.monotonic() + limit_s
    while True:
        seen = hollow_jobs(http, served)
        jobs = seen.get("jobs") or {}
        if all((jobs.get(k) or {}).get("running", 0) >= per_job for k in submitted) or time.monotonic() >= deadline:
            return seen
        time.sleep(2.0)


def start_cell(
    cfg: Config, machines: int, replicas: int, root: Path, *, insecure_channel: bool = False
) -> CellInfo:
    """A fresh hollow cell of `machines` in `root` as every run of the campaign starts one:
    `replicas` replicas held to `cfg.replica_cpu` cores, one scheduler process, the poll
    interval of `cfg`; `insecure_channel`: unsigned (to measure what signing costs)."""
    if root.exists():
        shutil.rmtree(root)
    return launcher.up(
        root, cell=CELL, replicas=replicas, machines=0, hollow=machines, replica_cpu=cfg.replica_cpu,
        master_args=["--poll-interval", str(cfg.poll_interval), "--down-after", str(cfg.down_after)],
        fresh=True, machine_capacity="cpu=4000m,ram=8GiB", insecure_channel=insecure_channel,
    )  # fmt: skip


def hollow_url(info: CellInfo) -> str:
    """The URL of the process that serves the cell's hollow machines."""
    return next(p.url for p in info.processes if p.role is Role.BORGLET and p.name == HOLLOW_PROCESS)


def running_of(http: httpx.Client, served: str, prefix: str) -> int:
    """Tasks the hollow machines served at `served` run, of the jobs whose key starts with `prefix`."""
    return sum(j["running"] for k, j in hollow_jobs(http, served)["jobs"].items() if k.startswith(prefix))


def fill(http: httpx.Client, url: str, served: str, total: int, timeout_s: float) -> tuple[int, float | None]:
    """Submit jobs of at most MAX_JOB_TASKS up to `total` tasks through the replica at `url`
    (each retried while the cell has no leader, within `timeout_s`) and wait until the hollow machines served at `served` run them all: (tasks confirmed
    running, seconds it took, None when `timeout_s` passed first)."""
    began = time.time()
    n, left = 0, total
    while left > 0:
        count = min(MAX_JOB_TASKS, left)
        _submit(http, url, sleeper_job(f"fill{n}", count), timeout_s)
        n, left = n + 1, left - count
    deadline = time.monotonic() + timeout_s
    while True:
        confirmed = running_of(http, served, "scale/fill")
        if confirmed >= total:
            return confirmed, round(time.time() - began, 1)
        if time.monotonic() > deadline:
            return confirmed, None
        time.sleep(2.0)


def settle(http: httpx.Client, url: str, total: int, timeout_s: float) -> float | None:
    """Wait until the replica at `url` (the leader) confirms `total` tasks running (its
    `running_confirmed`, the tasks whose borglet reported their process started, as its
    records hold them): the seconds it took, or None when `timeout_s` passed first."""
    began = time.monotonic()
    while True:
        try:
            confirmed = int(http.get(f"{url}/v1/cell").json()["tasks"]["running_confirmed"])
        except (httpx.HTTPError, ValueError, KeyError, TypeError):
            confirmed = -1  # no answer now (a busy leader): asked again
        if confirmed >= total:
            return round(time.monotonic() - began, 1)
        if time.monotonic() - began > timeout_s:
            return None
        time.sleep(2.0)


def _submit(http: httpx.Client, url: str, job: dict[str, Any], retry_s: float) -> None:
    """Submit `job`, again while the cell answers 503 (a replica between leaders says
    "retry") or not at all, for up to `retry_s` seconds; RuntimeError on any other refusal."""
    deadline = time.monotonic() + retry_s
    retried = False
    while True:
        try:
            response: httpx.Response | None = http.post(f"{url}/v1/jobs", json=job)
        except httpx.HTTPError:
            response = None
        if response is not None and (response.status_code == 201 or (retried and response.status_code == 409)):
            return  # 409 after a retry: the submit that got no answer had arrived
        if (response is not None and response.status_code != 503) or time.monotonic() > deadline:
            answer = f"{response.status_code} {response.text[:200]}" if response is not None else "no answer"
            raise RuntimeError(f"submit {job['name']}: {answer}")
        retried = True
        time.sleep(1.0)


def run_one(cfg: Config, machines: int, replicas: int, say: Any = print) -> Result:
    result = Result(machines, replicas, cfg.replica_cpu)
    root = cfg.out / "cells" / f"m{machines}-r{replicas}"
    began = time.monotonic()
    try:
        info = start_cell(cfg, machines, replicas, root)
    except Exception as err:  # a cell that does not come up is a result too
        result.error = f"cell up: {err}"
        stop_cell(root)
        return result
    result.up_s = round(time.monotonic() - began, 1)
    say(f"  up in {result.up_s} s")
    try:
        _measure(cfg, info, root, result, say)
    except Exception as err:
        result.error = f"{type(err).__name__}: {err}"
    finally:
        result.declared_down = declared_down(root)
        if cfg.keep_logs and (root / "logs").is_dir():
            shutil.copytree(root / "logs", cfg.out / "logs" / root.name, dirs_exist_ok=True)
        stop_cell(root)
    return result


def declared_down(root: Path) -> int:
    """How many times the cell's masters declared a machine down, from their logs."""
    total = 0
    for log in sorted((root / "logs").glob("master*.log")):
        with log.open(errors="replace") as f:
            total += count_declared_down(f)
    return total


def stop_cell(root: Path) -> None:
    """Stop the cell in `root` and delete its state dir."""
    try:
        launcher.down(root)
    except Exception as err:
        print(f"  cell down: {err}")
    shutil.rmtree(root, ignore_errors=True)


def _measure(cfg: Config, info: CellInfo, root: Path, result: Result, say: Any) -> None:
    headers = admin_headers(root)
    urls = list(info.master_urls)
    served = hollow_url(info)
    http = httpx.Client(timeout=60.0, headers=headers)
    try:
        result.fill_tasks = cfg.tasks_per_machine * result.machines
        # The fill's CPU per task, per role, read from /proc before and after: what each task
        # costs the leader, whatever its budget (issue 43 compares it across cell sizes).
        overview = http.get(f"{urls[0]}/v1/cell").json()
        before = process_roles(info, overview.get("leader"))
        # What each role spends a second on the cell alone (its machines up, no task yet): the
        # part of the fill's cost that grows with the fill's length, not with its tasks.
        if cfg.idle_s > 0:
            idle0 = role_cpu(before)
            time.sleep(cfg.idle_s)
            idle1 = role_cpu(before)
            result.idle_cores = {role: round((idle1[role] - idle0[role]) / cfg.idle_s, 3) for role in before}
        work_before = leader_work(http, overview.get("leader_url"))
        cpu_before = role_cpu(before)
        result.fill_confirmed, result.fill_s = fill(http, urls[0], served, result.fill_tasks, cfg.fill_timeout_s)
        cpu_after = role_cpu(before)
        result.fill_cpu_ms_per_task = per_task(cpu_after, cpu_before, result.fill_confirmed, scale=1000)
        result.fill_work_per_task = per_task(leader_work(http, overview.get("leader_url")), work_before, result.fill_confirmed)
        say(f"  fill: {result.fill_confirmed}/{result.fill_tasks} confirmed" + (f" in {result.fill_s} s" if result.fill_s else "")
            + "; CPU ms per task " + ", ".join(f"{r} {v}" for r, v in result.fill_cpu_ms_per_task.items()))  # fmt: skip
        if cfg.settle and result.fill_s is not None:
            result.settle_s = settle(http, overview.get("leader_url") or urls[0], result.fill_tasks, cfg.fill_timeout_s)
            result.settled_cpu_ms_per_task = per_task(role_cpu(before), cpu_before, result.fill_confirmed, scale=1000)
            result.settled_work_per_task = per_task(
                leader_work(http, overview.get("leader_url")), work_before, result.fill_confirmed
            )
            say("  the leader confirmed them " + (f"{result.settle_s} s later" if result.settle_s is not None else "not in time")
                + "; CPU ms per task to then " + ", ".join(f"{r} {v}" for r, v in result.settled_cpu_ms_per_task.items()))  # fmt: skip

        # The window: steady arrivals, readers, CPU.
        overview = http.get(f"{urls[0]}/v1/cell").json()
        leader, leader_url = overview.get("leader"), overview.get("leader_url")
        roles = process_roles(info, leader)
        cpu0 = role_cpu(roles)
        targets = read_targets(urls, leader_url, cfg.reads)
        result.reads_to = "followers" if leader_url not in targets else "all"
        probe = Probe(targets, headers, cfg.readers)
        # The leader's own read latency, reported beside the readers' when they avoid it.
        leader_probe = Probe([leader_url], headers, 1, pause_s=0.1) if leader_url and leader_url not in targets else None
        for p in (probe, leader_probe):
            if p is not None:
                p.start()
        writes: list[float] = []
        submitted: dict[str, float] = {}
        lock = threading.Lock()
        window_began = time.monotonic()
        # Arrivals come from several clients at once, each pacing its share of the rate, so a
        # slow submit delays its own client only (as many users submitting to one cell would).
        every = 60.0 * cfg.arrival_job * cfg.writers / cfg.arrival_per_min

        def arrive(w: int) -> None:
            with httpx.Client(timeout=60.0, headers=headers) as client:
                k = 0
                while time.monotonic() - window_began < cfg.measure_s:
                    name = f"arrive{w}-{k}"
                    sent = time.perf_counter()
                    try:
                        response = client.post(f"{urls[(w + k) % len(urls)]}/v1/jobs", json=sleeper_job(name, cfg.arrival_job))
                        ok = response.status_code == 201
                        failure = "" if ok else f"{response.status_code} {response.text[:120]}"
                    except httpx.HTTPError as err:
                        ok, failure = False, f"{type(err).__name__} after {time.perf_counter() - sent:.1f} s"
                    with lock:
                        if ok:
                            writes.append(time.perf_counter() - sent)
                            submitted[f"scale/{name}"] = time.time()
                        else:
                            result.write_errors += 1
                            result.write_failures.append(failure)
                    k += 1
                    time.sleep(max(0.0, window_began + w * every / cfg.writers + k * every - time.monotonic()))

        writers = [threading.Thread(target=arrive, args=(w,), daemon=True) for w in range(cfg.writers)]
        for t in writers:
            t.start()
        for t in writers:
            t.join(cfg.measure_s + 120)
        elapsed = time.monotonic() - window_began
        for p in (probe, leader_probe):
            if p is not None:
                p.stop()
        cpu1 = role_cpu(roles)
        result.cpu = {role: round((cpu1[role] - cpu0[role]) / elapsed, 3) for role in roles}
        # Wait (bounded) until every arriving job is confirmed running on the hollow borglets,
        # then take the rate at which they started (scale_results.sustained_per_min).
        seen = confirm_arrivals(http, served, submitted, cfg.arrival_job, cfg.confirm_s)
        result.started_twice = int(seen.get("started_twice") or 0)
        result.index_twice = int(seen.get("index_twice") or 0)
        latencies = []
        confirmed, starts = 0, []
        for key, at in submitted.items():
            j = seen["jobs"].get(key)
            if j and j["running"] >= cfg.arrival_job:
                confirmed += j["running"]
                latencies.append(max(0.0, j["last_started_at"] - at))
                starts.append((j.get("first_started_at") or j["last_started_at"], j["last_started_at"]))
        result.arrived = len(submitted) * cfg.arrival_job
        result.arrivals_confirmed = confirmed
        result.confirmed_per_min = sustained_per_min(confirmed, starts, list(submitted.values()))
        result.offered_per_min = cfg.arrival_per_min
        result.start_latency_p50_s = _q(latencies, 50)
        result.start_latency_p95_s = _q(latencies, 95)
        result.reads, result.read_errors = len(probe.latencies), probe.errors
        result.read_p50_s, result.read_p99_s = _q(probe.latencies, 50), _q(probe.latencies, 99)
        if leader_probe is not None:
            result.leader_read_p50_s = _q(leader_probe.latencies, 50)
            result.leader_read_p99_s = _q(leader_probe.latencies, 99)
        result.writes = len(writes)
        result.write_p50_s, result.write_p99_s = _q(writes, 50), _q(writes, 99)
        for url in urls:
            try:
                result.shards.append(http.get(f"{url}/v1/shard").json())
            except (httpx.HTTPError, ValueError):
                result.shards.append({"url": url, "error": "no answer"})
        result.poll = poll_summary(result.shards)
        result.etcd_db_bytes = _etcd_bytes(root)
    finally:
        http.close()


def _q(values: list[float], q: float) -> float | None:
    p = percentile(values, q / 100)
    return round(p, 4) if p is not None else None


# --- the campaign -------------------------------------------------------------------------------


def run(cfg: Config, run_one: Any = run_one) -> list[Result]:
    """Every (machines, replicas) of `cfg` in order of size; a replica count's ladder stops at
    its first size that misses the SLOs, unless `cfg.every_size`."""
    cfg.out.mkdir(parents=True, exist_ok=True)
    results: list[Result] = []
    path = cfg.out / "results.json"
    commit = tree_commit()  # the tree it starts on
    failed: set[int] = set()  # replica counts whose ladder has stopped
    for machines in cfg.machines:
        for replicas in cfg.replicas:
            if replicas in failed:
                continue  # a larger cell would not meet the SLOs either: the ladder stops
            print(f"scale: {machines} hollow machines, {replicas} replica(s), {cfg.replica_cpu} cores each", flush=True)
            r = run_one(cfg, machines, replicas)
            results.append(r)
            print(f"  -> {'meets the SLOs' if r.slo_met else '; '.join(failures(r))}", flush=True)
            if not r.slo_met and not cfg.every_size:
                failed.add(replicas)
            path.write_text(json.dumps(
                {"config": config_json(cfg, commit), "results": [asdict(x) for x in results]}, indent=1
            ))  # fmt: skip
    return results


def config_json(cfg: Config, commit: str | None = None) -> dict[str, Any]:
    d = asdict(cfg)
    d["out"] = str(cfg.out)
    d["commit"] = tree_commit() if commit is None else commit
    return d


def tree_commit() -> str:
    """The commit the campaign ran on ("" outside a git checkout), "+" after it when the
    tree differed from it."""
    repo = Path(__file__).resolve().parents[1]
    try:
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=repo, capture_output=True, text=True, timeout=10)
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=repo, capture_output=True,
                               text=True, timeout=10)  # fmt: skip
    except (OSError, subprocess.SubprocessError):
        return ""
    if head.returncode != 0:
        return ""
    return head.stdout.strip() + ("+" if dirty.stdout.strip() else "")


def _ints(text: str) -> tuple[int, ...]:
    return tuple(int(x) for x in text.split(",") if x.strip())


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="minborg campaign scale", description=__doc__.split("\n", 1)[0])
    p.add_argument("--machines", default="100,1000,5000,10000", help="hollow machines per cell, comma separated")
    p.add_argument("--replicas", default="1,3,5", help="replica counts, comma separated")
    p.add_argument("--replica-cpu", type=float, default=0.3, help="cores per replica and scheduler (0: no budget)")
    p.add_argument("--tasks-per-machine", type=int, default=10)
    p.add_argument("--poll-interval", type=float, default=2.0)
    p.add_argument("--arrival-per-min", type=int, default=ARRIVAL_PER_MIN)
    p.add_argument("--measure-s", type=float, default=45.0)
    p.add_argument("--fill-timeout-s", type=float, default=240.0)
    p.add_argument("--confirm-s", type=float, default=CONFIRM_S, help="how long after the window the arrivals may take to start")
    p.add_argument(
        "--reads", choices=READS, default="followers",
        help="where the readers send GET /v1/cell: the replicas that do not lead, when there are any (default; "
        "the leader's own read latency is measured beside), or every replica in turn",
    )  # fmt: skip
    p.add_argument("--out", default="reports/scale")
    p.add_argument(
        "--report", default=None,
        help="the report to write (default: report.md in --out; reports/scale.md is rebuilt from several "
        "campaigns by python -m loadtests.scale_report, whose command it names)",
    )  # fmt: skip
    p.add_argument("--report-only", action="store_true", help="rewrite the report from the last results.json")
    p.add_argument(
        "--check", action="store_true",
        help="exit 1 when a run broke a promise (failed, a task id started twice, an index running twice, the fill incomplete); SLOs are measured, not checked",
    )  # fmt: skip
    p.add_argument(
        "--every-size", action="store_true",
        help="run every size even after a smaller one missed the SLOs (to compare the leader's CPU per task across sizes in one run)",
    )  # fmt: skip
    p.add_argument(
        "--idle-s", type=float, default=20.0,
        help="seconds each role's CPU is measured with the machines up and no task, before each fill (0: not)",
    )  # fmt: skip
    p.add_argument("--keep-logs", action="store_true", help="copy each cell's process logs into --out/logs")
    p.add_argument(
        "--no-settle", action="store_true",
        help="open the arrivals' window as soon as the borglets run the fill, not once the leader's records say so too",
    )  # fmt: skip
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    random.seed(args.seed)
    cfg = Config(
        machines=_ints(args.machines), replicas=_ints(args.replicas),
        replica_cpu=args.replica_cpu or None, tasks_per_machine=args.tasks_per_machine,
        poll_interval=args.poll_interval, arrival_per_min=args.arrival_per_min, measure_s=args.measure_s,
        fill_timeout_s=args.fill_timeout_s, confirm_s=args.confirm_s, reads=args.reads, out=Path(args.out),
        every_size=args.every_size, idle_s=args.idle_s, keep_logs=args.keep_logs, settle=not args.no_settle,
    )  # fmt: skip
    results = run(cfg) if not args.report_only else []
    from loadtests.scale_report import write_report

    print(write_report(cfg.out / "results.json", Path(args.report) if args.report else cfg.out / "report.md"))
    broken = [r for r in results if broke_a_promise(r)]
    if args.check and broken:
        for r in broken:
            print(f"broken promise at {r.machines} machines, {r.replicas} replica(s): {failures(r)[0]}")
        raise SystemExit(1)


if __name__ == "__main__":
    main()
