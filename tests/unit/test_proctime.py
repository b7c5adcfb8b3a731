"""A step of the host's wall clock does not make a live process look gone.

The kernel keeps /proc/stat's btime (the boot on the wall clock) as the wall clock less the
time since boot, so an NTP step, a virtual machine restored from a snapshot or `date -s`
moves it, and psutil's create_time() (btime + the start's ticks since boot) moves with it.
When process identity was that create_time, a step of a second made every recorded master,
borglet and etcd member look exited to the launcher (a cell's tests failed with "exited at
startup" and empty logs), and a borglet took its running tasks for ended and ran them again.

Here the step is made the way the kernel makes it, by moving the btime psutil reads (a real
step of the host's clock would move every other process's clock as well), and every identity
check is asked again: the launcher's records, the fast command line's, etcd members', the
borglet's tasks'. A record written before starts were kept in ticks is still read right when
no step came between; and a different start (a pid reused) is still told apart."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import psutil
import psutil._pslinux as pslinux
import pytest

from reference import launcher, proctime
from reference.borglet import processes
from reference.borglet.task import Task
from reference.cli import fast as cli_fast
from reference.store.etcd_cluster import EtcdCluster, Member
from reference.waiting import wait_until

STEP_S = 60  # the wall clock stepped a minute forward


@pytest.fixture
def sleeper(tmp_path: Path) -> Iterator[launcher.ProcessRecord]:
    """A process started as the launcher starts a master (its own session), recorded."""
    record = launcher.spawn(
        launcher.Role.MASTER, "m0", [sys.executable, "-c", "import time; time.sleep(60)"],
        "http://127.0.0.1:1", tmp_path / "m0.log", str(tmp_path), {},
    )  # fmt: skip
    yield record
    launcher.stop_processes([record], timeout=5.0)


@pytest.fixture
def stepped(monkeypatch: pytest.MonkeyPatch) -> None:
    """The wall clock stepped STEP_S forward: btime, as psutil and proctime read it, moved."""
    real = pslinux.boot_time()
    second = proctime.boot_second()
    assert second is not None
    monkeypatch.setattr(pslinux, "boot_time", lambda: real + STEP_S)
    monkeypatch.setattr(proctime, "boot_second", lambda: second + STEP_S)


def test_the_step_is_real_to_psutil(sleeper: launcher.ProcessRecord, stepped: None) -> None:
    # The attack as it lands: the process's create_time now reads a minute later, so an
    # identity by create_time (a record without ticks) calls the live process gone.
    assert abs(psutil.Process(sleeper.pid).create_time() - sleeper.create_time - STEP_S) < 0.05
    legacy = launcher.ProcessRecord(**{**vars(sleeper), "start_ticks": None})
    assert not launcher.is_alive(legacy)


def test_a_launched_process_stays_itself_across_a_step(sleeper: launcher.ProcessRecord, stepped: None) -> None:
    assert sleeper.start_ticks == proctime.start_ticks(sleeper.pid)
    assert launcher.is_alive(sleeper)
    # Another start on the same pid (the pid reused) is another process.
    assert not launcher.is_alive(launcher.ProcessRecord(**{**vars(sleeper), "start_ticks": sleeper.start_ticks + 1}))


def test_the_fast_status_reads_the_same_across_a_step(sleeper: launcher.ProcessRecord, tmp_path: Path, stepped: None) -> None:
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    records = (sleeper, launcher.ProcessRecord(launcher.Role.BORGLET, "b0", int(gone.stdout), 0.0, "", "", (), 5))
    launcher.CellInfo("local", str(tmp_path), str(tmp_path), 0.0, (), (), {}, records).save()
    fast, full = cli_fast.local_status(str(tmp_path)), launcher.status(tmp_path)
    assert [p["alive"] for p in fast["processes"]] == [p["alive"] for p in full["processes"]] == [True, False]


def test_a_cell_file_written_before_ticks_is_read_by_its_create_time(sleeper: launcher.ProcessRecord, tmp_path: Path) -> None:
    # No step between writing and reading: a record with only create_time is still alive,
    # to the launcher and to the fast command line, and one a second off is not.
    legacy = launcher.ProcessRecord(**{**vars(sleeper), "start_ticks": None})
    other = launcher.ProcessRecord(**{**vars(legacy), "create_time": legacy.create_time - 1.0})
    launcher.CellInfo("local", str(tmp_path), str(tmp_path), 0.0, (), (), {}, (legacy, other)).save()
    doc = json.loads((tmp_path / "cell.json").read_text())
    for p in doc["processes"]:
        del p["start_ticks"]  # as an older cell file has them
    (tmp_path / "cell.json").write_text(json.dumps(doc))
    assert [p["alive"] for p in cli_fast.local_status(str(tmp_path))["processes"]] == [True, False]
    assert [launcher.is_alive(r) for r in launcher.CellInfo.load(tmp_path).processes] == [True, False]


def test_an_etcd_member_stays_itself_across_a_step(sleeper: launcher.ProcessRecord, tmp_path: Path, stepped: None) -> None:
    cluster = EtcdCluster.__new__(EtcdCluster)
    cluster._popens = {}
    cluster.members = [Member("etcd0", 1, 2, sleeper.pid, sleeper.create_time, sleeper.start_ticks)]
    assert cluster._process(0) is not None
    cluster.members[0].start_ticks += 1  # another process on that pid
    assert cluster._process(0) is None


def test_a_borglets_task_stays_itself_across_a_step(sleeper: launcher.ProcessRecord, stepped: None) -> None:
    ticks = proctime.start_ticks(sleeper.pid)
    assert processes.is_same_process(sleeper.pid, ticks)
    assert not processes.is_same_process(sleeper.pid, ticks + 1)


def test_a_task_saved_with_a_create_time_is_adopted_by_its_ticks(sleeper: launcher.ProcessRecord) -> None:
    # tasks.json from before starts were kept in ticks: create_time, read back as the ticks
    # it stood for (no step between).
    spec = {"task_id": "a/j/0#0", "job": "a/j", "index": 0, "incarnation": 0, "command": ["sleep", "60"],
            "request": {"cpu": 100, "ram": 1 << 20}}  # fmt: skip
    record = {"key": "k", "state": "RUNNING", "pid": sleeper.pid, "create_time": sleeper.create_time, "spec": spec}
    task = Task.from_record(record)
    assert task.start_ticks == sleeper.start_ticks
    assert processes.is_same_process(sleeper.pid, task.start_ticks)
    assert "create_time" not in task.to_record() and task.to_record()["start_ticks"] == sleeper.start_ticks


def test_an_exited_process_is_gone(tmp_path: Path) -> None:
    record = launcher.spawn(
        launcher.Role.BORGLET, "b0", [sys.executable, "-c", "pass"], "", tmp_path / "b0.log", str(tmp_path), {}
    )  # fmt: skip
    psutil.Process(record.pid).wait(10)
    assert not launcher.is_alive(record)
    assert not processes.is_same_process(record.pid, record.start_ticks)
    assert proctime.start_ticks(record.pid) is None


def test_a_zombie_is_not_the_process() -> None:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    ticks = proctime.start_ticks(child.pid)
    assert ticks is not None
    # Exited and not waited for: a zombie, its pid and start still in /proc.
    zombie = wait_until(lambda: (proctime.stat_fields(child.pid) or [b""])[0] == b"Z", 10, "the child a zombie", 0.01)
    assert zombie and proctime.start_ticks(child.pid) == ticks
    assert not proctime.is_started_at(child.pid, ticks)
    assert not processes.is_same_process(child.pid, ticks)
    child.wait()
