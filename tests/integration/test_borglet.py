"""A real borglet process on loopback running real task processes: start, kill, restart, OOM,
memory pressure, and surviving its own SIGKILL with re-adoption."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import stat
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import quote

import httpx
import psutil
import pytest

from reference import channel
from reference.borglet import taskusers
from reference.borglet.cli import private_ancestor
from reference.ports import free_port
from reference.waiting import wait_until

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
MiB = 1024 * 1024


class BorgletProcess:
    """One `python -m reference.borglet` subprocess and a client for its API."""

    def __init__(self, state_dir: Path, name: str, capacity: str, extra: tuple[str, ...] = ()):
        self.state_dir, self.name, self.capacity, self.extra = state_dir, name, capacity, extra
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
             "--channel-key-file", str(self.key_file), *self.extra],
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
        "command": [taskusers.task_python(), "-m", "examples.hello_world.server"],
        "env": {"GREETING": "hi"}, "cwd": str(REPO), "port": 0,
        "request": {"cpu": 500, "ram": 256 * MiB}, "priority": 200, "restart_policy": "never",
        "health_check": {"path": "/healthz", "interval_s": 0.5},
        **extra,
    }  # fmt: skip


def python_task(task_id: str, code: str, **extra) -> dict:
    return {
        "task_id": task_id, "command": [taskusers.task_python(), "-c", code], "cwd": str(REPO),
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


# --- tasks run unprivileged ----------------------------------------------------------------------

# An interpreter that the tasks' uids may run (pyenv's, under a private /root, is not).
TASK_PYTHON = next(
    (p for p in (sys.executable, "/usr/bin/python3", "/usr/local/bin/python3") if os.path.exists(p) and private_ancestor(p) is None),
    None,
)
needs_root = pytest.mark.skipif(
    os.geteuid() != 0 or TASK_PYTHON is None,
    reason=f"tasks run as their users' own uids only under a root borglet (this test runs as uid {os.geteuid()}), "
    "and only a Python that other users can run can be their program",
)


@pytest.fixture
def rooted(tmp_path: Path) -> Iterator[BorgletProcess]:
    """A borglet that runs every task as its job user's own uid."""
    node = BorgletProcess(tmp_path, f"ru{os.getpid()}x{free_port()}", "cpu=2000m,ram=2GiB", ("--run-tasks-as", "job-user"))
    node.start()
    try:
        yield node
    finally:
        node.stop()

# What a task can see and do: printed as one JSON line on its stdout.
PROBE = """
import json, os, sys
out = {"uid": os.getuid(), "gid": os.getgid(), "groups": os.getgroups(), "cwd": os.getcwd()}
status = dict(line.split(":", 1) for line in open("/proc/self/status").read().splitlines() if ":" in line)
out["uids"], out["gids"] = status["Uid"].split(), status["Gid"].split()  # real, effective, saved, fs
out["cap_eff"], out["cap_prm"] = int(status["CapEff"], 16), int(status["CapPrm"], 16)
for what, pid in (("kill_borglet", sys.argv[1]), *(("kill_" + p.split("=")[0], p.split("=")[1]) for p in sys.argv[3:])):
    try:
        os.kill(int(pid), 0)
        out[what] = "allowed"
    except PermissionError:
        out[what] = "EPERM"
for what, path in (("list_state", sys.argv[2]), ("read_table", os.path.join(sys.argv[2], "tasks.json"))):
    try:
        os.listdir(path) if what == "list_state" else open(path).read()
        out[what] = "allowed"
    except PermissionError:
        out[what] = "EACCES"
with open("scratch", "w") as f:  # its working directory is its own to write
    f.write("x")
out["cwd_owner"] = os.stat(".").st_uid
print(json.dumps(out), flush=True)
"""


def probe(borglet: BorgletProcess, task_id: str, job: str, *others: str) -> dict:
    """Run PROBE as a task of `job` (no cwd: its own directory) and return what it printed."""
    assert borglet.proc is not None
    argv = [str(TASK_PYTHON), "-c", PROBE, str(borglet.proc.pid), str(borglet.state_dir), *others]
    return {"task_id": task_id, "job": job, "command": argv, "restart_policy": "never"}


