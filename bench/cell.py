"""`python -m bench.cell`: start a local cell and measure task start latency, failover, lost writes, API latency and master RSS.

Task start: a 100-task job is submitted; each task's latency is the borglet's start time of
its process minus the moment the submit was sent. Failover: the leader is SIGKILLed N
times (restarted in between); each time, from the kill to the first write the cell accepts.
Lost writes: a writer submits jobs all along; every acknowledged one must be present after.

`--runtime docker` runs the job's tasks as containers of `--image` (the borglets run the docker
runtime) and measures each task's memory on the host: its processes' RSS, plus, for a
container, its runtime shim's and its share of the engine's growth. `--image-absent` removes
the image first: the borglets load it from an image store (`docker save` archives) on the
first start that misses it.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import psutil

from bench.stats import percentile
from reference.borglet.taskusers import task_python
from reference.launcher.testcell import LocalCell, wait_for
from reference.store.etcd_cluster import ELECTION_MS, HEARTBEAT_MS


def job(name: str, count: int, image: str = "") -> dict[str, Any]:
    """A job of `count` sleeping tasks; with `image`, its tasks run in containers of it.

    64 MiB each: an interpreter does not start under 8 MiB (the address-space limit of the
    rlimit isolation, or a container's memory limit), and a task that crash-loops would be
    counted as started at its first spawn."""
    return {
        "name": name, "user": "bench", "priority": 100, "task_count": count,
        "request": {"cpu": "10m", "ram": "64MiB"},
        "command": ["python" if image else task_python(), "-c", "import time; time.sleep(3600)"],
        "restart_policy": "on_failure", **({"image": image} if image else {}),
    }  # fmt: skip


ENGINE = ("dockerd", "containerd")  # the engine's own processes, whose growth a container costs


def rss_of(pids: list[int]) -> int:
    total = 0
    for pid in pids:
        try:
            total += psutil.Process(pid).memory_info().rss
        except psutil.Error:
            continue
    return total


def tree(pid: int) -> list[int]:
    try:
        return [pid, *(c.pid for c in psutil.Process(pid).children(recursive=True))]
    except psutil.Error:
        return []


def engine_rss() -> int:
    return rss_of([p.pid for p in psutil.process_iter(["name"]) if p.info["name"] in ENGINE])


def task_memory(tasks: list[dict[str, Any]], engine_before: int, containers: bool) -> dict[str, float]:
    """Per task, in MiB: its processes' RSS (a container's: its init and the task), and for a
    container its shim's RSS and its share of the engine's growth since before the job."""
    pids = [int(t["pid"]) for t in tasks if t.get("pid")]
    own = sum(rss_of(tree(pid)) for pid in pids) / max(1, len(pids))
    out = {"tasks_measured": len(pids), "task_rss_mib": own / 2**20}
    if containers:
        shims = {psutil.Process(pid).ppid() for pid in pids if psutil.pid_exists(pid)}
        out["shim_rss_mib"] = rss_of(sorted(shims)) / max(1, len(pids)) / 2**20
        out["engine_growth_mib"] = (engine_rss() - engine_before) / max(1, len(pids)) / 2**20
        out["total_mib"] = out["task_rss_mib"] + out["shim_rss_mib"] + out["engine_growth_mib"]
    else:
        out["total_mib"] = out["task_rss_mib"]
    return out


class RssSampler(threading.Thread):
    def __init__(self, cell: LocalCell) -> None:
        super().__init__(daemon=True)
        self.cell, self.peak, self.stop_flag = cell, 0, threading.Event()

    def run(self) -> None:
        while not self.stop_flag.wait(0.5):
            for m in self.cell.live_masters():
                try:
                    assert m.pid is not None
                    self.peak = max(self.peak, psutil.Process(m.pid).memory_info().rss)
                except (psutil.Error, AssertionError):
                    pass


def task_start(cell: LocalCell, count: int, image: str = "") -> dict[str, Any]:
    engine_before = engine_rss() if image else 0
    sent = time.time()
    r = cell.submit(job("start", count, image))
    r.raise_for_status()

    def started() -> list[dict[str, Any]] | None:
        # Started as the borglets confirm it (a placed task may still wait in a borglet's queue).
        ts = [t for t in cell.tasks("bench", "start") if t["state"] == "RUNNING" and t.get("confirmed") and t.get("started_at")]
        return ts if len(ts) >= count else None

    tasks = wait_for(started, 300, f"{count} tasks started", every=0.2)
    lat = [t["started_at"] - sent for t in tasks]
    memory = task_memory([cell_task(cell, t) for t in tasks], engine_before, bool(image))
    cell.request("DELETE", "/v1/jobs/bench/start")
    return {
        "tasks": count, "p50_s": percentile(lat, 0.5), "p99_s": percentile(lat, 0.99), "max_s": max(lat),
        "memory": memory,
    }  # fmt: skip


def cell_task(cell: LocalCell, listed: dict[str, Any]) -> dict[str, Any]:
    """A task's full record (its pid is in the one-task answer, not in the list)."""
    if listed.get("pid"):
        return listed
    return cell.get(f"/v1/jobs/bench/start/tasks/{listed['index']}")


