"""A real borglet process on loopback running real task processes: start, kill, restart, OOM,
memory pressure, and surviving its own SIGKILL with re-adoption."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import psutil
import pytest

from reference import channel
from reference.ports import free_port
from reference.waiting import wait_until

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
MiB = 1024 * 1024


class BorgletProcess:
    """One `python -m reference.borglet` subprocess and a client for its API."""

    def __init__(self, state_dir: Path, name: str, capacity: str):
        self.state_dir, self.name, self.capacity = state_dir, name, capacity
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.proc: subprocess.Popen | None = None
        self.pids_seen: set[int] = set()
        self.epoch = 1
        self.seq = 0
        # The borglet obeys only requests signed with its cell's key, as the master signs them.
        self.key_file = channel.create_key_file(state_dir / channel.KEY_FILE)
        self.http = httpx.Client(
            auth=channel.ClientAuth(channel.load_key(self.key_file)), headers=channel.to_machine(name), timeout=5
        )

    def start(self) -> None:
        log = open(self.state_dir / f"borglet-{self.port}.log", "ab")  # noqa: SIM115
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "reference.borglet", "--name", self.name,
             "--listen", f"127.0.0.1:{self.port}", "--capacity", self.capacity,
             "--attrs", "rack=r1,arch=x86", "--failure-domain", "r1",
             "--state-dir", str(self.state_dir), "--kill-tasks-on-exit", "--kill-grace", "1",
             "--channel-key-file", str(self.key_file)],
            cwd=REPO, stdout=log, stderr=subprocess.STDOUT,
        )  # fmt: skip
        log.close()
        wait_until(self._healthy, 20, "the borglet to answer /healthz")

    def _healthy(self) -> bool:
        assert self.proc is not None and self.proc.poll() is None, "borglet exited"
        try:
            return httpx.get(f"{self.url}/healthz", timeout=1).status_code == 200
        except httpx.HTTPError:
            return False

    def sync(self, *tasks: dict, epoch: int | None = None) -> dict:
        self.seq += 1  # each sync of one master is newer than the last
        response = self.http.post(
            f"{self.url}/v1/sync",
            json={"master": "test", "epoch": self.epoch if epoch is None else epoch,
                  "seq": self.seq, "tasks": list(tasks)},
            timeout=5,
        )  # fmt: skip
        response.raise_for_status()
        return self._note(response.json())

    def state(self) -> dict:
        return self._note(self.http.get(f"{self.url}/v1/state").json())

    def task(self, task_id: str) -> dict | None:
        return next((t for t in self.state()["tasks"] if t["task_id"] == task_id), None)

    def _note(self, report: dict) -> dict:
        self.pids_seen.update(t["pid"] for t in report["tasks"] if t["pid"])
        return report

    def sigkill(self) -> None:
        assert self.proc is not None
        self.proc.kill()
        self.proc.wait(timeout=5)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=5)


def alive(pid: int) -> bool:
    """A process that still runs; a zombie waiting for init to reap it does not count."""
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def cgroup_dirs(name: str) -> list[str]:
    """This machine's borglet subtrees left in any hierarchy."""
    found = []
    for hierarchy in Path("/sys/fs/cgroup").iterdir():
        with contextlib.suppress(OSError):
            found += [str(p) for p in hierarchy.rglob(f"minborg-{name}")]
    return found


@pytest.fixture
def borglet(tmp_path: Path) -> Iterator[BorgletProcess]:
    node = BorgletProcess(tmp_path, f"it{os.getpid()}x{free_port()}", "cpu=2000m,ram=2GiB")
    node.start()
    try:
        yield node
    finally:
        with contextlib.suppress(Exception):
            node.state()
        node.stop()
        # --kill-tasks-on-exit: every task process and every cgroup of this machine is gone.
        survivors = [pid for pid in node.pids_seen if alive(pid)]
        for pid in survivors:  # never leave anything running, even when the check fails
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pid, signal.SIGKILL)
        assert not survivors, f"task processes outlived the borglet: {survivors}"
        assert not cgroup_dirs(node.name), "cgroups left behind"