def probe_output(borglet: BorgletProcess, task_id: str) -> dict:
    wait_until(lambda: borglet.task(task_id)["state"] in ("FINISHED", "FAILED"), 20, f"{task_id} to end")
    task = borglet.task(task_id)
    logs = f"{borglet.url}/v1/tasks/{quote(task_id, safe='')}/logs"
    out, err = (borglet.http.get(logs, params={"stream": s}).text for s in ("stdout", "stderr"))
    assert task["state"] == "FINISHED", (task, err)
    return json.loads(out)


@needs_root
def test_a_task_runs_as_an_unprivileged_uid_that_cannot_touch_the_borglet(rooted: BorgletProcess):
    borglet = rooted
    borglet.sync(probe(borglet, "alice/probe/0#0", "alice/probe"))
    seen = probe_output(borglet, "alice/probe/0#0")
    assert seen["uid"] >= taskusers.FIRST_UID and seen["gid"] == seen["uid"] and seen["groups"] == []
    # Every id, the saved ones too, is the user's (no way back to root), and no capability is left.
    assert seen["uids"] == [str(seen["uid"])] * 4 and seen["gids"] == [str(seen["uid"])] * 4
    assert seen["cap_eff"] == 0 and seen["cap_prm"] == 0
    assert seen["kill_borglet"] == "EPERM"
    assert seen["list_state"] == "EACCES" and seen["read_table"] == "EACCES"
    assert seen["cwd_owner"] == seen["uid"] and os.path.basename(seen["cwd"]).startswith("alice_probe_0_0")
    assert stat.S_IMODE(os.stat(borglet.state_dir).st_mode) == 0o700
    # Its log came back through the borglet (it writes to files the borglet opened), and the
    # borglet recorded the user's uid, so a restarted borglet gives alice the same one.
    def recorded() -> int | None:
        return json.loads((borglet.state_dir / "tasks.json").read_text()).get("uids", {}).get("alice")

    assert wait_until(recorded, 5, "alice's uid in the task table") == seen["uid"]
    # Once the task is forgotten its working directory goes too.
    borglet.sync()
    wait_until(lambda: not os.path.exists(seen["cwd"]), 10, "the ended task's directory to go")


@needs_root
def test_a_task_of_one_user_cannot_signal_another_users_tasks(rooted: BorgletProcess):
    borglet = rooted
    sleep = [str(TASK_PYTHON), "-c", "import time; time.sleep(60)"]
    sleepers = [
        python_task("bob/sleep/0#0", "", job="bob/sleep", command=sleep, cwd=None),
        python_task("alice/sleep/0#0", "", job="alice/sleep", command=sleep, cwd=None),
    ]
    borglet.sync(*sleepers)
    bob, alice = (
        wait_until(lambda tid=t["task_id"]: borglet.task(tid)["pid"], 10, f"{t['task_id']} to start") for t in sleepers
    )
    borglet.sync(*sleepers, probe(borglet, "alice/probe/0#0", "alice/probe", f"bob={bob}", f"alice={alice}"))
    seen = probe_output(borglet, "alice/probe/0#0")
    assert seen["kill_bob"] == "EPERM"
    assert seen["kill_alice"] == "allowed"  # one user's tasks share its uid
    assert alive(bob) and alive(alice)
    assert psutil.Process(bob).uids().real != psutil.Process(alice).uids().real == seen["uid"]


@needs_root
def test_the_example_jobs_run_under_their_users_uids(rooted: BorgletProcess):
    # examples/*.yaml name `python`; here the interpreter other users can run.
    web = hello("demo/hello_world/0#0", job="demo/hello_world", command=[str(TASK_PYTHON), "-m", "examples.hello_world.server"])
    batch = python_task(
        "demo/batch/0#0", "", job="demo/batch", command=[str(TASK_PYTHON), "-m", "examples.batch"],
        env={"WORK_SECONDS": "0.2"},
    )  # fmt: skip
    rooted.sync(web, batch)
    task = wait_until(lambda: (t := rooted.task(web["task_id"])) and t["healthy"] and t, 20, "hello_world healthy")
    assert httpx.get(f"http://127.0.0.1:{task['port']}/", timeout=5).text.startswith("hello from")
    assert psutil.Process(task["pid"]).uids().real >= taskusers.FIRST_UID
    done = wait_until(lambda: (t := rooted.task(batch["task_id"]))["state"] in ("FINISHED", "FAILED") and t, 20, "batch")
    assert done["state"] == "FINISHED", done
    logs = f"{rooted.url}/v1/tasks/{quote(batch['task_id'], safe='')}/logs"
    assert "rounds in 0.2s" in rooted.http.get(logs).text
