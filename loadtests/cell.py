"""A fresh local cell for one campaign run: start it, put hello_world on it, list its processes, stop it."""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil
import yaml

from loadtests.jobs import small_job
from reference import launcher
from reference.client import CellClient
from reference.launcher import CellInfo, Role

CELL_NAME = "load"
SERVICE_JOB = "demo/hello_world"
# One machine large enough for every hello_world task of the service campaign.
MACHINE_CAPACITY = "cpu=8000m,ram=16GiB"
ENDPOINTS_TIMEOUT_S = 60.0


@dataclass(frozen=True)
class WatchedProcess:
    """A cell process the sampler follows: its role, a readable name and its pid."""

    role: str
    name: str
    pid: int


# Every simulated client sends the admin token, so the per-user rate limit is off: a campaign
# measures the master, not the limiter.
MASTER_ARGS = ("--rate-limit", "0")


def start(
    state_dir: Path, replicas: int, etcd_members: int | None = None, replica_cpu: float | None = None,
    store_tls: bool = True,
) -> CellInfo:  # fmt: skip
    """A new cell of `replicas` masters and etcd members (unless told otherwise), one machine;
    `replica_cpu` holds each master and the scheduler process to that many cores; `store_tls`
    False: etcd on plain http (only to measure what TLS costs)."""
    return launcher.up(
        state_dir, cell=CELL_NAME, replicas=replicas, machines=1,
        machine_capacity=MACHINE_CAPACITY, etcd_members=etcd_members, master_args=MASTER_ARGS,
        replica_cpu=replica_cpu, store_tls=store_tls,
    )  # fmt: skip


def client(info: CellInfo, urls: list[str] | None = None) -> CellClient:
    """A client of the cell as its admin."""
    return CellClient(urls or list(info.master_urls), token=launcher.read_admin_token(info.state_dir))


def locust_env(info: CellInfo) -> dict[str, str]:
    """What a Locust process needs to call the cell: its admin token."""
    return {"MINBORG_TOKEN": launcher.read_admin_token(info.state_dir) or ""}


def stop(state_dir: Path) -> None:
    launcher.down(state_dir)


def hello_world(task_count: int, repo: Path) -> dict[str, Any]:
    """examples/hello_world.yaml with `task_count` tasks (the file stays the source of truth)."""
    job = yaml.safe_load((repo / "examples" / "hello_world.yaml").read_text())
    job["task_count"] = task_count
    return job


def run_service(info: CellInfo, task_count: int, repo: Path) -> list[dict[str, Any]]:
    """Submit hello_world and wait until all its tasks are healthy endpoints."""
    with client(info) as api:
        api.submit(hello_world(task_count, repo))
        deadline = time.monotonic() + ENDPOINTS_TIMEOUT_S
        while True:
            found = api.endpoints(SERVICE_JOB)
            if len(found) >= task_count:
                return [e.__dict__ for e in found]
            if time.monotonic() > deadline:
                raise RuntimeError(
                    f"hello_world: {len(found)} of {task_count} tasks healthy after "
                    f"{ENDPOINTS_TIMEOUT_S:.0f} s"
                )
            time.sleep(0.3)


def submit_jobs(info: CellInfo, keys: list[str], timeout_s: float = 30.0) -> None:
    """Submit a small pending job for each "user/name" key, then wait until every master
    replica shows them all (a reader pinned to a follower must not miss them)."""
    with client(info) as api:
        for key in keys:
            user, name = key.split("/")
            api.submit(small_job(user, name))
    deadline = time.monotonic() + timeout_s
    for url in info.master_urls:
        with client(info, [url]) as api:
            while True:
                seen = {j["key"] for j in api.jobs(keys[0].split("/")[0])}
                if set(keys) <= seen:
                    break
                if time.monotonic() > deadline:
                    raise RuntimeError(f"{url}: jobs {sorted(set(keys) - seen)} not shown after {timeout_s:g} s")
                time.sleep(0.1)


def limits(info: CellInfo) -> dict[str, Any]:
    """How the service's tasks are held: the machine's isolation and hello_world's CPU request."""
    with client(info) as api:
        machines = api.machines()
        job = api.job(SERVICE_JOB)["job"]
    cpu = str(job.get("request", {}).get("cpu", "0m"))
    millis = int(cpu[:-1]) if cpu.endswith("m") else int(float(cpu) * 1000)
    return {"isolation": machines[0].get("isolation", "") if machines else "",
            "task_cpu_millis": millis}  # fmt: skip


CGROUP_ROOT = Path("/sys/fs/cgroup")


def cpu_throttling(pid: int) -> dict[str, float] | None:
    """The CFS quota and throttling counters of the cgroup v1 `cpu` group holding `pid`;
    None where the process has no such group (no cgroups, or cgroup v2 only)."""
    try:
        lines = Path(f"/proc/{pid}/cgroup").read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        _, controllers, path = line.split(":", 2)
        if "cpu" not in controllers.split(",") or path == "/":
            continue
        for mount in (CGROUP_ROOT / "cpu", CGROUP_ROOT / "cpu,cpuacct"):
            group = mount / path.lstrip("/")
            try:
                stat = dict(
                    (k, int(v)) for k, v in (x.split() for x in (group / "cpu.stat").read_text().splitlines())
                )
                quota = int((group / "cpu.cfs_quota_us").read_text())
                period = int((group / "cpu.cfs_period_us").read_text())
            except (OSError, ValueError):
                continue
            return {
                "quota_us": quota, "period_us": period, "nr_periods": stat.get("nr_periods", 0),
                "nr_throttled": stat.get("nr_throttled", 0),
                "throttled_s": stat.get("throttled_time", 0) / 1e9,
            }  # fmt: skip
    return None


def task_throttling(info: CellInfo) -> dict[str, dict[str, float]]:
    """cpu_throttling of every task process of the cell, by the sampler's task name."""
    out = {}
    for proc in processes(info):
        if proc.role == "task" and (found := cpu_throttling(proc.pid)) is not None:
            out[proc.name] = found
    return out


def throttling_delta(
    before: dict[str, dict[str, float]], after: dict[str, dict[str, float]]
) -> dict[str, dict[str, float]]:
    """Counters accumulated between two task_throttling readings, per task."""
    out = {}
    for name, a in after.items():
        b = before.get(name, {})
        out[name] = {
            "quota_us": a["quota_us"], "period_us": a["period_us"],
            **{k: a[k] - b.get(k, 0) for k in ("nr_periods", "nr_throttled", "throttled_s")},
        }  # fmt: skip
    return out


def processes(info: CellInfo) -> list[WatchedProcess]:
    """Every process of the cell now: etcd members, masters, borglets and their tasks."""
    found = [WatchedProcess(str(p.role), p.name, p.pid) for p in info.processes]
    for record in info.of_role(Role.BORGLET):
        try:
            children = psutil.Process(record.pid).children(recursive=True)
        except psutil.NoSuchProcess:
            continue
        found += [WatchedProcess("task", f"task{i}", c.pid) for i, c in enumerate(children)]
    return found