def hello(task_id: str, **extra) -> dict:
    return {
        "task_id": task_id, "job": "alice/web", "index": 3, "incarnation": 0,
        "bns": "3.web.alice.local.minborg",
        "command": [sys.executable, "-m", "examples.hello_world.server"],
        "env": {"GREETING": "hi"}, "cwd": str(REPO), "port": 0,
        "request": {"cpu": 500, "ram": 256 * MiB}, "priority": 200, "restart_policy": "never",
        "health_check": {"path": "/healthz", "interval_s": 0.5},
        **extra,
    }  # fmt: skip


def python_task(task_id: str, code: str, **extra) -> dict:
    return {
        "task_id": task_id, "command": [sys.executable, "-c", code], "cwd": str(REPO),
        "request": {"cpu": 500, "ram": 0}, "priority": 100, "restart_policy": "never",
        "health_check": None, **extra,
    }  # fmt: skip


def test_runs_a_hello_world_task_and_kills_it_when_no_longer_desired(borglet: BorgletProcess):
    report = borglet.sync(hello("alice/web/3#0"))
    assert report["machine"] == borglet.name and report["isolation"] in ("cgroup", "rlimit")
    assert report["capacity"] == {"cpu": 2000, "ram": 2 * 1024**3}
    assert report["attrs"] == {"rack": "r1", "arch": "x86"} and report["failure_domain"] == "r1"

    task = wait_until(
        lambda: (t := borglet.task("alice/web/3#0")) and t["state"] == "RUNNING" and t["healthy"] and t,
        15, "the task to be RUNNING and healthy",
    )  # fmt: skip
    answer = httpx.get(f"http://127.0.0.1:{task['port']}/", timeout=5)
    assert answer.text.startswith("hello from 3.web.alice.local.minborg")
    assert f'"pid": {task["pid"]}' in answer.text
    assert "hello_requests_total" in httpx.get(f"http://127.0.0.1:{task['port']}/metrics").text
    metrics = httpx.get(f"{borglet.url}/metrics").text
    assert f'minborg_borglet_tasks{{machine="{borglet.name}",state="RUNNING"}} 1.0' in metrics

    # A stale leader is fenced off and changes nothing.
    stale = borglet.http.post(f"{borglet.url}/v1/sync", json={"master": "old", "epoch": 0, "tasks": []})
    assert stale.status_code == 409 and stale.json()["epoch"] == 1
    assert stale.json()["reason"] == "stale_epoch"
    # So is a sync of the current leader older than one already applied (delayed or replayed).
    replay = borglet.http.post(
        f"{borglet.url}/v1/sync", json={"master": "test", "epoch": 1, "seq": borglet.seq, "tasks": []}
    )
    assert replay.status_code == 409 and replay.json()["reason"] == "stale_seq"
    assert alive(task["pid"])

    borglet.sync()  # the complete desired set is now empty
    wait_until(lambda: not alive(task["pid"]), 10, "the task process to die")
    wait_until(lambda: borglet.sync()["tasks"] == [], 5, "the killed task to be forgotten")
    # Listing it again does not start it twice.
    again = wait_until(
        lambda: borglet.task("alice/web/3#0") or borglet.sync(hello("alice/web/3#0")) and None,
        10, "the killed task listed again",
    )  # fmt: skip
    assert again["state"] == "KILLED" and again["pid"] is None


