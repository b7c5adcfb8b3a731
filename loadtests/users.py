"""Locust users of a Minborg cell: the control-plane mix, submit-only, and a BNS-balanced service client.

ControlPlaneUser: one engineer's tooling against the master API, closed loop (no think time,
so users = concurrency). Weights, out of 100:

    read   list own jobs ........ 18   GET /v1/jobs?user=U
    read   list all jobs ........  4   GET /v1/jobs
    read   show a job ........... 18   GET /v1/jobs/{user}/{name} (own, else the service)
    read   job tasks ............ 14   GET /v1/jobs/{user}/{name}/tasks
    read   resolve BNS name ..... 16   GET /v1/bns/<index>.hello_world.demo.<cell>.minborg
    read   endpoints ............  6   GET /v1/jobs/demo/hello_world/endpoints
    read   cell status ..........  4   GET /v1/cell
    write  submit small job .....  10  POST /v1/jobs (1 task, 10m CPU, pinned to no machine)
    write  kill own job .........  10  DELETE /v1/jobs/{user}/{name} (oldest own; submits if none)

Reads are 80%, writes 20%, the way a cell's API is dominated by status checks. A submitted
job's single task carries a constraint no machine satisfies, so it stays PENDING: the load
is on the master and etcd, not on forking thousands of task processes on the load host.

ReadOnlyUser: the same reads with the same weights (out of 80), no writes: the read path
alone, for the target of reads/s under a p99. Its jobs are the few the campaign submits
before its ladder ($LOADTEST_READ_JOBS, all of one user, whose jobs "list own jobs" lists);
show and tasks reads go round those and the service job, so they hit real jobs.

Each Locust user talks to one master replica (users spread round-robin over
$LOADTEST_MASTERS), as clients pinned to a replica do; writes reaching a follower are
forwarded by it to the leader.

ServiceUser: calls hello_world's tasks directly, no proxy: it fetches the job's healthy
endpoints from the master every $LOADTEST_REFRESH_S seconds (3 by default) and balances
round-robin across them, skipping a task that refuses a connection until the next refresh.
"""

from __future__ import annotations

import itertools
import os
import time

from locust import FastHttpUser, constant, task

from loadtests.jobs import small_job

MASTERS = [u for u in os.environ.get("LOADTEST_MASTERS", "http://127.0.0.1:7000").split(",") if u]
CELL = os.environ.get("LOADTEST_CELL", "local")
SERVICE_JOB = os.environ.get("LOADTEST_SERVICE_JOB", "demo/hello_world")
SERVICE_TASKS = int(os.environ.get("LOADTEST_SERVICE_TASKS", "1"))
COST_MS = float(os.environ.get("LOADTEST_COST_MS", "0"))
# Tasks per submitted job. 0 isolates the write path: no pending task, so the leader's
# scheduling pass has nothing to plan and does not compete for the writer.
SUBMIT_TASKS = int(os.environ.get("LOADTEST_SUBMIT_TASKS", "1"))
# Jobs for ReadOnlyUser to read ("user/name,user/name"), submitted before its ladder.
READ_JOBS = [k for k in os.environ.get("LOADTEST_READ_JOBS", "").split(",") if k]
REFRESH_S = float(os.environ.get("LOADTEST_REFRESH_S", "3"))
# Bounds a hung request: a step is 10-15 s, a request longer than this is a failure anyway.
NETWORK_TIMEOUT_S = 10.0

_replica = itertools.count()
_user_ids = itertools.count()


def service_bns(index: int) -> str:
    job_user, job_name = SERVICE_JOB.split("/")
    return f"{index}.{job_name}.{job_user}.{CELL}.minborg"


# Every simulated client acts as the cell's admin ($MINBORG_TOKEN): its user name is only the
# owner part of its jobs' names, and the campaign's cell has no rate limit.
AUTH = {"Authorization": f"Bearer {os.environ['MINBORG_TOKEN']}"} if os.environ.get("MINBORG_TOKEN") else {}


class MasterUser(FastHttpUser):
    """What every master client has: its replica, its user name, its jobs, submit and get."""

    abstract = True
    default_headers = AUTH
    wait_time = constant(0)
    network_timeout = NETWORK_TIMEOUT_S
    connection_timeout = NETWORK_TIMEOUT_S
    host = MASTERS[0]

    def on_start(self) -> None:
        self.master = MASTERS[next(_replica) % len(MASTERS)]
        # Unique across worker processes: the pid tells them apart.
        self.user = f"load{os.getpid()}x{next(_user_ids)}"
        self.jobs: list[str] = []
        self._serial = itertools.count()
        self._bns = itertools.cycle(range(max(1, SERVICE_TASKS)))

    def _get(self, path: str, name: str, ok: tuple[int, ...] = (200,)) -> None:
        with self.client.get(self.master + path, name=name, catch_response=True) as resp:
            if resp.status_code not in ok:
                resp.failure(f"HTTP {resp.status_code}")

    def _submit(self) -> None:
        name = f"j{next(self._serial)}"
        with self.client.post(
            self.master + "/v1/jobs", json=small_job(self.user, name, SUBMIT_TASKS),
            name="write: submit",
            catch_response=True,
        ) as resp:  # fmt: skip
            if resp.status_code == 201:
                self.jobs.append(f"{self.user}/{name}")
            else:
                resp.failure(f"HTTP {resp.status_code}")


