"""`minborg cell up/status/down` and `minborg demo` as a user runs them: real processes on
127.0.0.1, each command its own Python process, and nothing left running afterwards."""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import psutil
import pytest

from reference import launcher

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]


def master_available() -> bool:
    try:
        return importlib.util.find_spec("reference.master.cli") is not None
    except ImportError:
        return False


needs_master = pytest.mark.skipif(
    not master_available(), reason="reference.master (the master replica) is not importable yet"
)


def minborg(*args: str, timeout: float = 60.0) -> subprocess.CompletedProcess[str]:
    """Run the CLI in its own process from the repository root, as a user would."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("MINBORG_")}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    env["COLUMNS"] = "160"  # wide enough that Rich never cuts a value in the output checked
    return subprocess.run(
        [sys.executable, "-m", "reference.cli", *args],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def processes_mentioning(text: str) -> list[psutil.Process]:
    """Live processes whose command line names `text` (a state dir unique to one test)."""
    found = []
    for proc in psutil.process_iter(["cmdline", "status"]):
        try:
            if proc.info["status"] != psutil.STATUS_ZOMBIE and text in " ".join(
                proc.info["cmdline"] or ()
            ):
                found.append(proc)
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            pass
    return found


@needs_master
def test_cell_up_status_down_leaves_nothing_running(state_dir: Path) -> None:
    up = minborg("cell", "up", "--replicas", "1", "--machines", "2", "--state-dir", str(state_dir))
    assert up.returncode == 0, up.stdout + up.stderr
    assert "cell local is up" in up.stdout
    info = launcher.CellInfo.load(state_dir)
    assert [p.role for p in info.processes].count(launcher.Role.BORGLET) == 2
    assert all(launcher.is_alive(p) for p in info.processes), "every process outlives `cell up`"
    assert info.master_urls[0].startswith("https://"), "a user's cell serves TLS unless told --plain"

    status = minborg("cell", "status", "--state-dir", str(state_dir), "--json")
    assert status.returncode == 0, status.stdout + status.stderr
    body = json.loads(status.stdout)
    assert body["cell"]["leader"] == "master0"
    assert body["machines"] == {"up": 2, "down": 0}
    assert body["local"]["running"] is True

    table = minborg("cell", "status", "--state-dir", str(state_dir))
    assert table.returncode == 0
    assert "leader" in table.stdout and "2 up, 0 down" in table.stdout

    down = minborg("cell", "down", "--state-dir", str(state_dir))
    assert down.returncode == 0, down.stdout + down.stderr
    assert not any(launcher.is_alive(p) for p in info.processes)
    assert processes_mentioning(str(state_dir)) == []
    assert (state_dir / "cell.json").exists(), "down removes nothing"

    again = minborg("cell", "status", "--state-dir", str(state_dir))
    assert again.returncode == 1
    assert "not running" in again.stderr


@needs_master
def test_second_cell_up_in_the_same_dir_is_refused(state_dir: Path) -> None:
    launcher.up(state_dir, replicas=1, machines=1)
    with pytest.raises(launcher.LauncherError, match="already running"):
        launcher.up(state_dir, replicas=1, machines=1)
    launcher.down(state_dir)
    assert processes_mentioning(str(state_dir)) == []


@needs_master
def test_job_round_trip_through_the_cli(state_dir: Path) -> None:
    launcher.up(state_dir, replicas=1, machines=2)
    flags = ("--state-dir", str(state_dir))
    submit = minborg("job", "submit", "examples/hello_world.yaml", *flags)
    assert submit.returncode == 0, submit.stdout + submit.stderr
    duplicate = minborg("job", "submit", "examples/hello_world.yaml", *flags)
    assert duplicate.returncode == 1 and "409" in duplicate.stderr
    tasks = minborg("task", "list", "demo/hello_world", "--json", *flags)
    assert tasks.returncode == 0
    assert sorted(t["index"] for t in json.loads(tasks.stdout)) == [0, 1, 2]
    machines = minborg("machine", "list", "--json", *flags)
    assert {m["name"] for m in json.loads(machines.stdout)} == {"machine0", "machine1"}
    killed = minborg("job", "kill", "demo/hello_world", *flags)
    assert killed.returncode == 0, killed.stderr
    launcher.down(state_dir)
    assert processes_mentioning(str(state_dir)) == []


@needs_master
def test_demo_runs_to_completion() -> None:
    before = {p.pid for p in psutil.process_iter()}
    demo = minborg("demo", timeout=150.0)
    assert demo.returncode == 0, demo.stdout[-4000:] + demo.stderr[-2000:]
    for step in ("elect a new leader", "write through the new leader", "bring the cell down"):
        assert step in demo.stdout
    assert "FAILED" not in demo.stdout
    leftovers = [p for p in processes_mentioning("minborg-demo-") if p.pid not in before]
    assert leftovers == []


def break_data_dir(data: Path) -> None:
    """Leave the data dir in place but unusable: its `member` directory a file, which etcd
    cannot open (as after a disk fault), so the member exits at once."""
    shutil.rmtree(data / "member")
    (data / "member").write_text("not a directory\n")


@needs_master
def test_a_stopped_cell_comes_back_on_a_quorum_when_one_etcd_member_cannot_start(state_dir: Path) -> None:
    """One member of three whose data dir is unusable (a full or broken disk) does not keep the
    cell down: `cell up` and `cell restart --control-plane` bring it back on the other two, say
    which member is down and why, and keep that member on record for the next try. Two broken
    members are no quorum: refused, naming the member."""
    from reference.store.etcd_cluster import EtcdCluster

    launcher.up(state_dir, replicas=1, machines=1, etcd_members=3)
    try:
        launcher.down(state_dir)
        break_data_dir(EtcdCluster.load(state_dir / "etcd").data_dir(2))

        said: list[str] = []
        info = launcher.resume(state_dir, progress=said.append)
        down = [m for m in said if "did not start" in m]
        assert len(down) == 1 and "etcd2" in down[0] and "2 of 3 members" in down[0], said
        assert "cannot access member directory" in down[0], "the cause, from etcd's own log"
        members = info.of_role(launcher.Role.ETCD)
        assert sorted(launcher.is_alive(m) for m in members) == [False, True, True], members
        assert launcher.CellInfo.load(state_dir).of_role(launcher.Role.MASTER), "masters on record"
        assert all(launcher.is_alive(m) for m in info.of_role(launcher.Role.MASTER))

        said.clear()
        info = launcher.restart(state_dir, control_plane=True, progress=said.append)
        assert any("etcd2" in m and "did not start" in m for m in said), said
        assert all(launcher.is_alive(m) for m in info.of_role(launcher.Role.MASTER)), "a master runs"
        status = minborg("cell", "status", "--state-dir", str(state_dir), "--json")
        assert status.returncode == 0, status.stdout + status.stderr
        assert json.loads(status.stdout)["cell"]["leader"], status.stdout

        launcher.down(state_dir)  # a second member broken: no quorum, and the refusal says why
        break_data_dir(EtcdCluster.load(state_dir / "etcd").data_dir(1))
        with pytest.raises(launcher.LauncherError, match=r"etcd did not come back on its data: member [12] exited: .*not a directory"):
            launcher.resume(state_dir)
    finally:
        launcher.down(state_dir)