def test_restarts_a_failing_task_in_place_and_keeps_finished_ones(borglet: BorgletProcess):
    failing = python_task("bob/batch/0#0", "import sys; sys.exit(1)", restart_policy="on_failure")
    done = python_task("bob/batch/1#0", "print('done')", restart_policy="on_failure")
    borglet.sync(failing, done)
    task = wait_until(
        lambda: (t := borglet.task("bob/batch/0#0")) and t["restarts"] >= 2 and t["pid"] is None and t,
        15, "restarts",
    )  # fmt: skip
    assert task["state"] == "STARTING"  # waiting out the backoff, same task id
    assert task["exit_code"] == 1 and task["reason"] == "exit 1"
    finished = wait_until(lambda: (t := borglet.task("bob/batch/1#0"))["state"] == "FINISHED" and t, 10, "FINISHED")
    assert (finished["exit_code"], finished["restarts"]) == (0, 0)
    log = next((borglet.state_dir / "tasks").glob("bob_batch_1_0-*")) / "stdout"
    assert log.read_text().strip() == "done"


def test_oom_kills_a_task_over_its_ram_limit(borglet: BorgletProcess):
    if borglet.state()["isolation"] != "cgroup":
        pytest.skip("cgroup v1 hierarchies are not writable here, so there is no memory limit")
    grow = "import time; x = bytearray(b'x') * (400 * 2**20); time.sleep(30)"
    borglet.sync(python_task("carol/hog/0#0", grow, request={"cpu": 1000, "ram": 64 * MiB}))
    task = wait_until(lambda: (t := borglet.task("carol/hog/0#0"))["state"] == "FAILED" and t, 20, "FAILED")
    assert task["reason"] == "oom", task


def test_memory_pressure_kills_the_lowest_priority_first(tmp_path: Path):
    node = BorgletProcess(tmp_path, f"mp{os.getpid()}x{free_port()}", "cpu=2000m,ram=150MiB")
    node.start()
    try:
        hold = "import time; x = bytearray(b'x') * (90 * 2**20); time.sleep(60)"
        node.sync(
            python_task("low#0", hold, priority=100, restart_policy="always"),
            python_task("high#0", hold, priority=200),
        )
        low = wait_until(lambda: (t := node.task("low#0"))["state"] == "KILLED" and t, 20, "low#0 KILLED")
        assert low["reason"] == "memory_pressure" and low["restarts"] == 0
        assert node.task("high#0")["state"] == "RUNNING"
    finally:
        node.state()
        node.stop()
        assert not [pid for pid in node.pids_seen if alive(pid)]
        assert not cgroup_dirs(node.name)


def test_tasks_survive_a_borglet_sigkill_and_are_re_adopted(borglet: BorgletProcess):
    borglet.sync(hello("alice/web/3#0"), python_task("gone#0", "import time; time.sleep(60)"))
    task = wait_until(
        lambda: (t := borglet.task("alice/web/3#0")) and t["state"] == "RUNNING" and t,
        15,
        "RUNNING",
    )
    gone = wait_until(lambda: (t := borglet.task("gone#0")) and t["pid"] and t, 10, "gone#0 to start")

    borglet.sigkill()
    assert httpx.get(f"http://127.0.0.1:{task['port']}/", timeout=5).status_code == 200
    os.killpg(gone["pid"], signal.SIGKILL)  # this one dies while nobody watches
    wait_until(lambda: not alive(gone["pid"]), 5, "the unwatched task to die")

    borglet.start()  # same state dir, new port
    again = wait_until(lambda: (t := borglet.task("alice/web/3#0"))["state"] == "RUNNING" and t, 10, "RUNNING again")
    assert (again["pid"], again["port"], again["restarts"]) == (task["pid"], task["port"], 0)
    lost = borglet.task("gone#0")
    assert (lost["state"], lost["reason"]) == ("FAILED", "lost_on_restart")
    wait_until(lambda: borglet.task("alice/web/3#0")["usage"]["ram_bytes"] > 0, 5, "usage of adopted")

    # An adopted task (not the new borglet's child) is still killed when no longer desired.
    borglet.sync(hello("alice/web/3#0"))
    assert [t["task_id"] for t in borglet.state()["tasks"]] == ["alice/web/3#0"]
    borglet.sync()
    wait_until(lambda: not alive(task["pid"]), 10, "the adopted task to die")