class Reader(MasterUser):
    """The control plane's reads, weighted out of 80; `_a_job` says which job a show or tasks
    read asks for."""

    abstract = True

    def _a_job(self) -> str:
        return SERVICE_JOB  # subclasses read their own jobs too

    @task(18)
    def list_own_jobs(self) -> None:
        self._get(f"/v1/jobs?user={self.user}", "read: list own jobs")

    @task(4)
    def list_all_jobs(self) -> None:
        self._get("/v1/jobs", "read: list all jobs")

    @task(18)
    def show_job(self) -> None:
        self._get(f"/v1/jobs/{self._a_job()}", "read: show job")

    @task(14)
    def job_tasks(self) -> None:
        self._get(f"/v1/jobs/{self._a_job()}/tasks", "read: job tasks")

    @task(16)
    def resolve_bns(self) -> None:
        self._get(f"/v1/bns/{service_bns(next(self._bns))}", "read: resolve bns")

    @task(6)
    def endpoints(self) -> None:
        self._get(f"/v1/jobs/{SERVICE_JOB}/endpoints", "read: endpoints")

    @task(4)
    def cell_status(self) -> None:
        self._get("/v1/cell", "read: cell")


class ControlPlaneUser(Reader):
    """The reads plus submit and kill of its own jobs; show and tasks read its newest job."""

    def _a_job(self) -> str:
        return self.jobs[-1] if self.jobs else SERVICE_JOB

    @task(10)
    def submit(self) -> None:
        self._submit()

    @task(10)
    def kill(self) -> None:
        if not self.jobs:
            self._submit()
            return
        key = self.jobs.pop(0)
        with self.client.delete(
            self.master + f"/v1/jobs/{key}", name="write: kill", catch_response=True
        ) as resp:
            if resp.status_code != 200:
                resp.failure(f"HTTP {resp.status_code}")


class ReadOnlyUser(Reader):
    """Only the reads: own jobs are the pre-submitted READ_JOBS (listed under their user), and
    show and tasks reads go round them and the service job."""

    def on_start(self) -> None:
        super().on_start()
        if READ_JOBS:
            self.user = READ_JOBS[0].split("/")[0]
        self.jobs = list(READ_JOBS)
        self._reads = itertools.cycle([SERVICE_JOB, *self.jobs])

    def _a_job(self) -> str:
        return next(self._reads)


class SubmitOnlyUser(MasterUser):
    """Only submissions: the master's write path (fenced etcd txn, then its own watch) alone.
    (Not a ControlPlaneUser: Locust would inherit that class's read tasks.)"""

    @task
    def submit(self) -> None:
        self._submit()


class ServiceUser(FastHttpUser):
    default_headers = AUTH
    wait_time = constant(0)
    network_timeout = NETWORK_TIMEOUT_S
    connection_timeout = NETWORK_TIMEOUT_S
    host = MASTERS[0]

    def on_start(self) -> None:
        self.master = MASTERS[next(_replica) % len(MASTERS)]
        self.endpoints: list[str] = []
        self.fetched_at = float("-inf")
        self.next = 0

    def refresh(self) -> None:
        """Fetch the healthy endpoints; on failure keep the old list (a master blip must not
        stop traffic to tasks that still serve)."""
        with self.client.get(
            self.master + f"/v1/jobs/{SERVICE_JOB}/endpoints", name="control: endpoints",
            catch_response=True,
        ) as resp:  # fmt: skip
            self.fetched_at = time.monotonic()
            if resp.status_code != 200:
                resp.failure(f"HTTP {resp.status_code}")
                return
            found = [f"http://{e['host']}:{e['port']}" for e in resp.json().get("endpoints", [])]
            if found:
                self.endpoints = found

    @task
    def call(self) -> None:
        if not self.endpoints or time.monotonic() - self.fetched_at >= REFRESH_S:
            self.refresh()
        if not self.endpoints:
            time.sleep(0.2)  # nothing to call yet; do not spin on the master
            return
        url = self.endpoints[self.next % len(self.endpoints)]
        self.next += 1
        path = f"/?cost_ms={COST_MS:g}" if COST_MS > 0 else "/"
        with self.client.get(url + path, name="service: hello", catch_response=True) as resp:
            if resp.status_code == 0:
                # Refused or reset: skip this task until the next refresh, as Borg clients do.
                self.endpoints = [e for e in self.endpoints if e != url]
                resp.failure(f"connection: {resp.error!r}")
            elif resp.status_code != 200:
                resp.failure(f"HTTP {resp.status_code}")
