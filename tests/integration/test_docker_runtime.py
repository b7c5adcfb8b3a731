"""The docker runtime on a real cell: hello_world in its image answers through BNS, a container
killed from outside is restarted by policy, a memory hog is OOM-killed and reported so, a
restarted borglet re-adopts its containers without restarting them, containers that end before
the engine shows their init end finished with the borglet alive, and `cell down` leaves no
container behind.

Needs a Docker engine and the images (`minborg image build`); without an engine the tests skip,
except in CI (`CI` set), where a missing engine fails them."""

from __future__ import annotations

import json
import os
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from reference import images, launcher
from reference.borglet import cgroups
from reference.client import CellClient
from tests.integration.cellkit import docker_engine, wait_for

pytestmark = [pytest.mark.integration, pytest.mark.docker]

#: cgroup v1 writable (as root here): the borglet isolates with cgroups and gives allocs groups.
CGROUPS = cgroups.CgroupTree("probe-docker").usable() is None


@pytest.fixture(scope="module")
def docker_client() -> Any:
    client = docker_engine("the docker runtime's tests")
    images.build_all(say=lambda _msg: None)  # skipped steps when they are built already
    return client


@pytest.fixture(scope="module")
def cell(docker_client: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[launcher.CellInfo, CellClient]]:
    root = tmp_path_factory.mktemp("docker") / "cell"
    name = f"dk{uuid.uuid4().hex[:8]}"  # the label that finds this cell's containers
    info = launcher.up(root, cell=name, machines=1, runtime="docker", fresh=True)
    client = CellClient.discover(state_dir=root)
    try:
        yield info, client
    finally:
        client.close()
        if launcher.CellInfo.load(root).running():
            launcher.down(root)
        for c in docker_client.containers.list(all=True, filters={"label": f"minborg.cell={name}"}):
            c.remove(force=True)


def job(name: str, **fields: Any) -> dict[str, Any]:
    return {
        "name": name, "user": "dk", "task_count": 1, "request": {"cpu": "100m", "ram": "64MiB"},
        "image": "minborg/hello_world", "command": ["python", "-m", "examples.hello_world.server"],
        "restart_policy": "always", **fields,
    }  # fmt: skip


def containers_of(client: Any, cell: str, job_key: str) -> list[Any]:
    filters = {"label": [f"minborg.cell={cell}", f"minborg.job={job_key}"], "status": "running"}
    return client.containers.list(filters=filters)


def running(api: CellClient, key: str, n: int) -> list[dict[str, Any]] | None:
    tasks = [t for t in api.tasks(key) if t["state"] == "RUNNING" and t["borglet_state"] == "RUNNING"]
    return tasks if len(tasks) >= n else None


def test_hello_world_runs_in_its_image_and_answers_through_bns(cell: Any, docker_client: Any) -> None:
    info, api = cell
    api.submit(job("web", task_count=2, health_check={"path": "/healthz", "interval_s": 0.5}))
    wait_for(lambda: running(api, "dk/web", 2), 60, "2 web containers running")
    found = wait_for(lambda: (r := api.resolve(f"1.web.dk.{info.cell}.minborg"))["healthy"] and r, 30, "healthy")
    # "hello from <bns name>", then the task's facts as JSON
    answer = json.loads(httpx.get(f"http://{found['host']}:{found['port']}/", timeout=5).text.splitlines()[-1])
    assert answer["bns"] == f"1.web.dk.{info.cell}.minborg"
    assert answer["pid"] < 100  # its own pid namespace: a container, not a host process
    (box,) = [c for c in containers_of(docker_client, info.cell, "dk/web") if c.labels["minborg.index"] == "1"]
    assert box.labels["minborg.machine"] == "machine0" and box.labels["minborg.incarnation"] == "0"
    host = box.attrs["HostConfig"]
    assert (host["NetworkMode"], host["ReadonlyRootfs"], host["PidsLimit"]) == ("host", True, 1024)
    assert host["NanoCpus"] == 100_000_000 and host["Memory"] == 64 * 1024**2
    assert host["SecurityOpt"] == ["no-new-privileges"] and not box.attrs["Config"]["User"].startswith("0")
    # The task's own output, through the borglet's log path (its first line names its BNS name).
    logs = wait_for(lambda: api.logs("dk/web", 1, stream="stdout", tail=20) or None, 20, "the task's stdout")
    assert f"1.web.dk.{info.cell}.minborg".encode() in logs