def image_absent(image: str, store: Path) -> None:
    """Save `image` into the image store the borglets load from, then remove it from the engine."""
    from reference.borglet.containers import store_path

    store.mkdir(parents=True, exist_ok=True)
    subprocess.run(["docker", "save", "-o", store_path(str(store), image), image], check=True)
    subprocess.run(["docker", "rmi", image], check=True, stdout=subprocess.DEVNULL)


def api_latency(cell: LocalCell, reads: int = 300, writes: int = 60) -> dict[str, float]:
    leader = cell.wait_leader()
    follower = next((m for m in cell.live_masters() if m is not leader), leader)
    rl, wl = [], []
    for i in range(reads):
        t = time.perf_counter()
        cell.request("GET", "/v1/jobs", master=(leader, follower)[i % 2]).raise_for_status()
        rl.append(time.perf_counter() - t)
    for i in range(writes):
        t = time.perf_counter()
        r = cell.request("POST", "/v1/jobs", master=(leader, follower)[i % 2], json=job(f"lat{i}", 0))
        wl.append(time.perf_counter() - t)
        assert r.status_code == 201, r.text
    return {
        "read_p50_ms": percentile(rl, 0.5) * 1e3, "read_p99_ms": percentile(rl, 0.99) * 1e3,
        "write_p50_ms": percentile(wl, 0.5) * 1e3, "write_p99_ms": percentile(wl, 0.99) * 1e3,
    }  # fmt: skip


class Writer(threading.Thread):
    """Submits jobs one after another through any live master; remembers the acknowledged."""

    def __init__(self, cell: LocalCell) -> None:
        super().__init__(daemon=True)
        self.cell, self.acked, self.stop_flag, self.n = cell, [], threading.Event(), 0
        self.http = httpx.Client(timeout=5.0, headers=cell.auth)

    def run(self) -> None:
        while not self.stop_flag.is_set():
            name = f"w{self.n}"
            for m in self.cell.live_masters():
                try:
                    r = self.http.post(m.url + "/v1/jobs", json=job(name, 0))
                except httpx.HTTPError:
                    continue
                if r.status_code == 201:
                    self.acked.append(f"bench/{name}")
                    self.n += 1
                    break
                if r.status_code == 409:  # committed by an earlier try whose answer was lost
                    self.n += 1
                    break
            self.stop_flag.wait(0.05)


def failover(cell: LocalCell, kills: int) -> dict[str, Any]:
    writer = Writer(cell)
    writer.start()
    times = []
    for k in range(kills):
        leader = cell.wait_leader(30)
        time.sleep(0.5)
        killed = time.monotonic()
        leader.kill(signal.SIGKILL)
        i = 0
        while True:
            i += 1
            ok = False
            for m in cell.live_masters():
                try:
                    r = cell.http.post(m.url + "/v1/jobs", json=job(f"probe{k}-{i}", 0), timeout=5)
                    ok = r.status_code == 201
                except httpx.HTTPError:
                    pass
                if ok:
                    break
            if ok:
                times.append(time.monotonic() - killed)
                break
            if time.monotonic() - killed > 60:
                raise AssertionError("no write accepted within 60 s of the kill")
            time.sleep(0.02)
        cell.restart(leader)
        wait_for(lambda m=leader: cell.http.get(m.url + "/healthz", timeout=1).status_code == 200, 30, "replica back")
        print(f"  kill {k + 1}/{kills}: first accepted write after {times[-1]:.2f}s", file=sys.stderr)
    writer.stop_flag.set()
    writer.join(10)
    time.sleep(1.0)
    missing: set[str] = set()
    for m in cell.live_masters():
        present = {j["key"] for j in cell.get("/v1/jobs", master=m)["jobs"]}
        missing |= set(writer.acked) - present
    return {
        "kills": kills, "p50_s": percentile(times, 0.5), "p99_s": percentile(times, 0.99), "max_s": max(times),
        "mean_s": statistics.mean(times), "acked_writes": len(writer.acked), "lost_writes": len(missing),
    }  # fmt: skip


