"""One task's spawn error is that task's `spawn_failed`, never its batch's: a start batch with
spawn errors injected among real tasks starts every other task (issue 38: a NUL byte in one
task's env raised out of the batch and left it and the six after it QUEUED for good)."""

from __future__ import annotations

import shutil
import time

import pytest

from reference.borglet import processes
from reference.borglet.isolation import RlimitIsolation
from reference.borglet.protocol import SyncRequest
from reference.borglet.supervisor import Borglet, MachineConfig

SLEEP = shutil.which("sleep")

pytestmark = pytest.mark.skipif(SLEEP is None, reason="needs the `sleep` program")


def sleeper(i: int, **extra: object) -> dict:
    return {"task_id": f"alice/batch/{i}#0", "job": "alice/batch", "index": i, "command": [SLEEP, "30"], **extra}


# What each bad task holds, and what its reason must name.
BAD = {
    1: ({"env": {"K": "a\0b"}}, "NUL"),
    3: ({"command": [SLEEP, "3\x000"]}, "NUL"),
    4: ({"command": ["/nonexistent/program"]}, "/nonexistent/program"),
    6: ({"cwd": "/nonexistent/directory"}, "/nonexistent/directory"),
    7: ({"command": ["no-such-program-anywhere"]}, "no-such-program-anywhere"),
    8: ({"cwd": "/tmp\0x"}, "NUL"),
    10: ({"env": {"A=B": "x"}}, "'A=B'"),
}
INJECTED = 12  # its spawn raises what no spawn was expected to raise


def test_every_other_task_of_a_batch_starts_when_some_cannot_spawn(tmp_path, monkeypatch):
    real_spawn = processes.spawn

    def spawn(command, env, cwd, log_dir, user=None, spawning=None):
        if env.get("TASK_INDEX") == str(INJECTED):
            raise RuntimeError("injected: the spawn broke")
        return real_spawn(command, env, cwd, log_dir, user, spawning)

    monkeypatch.setattr(processes, "spawn", spawn)
    config = MachineConfig(name="m", capacity={"cpu": 4000, "ram": 2**32}, state_dir=str(tmp_path))
    borglet = Borglet(config, RlimitIsolation())
    specs = [sleeper(i, **BAD.get(i, ({}, ""))[0]) for i in range(16)]
    try:
        borglet.sync(SyncRequest.model_validate({"epoch": 1, "seq": 1, "tasks": specs}))
        started = borglet.start_queued()  # one batch: all sixteen
        tasks = {t.spec.index: t for t in borglet.tasks.values()}
        failed = {i for i, t in tasks.items() if t.phase == "FAILED"}
        assert failed == {*BAD, INJECTED}
        assert started == 16 - len(failed)
        for i, task in tasks.items():
            if i in failed:
                assert task.pid is None and task.reason is not None and task.reason.startswith("spawn: "), task
                assert not task.launching
            else:
                assert task.phase == "RUNNING" and processes.is_same_process(task.pid, task.start_ticks), task
        for i, (_, named) in BAD.items():
            assert named in (tasks[i].reason or ""), tasks[i].reason
        assert "injected" in (tasks[INJECTED].reason or "")
        assert not borglet.table.queue  # nothing left QUEUED
    finally:
        borglet.stop(kill_tasks=True, timeout_s=2)


def test_a_task_env_is_built_from_nothing(tmp_path, monkeypatch):
    monkeypatch.setenv("OPERATOR_SECRET", "x")
    config = MachineConfig(
        name="m", capacity={"cpu": 1000, "ram": 2**30}, state_dir=str(tmp_path),
        task_env=(("PYTHONPATH", "/src"), ("PORT", "overridden by the borglet's own")), host="10.200.0.7",
    )  # fmt: skip
    borglet = Borglet(config, RlimitIsolation())
    spec = sleeper(0, env={"MINE": "1", "PATH": "/opt/bin", processes.TASK_MARKER: "hidden?"}, bns="0.batch.alice.c.minborg")
    borglet.sync(SyncRequest.model_validate({"epoch": 1, "seq": 1, "tasks": [spec]}))
    task = borglet.tasks["alice/batch/0#0"]
    task.port = 4242
    env = borglet.launcher.env(task)
    assert env == {
        "PATH": "/opt/bin",  # the job's own wins over the default /usr/local/bin:/usr/bin:/bin
        "HOME": "/",
        "PYTHONPATH": "/src",
        "HOST": "10.200.0.7",  # the machine's address: where BNS answers point (a job's HOST wins)
        "PORT": "4242",
        "TASK_INDEX": "0",
        "TASK_ID": "alice/batch/0#0",
        "BNS_NAME": "0.batch.alice.c.minborg",
        "MINBORG_MACHINE": "m",
        "MINE": "1",
        processes.TASK_MARKER: "alice/batch/0#0",  # set last: a job cannot hide its processes
        processes.BORGLET_MARKER: str(tmp_path),
    }
    del spec["env"]
    other = borglet.launcher.env(type(task)(spec=type(task.spec).model_validate(spec), key="k"))
    assert other["PATH"] == processes.TASK_PATH == "/usr/local/bin:/usr/bin:/bin"
    borglet.stop()


def test_a_restart_in_place_that_cannot_spawn_fails_that_task(tmp_path):
    config = MachineConfig(name="m", capacity={"cpu": 1000, "ram": 2**30}, state_dir=str(tmp_path))
    borglet = Borglet(config, RlimitIsolation())
    spec = sleeper(0, command=["/bin/sh", "-c", "exit 1"], restart_policy="on_failure", cwd=str(tmp_path / "gone"))
    (tmp_path / "gone").mkdir()
    try:
        borglet.sync(SyncRequest.model_validate({"epoch": 1, "seq": 1, "tasks": [spec]}))
        assert borglet.start_queued() == 1
        (tmp_path / "gone").rmdir()  # its working directory goes before its restart
        task = borglet.tasks["alice/batch/0#0"]
        deadline = time.monotonic() + 10
        while task.phase != "FAILED":
            assert time.monotonic() < deadline, (task.phase, task.reason)
            time.sleep(0.05)
            borglet.tick()
        assert task.reason is not None and "working directory" in task.reason and "does not exist" in task.reason
    finally:
        borglet.stop(kill_tasks=True, timeout_s=2)