def test_task_exec_runs_in_the_container_as_its_user(cell: Any, docker_client: Any) -> None:
    info, api = cell
    wait_for(lambda: running(api, "dk/web", 2), 60, "2 web containers running")
    (box,) = [c for c in containers_of(docker_client, info.cell, "dk/web") if c.labels["minborg.index"] == "0"]
    probe = 'echo "$(id -u) $TASK_ID"; readlink /proc/1/ns/pid >&2; exit 4'
    result = api.request("POST", "/v1/jobs/dk/web/tasks/0/exec", json={"command": ["sh", "-c", probe]})
    uid, task_id = result["stdout"].split()
    assert (result["exit_code"], uid, task_id.partition("@")[0]) == (4, box.attrs["Config"]["User"].split(":")[0], "dk/web/0#0")
    # In the container's pid namespace: its pid 1 is the container's init, not the host's.
    assert result["stderr"].strip() == os.readlink(f"/proc/{box.attrs['State']['Pid']}/ns/pid")
    killed = api.request("POST", "/v1/jobs/dk/web/tasks/0/exec", json={"command": ["sleep", "30"], "timeout_s": 1})
    assert (killed["timed_out"], killed["exit_code"]) == (True, 137) and killed["duration_s"] < 10


def test_task_exec_it_runs_a_terminal_in_the_container(cell: Any, docker_client: Any) -> None:
    import base64

    info, api = cell
    wait_for(lambda: running(api, "dk/web", 2), 60, "2 web containers running")
    (box,) = [c for c in containers_of(docker_client, info.cell, "dk/web") if c.labels["minborg.index"] == "0"]
    base = "/v1/jobs/dk/web/tasks/0/terminal"
    session = api.request("POST", base, json={"command": ["sh"], "rows": 20, "cols": 100})["session"]
    keys = b'echo "u=$(id -u) t=$(tty) ns=$(readlink /proc/1/ns/pid)"; exit 5\n'
    api.request("POST", f"{base}/{session}/input", json={"data": base64.b64encode(keys).decode()})
    out, offset, answer = b"", 0, {"exited": False}
    deadline = time.monotonic() + 30
    while not answer["exited"] and time.monotonic() < deadline:
        answer = api.request("POST", f"{base}/{session}/output", json={"offset": offset, "wait_s": 5})
        out, offset = out + base64.b64decode(answer["data"]), answer["offset"]
    assert answer["exited"] and answer["exit_code"] == 5, out
    # The keys may reach the pty before the shell has printed its prompt: the terminal echoes
    # them at once, and the prompt then comes before the command's own line ("# u=...").
    said_lines = [t[t.index("u="):] for t in out.decode(errors="replace").splitlines() if "u=" in t and "$(" not in t]
    assert said_lines, out
    line = said_lines[0]
    said = dict(part.split("=", 1) for part in line.split())
    assert said["u"] == box.attrs["Config"]["User"].split(":")[0] and said["t"].startswith("/dev/pts/"), line
    assert said["ns"] == os.readlink(f"/proc/{box.attrs['State']['Pid']}/ns/pid"), "in the container's pid namespace"


def test_a_container_killed_from_outside_is_restarted(cell: Any, docker_client: Any) -> None:
    info, api = cell
    api.submit(job("killed"))
    wait_for(lambda: running(api, "dk/killed", 1), 60, "the container running")
    (box,) = containers_of(docker_client, info.cell, "dk/killed")
    box.kill()
    wait_for(lambda: api.tasks("dk/killed")[0]["restarts"] >= 1 and running(api, "dk/killed", 1), 60, "restart")
    (again,) = wait_for(lambda: containers_of(docker_client, info.cell, "dk/killed") or None, 30, "a new container")
    assert again.id != box.id


def test_a_memory_hog_is_oom_killed_and_reported_so(cell: Any) -> None:
    _, api = cell
    hog = "x = bytearray(256 * 1024 * 1024); import time; time.sleep(30)"
    api.submit(job("hog", command=["python", "-c", hog], restart_policy="never"))

    def oom_event() -> list[dict[str, Any]] | None:
        return [e for e in api.task("dk/hog", 0)["events"] if e["kind"] == "oom"] or None

    (event,) = wait_for(oom_event, 60, "the hog's OOM kill reported")
    assert "OOM" in event["detail"]