def etcd_raft_term(cell: LocalCell) -> int | None:
    """The highest Raft term any etcd member reports (a fresh cluster's first election gives 2)."""
    terms = []
    for i in range(len(cell.etcd.members)):
        try:
            terms.append(int((cell.etcd.member_status(i, timeout=2) or {})["raftTerm"]))
        except (ValueError, KeyError):
            continue
    return max(terms, default=None)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="minborg bench cell", description=__doc__)
    p.add_argument("--replicas", type=int, default=3, choices=(1, 3, 5))
    p.add_argument("--machines", type=int, default=4)
    p.add_argument("--tasks", type=int, default=100)
    p.add_argument("--kills", type=int, default=20)
    p.add_argument("--lease-ttl", type=float, default=2.0)
    p.add_argument("--poll-interval", type=float, default=1.0)
    p.add_argument("--etcd-heartbeat-ms", type=int, default=HEARTBEAT_MS)
    p.add_argument("--etcd-election-ms", type=int, default=ELECTION_MS)
    p.add_argument("--runtime", choices=("process", "docker"), default="process", help="the borglets' runtime")
    p.add_argument("--image", default="minborg/hello_world", help="with --runtime docker: the tasks' image")
    p.add_argument(
        "--image-absent", action="store_true",
        help="with --runtime docker: remove the image first; the borglets load it from an image store",
    )  # fmt: skip
    p.add_argument("--json", action="store_true", help="print the results as one JSON object")
    p.add_argument("--workdir", default=None, help="keep logs here (default: a temporary directory)")
    args = p.parse_args(argv)
    workdir = Path(args.workdir or tempfile.mkdtemp(prefix="minborg-bench-"))
    image = args.image if args.runtime == "docker" else ""
    borglet_args: tuple[str, ...] = ()
    if image:
        borglet_args = ("--runtime", "docker", "--cell", "bench", "--image-store", str(workdir / "images"))
        if args.image_absent:
            image_absent(image, workdir / "images")
    cell = LocalCell(
        workdir, masters=args.replicas, borglets=args.machines, capacity="cpu=64000m,ram=64GiB",
        cell="bench", poll_interval=args.poll_interval, lease_ttl=args.lease_ttl,
        etcd_heartbeat_ms=args.etcd_heartbeat_ms, etcd_election_ms=args.etcd_election_ms,
        master_args=("--rate-limit", "0"),  # the bench's one client is the admin, as fast as it goes
        borglet_args=borglet_args,
    )  # fmt: skip
    results: dict[str, Any] = {
        "replicas": args.replicas, "machines": args.machines, "workdir": str(workdir), "lease_ttl": args.lease_ttl,
        "etcd_heartbeat_ms": args.etcd_heartbeat_ms, "etcd_election_ms": args.etcd_election_ms,
        "loadavg_before": os.getloadavg(), "runtime": args.runtime, "image": image,
        "image_absent": bool(image and args.image_absent),
    }  # fmt: skip
    with cell:
        rss = RssSampler(cell)
        rss.start()
        results["task_start"] = task_start(cell, args.tasks, image)
        results["api"] = api_latency(cell)
        if args.kills > 0 and args.replicas > 1:
            results["failover"] = failover(cell, args.kills)
        rss.stop_flag.set()
        results["master_peak_rss_mib"] = round(rss.peak / 2**20, 1)
        # The bench never kills etcd: every Raft term past the first election is a spurious one.
        results["etcd_raft_term"] = etcd_raft_term(cell)
    results["leftover_processes"] = len(cell.leftovers())
    results["loadavg_after"] = os.getloadavg()
    if args.json:
        print(json.dumps(results, indent=2))
    else:
        ts, api = results["task_start"], results["api"]
        print(f"task start ({ts['tasks']} tasks): p50 {ts['p50_s']:.3f}s p99 {ts['p99_s']:.3f}s max {ts['max_s']:.3f}s")
        print("memory per task: " + ", ".join(f"{k} {v:.2f}" for k, v in ts["memory"].items()))
        print(f"API reads p50 {api['read_p50_ms']:.1f}ms p99 {api['read_p99_ms']:.1f}ms; "
              f"writes p50 {api['write_p50_ms']:.1f}ms p99 {api['write_p99_ms']:.1f}ms")  # fmt: skip
        if "failover" in results:
            f = results["failover"]
            print(f"failover ({f['kills']} leader kills): p50 {f['p50_s']:.2f}s p99 {f['p99_s']:.2f}s "
                  f"max {f['max_s']:.2f}s; acknowledged writes {f['acked_writes']}, lost {f['lost_writes']}")  # fmt: skip
        print(f"master peak RSS {results['master_peak_rss_mib']} MiB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