def test_a_restarted_borglet_readopts_its_containers(cell: Any, docker_client: Any) -> None:
    info, api = cell
    api.submit(job("kept", task_count=2))
    wait_for(lambda: running(api, "dk/kept", 2), 60, "2 containers running")
    before = {c.id: c.attrs["State"]["StartedAt"] for c in containers_of(docker_client, info.cell, "dk/kept")}
    started = {t["index"]: t["started_at"] for t in api.tasks("dk/kept")}
    launcher.restart(info.state_dir)
    wait_for(lambda: running(api, "dk/kept", 2), 60, "the tasks running after the restart")
    after = {c.id: c.attrs["State"]["StartedAt"] for c in containers_of(docker_client, info.cell, "dk/kept")}
    assert after == before
    assert {t["index"]: t["started_at"] for t in api.tasks("dk/kept")} == started
    assert all(t["restarts"] == 0 for t in api.tasks("dk/kept"))


def test_a_container_in_an_alloc_runs_beneath_the_allocs_cgroup(cell: Any, docker_client: Any) -> None:
    """Its `cgroup_parent` is the alloc's group, which holds the alloc's limits, as a process
    task's group in that alloc is beneath it (with rlimit isolation allocs get no group here)."""
    info, api = cell
    api.submit_alloc_set({"name": "box", "user": "dk", "count": 1, "resources": {"cpu": "500m", "ram": "256MiB"}})
    api.submit(job("inbox", alloc="box"))
    wait_for(lambda: running(api, "dk/inbox", 1), 60, "the container in the alloc running")
    (box,) = containers_of(docker_client, info.cell, "dk/inbox")
    parent = box.attrs["HostConfig"]["CgroupParent"]
    if CGROUPS:
        assert parent.endswith("/minborg-machine0/alloc-dk.box.0"), parent
        alloc_group = Path("/sys/fs/cgroup/memory", parent.lstrip("/"))
        assert (alloc_group / "memory.limit_in_bytes").read_text().strip() == str(256 * 1024**2)
        assert (alloc_group / box.id).is_dir()  # the container's own group lies beneath the alloc's
        pid = box.attrs["State"]["Pid"]
        assert f"/alloc-dk.box.0/{box.id}" in Path(f"/proc/{pid}/cgroup").read_text()
    else:
        assert parent.endswith("/minborg-machine0"), parent
    api.delete_alloc_set("dk/box")
    wait_for(lambda: not containers_of(docker_client, info.cell, "dk/inbox"), 60, "the container gone with its set")
    if CGROUPS:
        wait_for(lambda: not alloc_group.exists(), 30, "the alloc's group removed with its last container")


def test_containers_that_end_before_they_are_inspected_end_finished_and_the_borglet_lives(cell: Any) -> None:
    """A container whose command ends at once is often gone before the engine is asked for its
    init's pid, which the engine then gives as 0. Signalling pid 0 signals the borglet's own
    process group: the borglet died, and with it every later task of the machine."""
    _, api = cell
    api.submit(job("brief", task_count=8, command=["true"], restart_policy="never"))

    def all_ended() -> list[dict[str, Any]] | None:
        tasks = api.tasks("dk/brief")
        return tasks if len(tasks) == 8 and all(t["state"] == "DEAD" for t in tasks) else None

    tasks = wait_for(all_ended, 90, "8 brief containers ended")
    assert [t["cause"] for t in tasks] == ["finished"] * 8, tasks
    api.submit(job("after"))  # the machine's borglet still starts tasks
    wait_for(lambda: running(api, "dk/after", 1), 60, "a task started after the brief ones")


def test_cell_down_leaves_no_container(cell: Any, docker_client: Any) -> None:
    info, _ = cell
    assert docker_client.containers.list(filters={"label": f"minborg.cell={info.cell}"})
    launcher.down(Path(info.state_dir))
    assert docker_client.containers.list(all=True, filters={"label": f"minborg.cell={info.cell}"}) == []
