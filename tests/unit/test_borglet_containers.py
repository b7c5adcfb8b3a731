"""The docker runtime's pure parts: the SDK arguments built from a task, its labels and
environment, the cgroup paths, the image list, and which found containers a borglet removes;
and the supervisor on a fake engine: containers beside processes, an OOM kill, re-adoption."""

from __future__ import annotations

import subprocess
import threading
import time

import pytest

from reference import proctime
from reference.borglet import containers, decisions, processes
from reference.borglet.cgroups import CgroupTree
from reference.borglet.isolation import CgroupIsolation, RlimitIsolation, Sample
from reference.borglet.protocol import SyncRequest, TaskSpec
from reference.borglet.supervisor import Borglet, MachineConfig

SPEC = TaskSpec.model_validate(
    {
        "task_id": "demo/web/1#0@3", "job": "demo/web", "index": 1, "incarnation": 0,
        "bns": "1.web.demo.local.minborg", "command": ["python", "-m", "examples.hello_world.server"],
        "env": {"GREETING": "hi"}, "request": {"cpu": 250, "ram": 64 * 1024**2},
        "image": "minborg/hello_world",
    }
)  # fmt: skip


def kwargs_of(spec: TaskSpec, **extra: object) -> dict[str, object]:
    return containers.container_kwargs(
        spec, {"PORT": "8080"}, 2_000_000_123, {"minborg.cell": "local"}, "/state/tasks/k", "/minborg-m0", **extra
    )  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "request_, cpu_kwargs",
    [
        # 250 milli-CPU = 0.25 CPU = 250 * 1e6 = 250,000,000 nano-CPUs; 64 MiB = 67,108,864 bytes,
        # the same figure for memory + swap: no swap beyond the request.
        ({"cpu": 250, "ram": 64 * 1024**2}, {"nano_cpus": 250_000_000, "mem_limit": 67_108_864, "memswap_limit": 67_108_864}),
        # 2 cores = 2000 milli-CPU = 2,000,000,000 nano-CPUs; no RAM request: no memory limit.
        ({"cpu": 2000, "ram": 0}, {"nano_cpus": 2_000_000_000}),
        # no request at all: no limit of either kind (the engine's defaults: unlimited)
        ({"cpu": 0, "ram": 0}, {}),
    ],
)
def test_limits_come_from_the_tasks_request(request_, cpu_kwargs):
    kwargs = kwargs_of(SPEC.model_copy(update={"request": SPEC.request.model_copy(update=request_)}))
    assert {k: kwargs[k] for k in ("nano_cpus", "mem_limit", "memswap_limit") if k in kwargs} == cpu_kwargs


def test_container_kwargs_run_the_jobs_command_in_its_image_confined():
    kwargs = kwargs_of(SPEC)
    assert kwargs["image"] == "minborg/hello_world"
    assert kwargs["command"] == ["python", "-m", "examples.hello_world.server"]
    assert kwargs["entrypoint"][:2] == ["/bin/sh", "-c"] and "/minborg/logs/stdout" in kwargs["entrypoint"][2]
    assert kwargs["environment"] == {"PORT": "8080"}
    assert kwargs["user"] == "2000000123:2000000123"  # the job user's uid, never root
    assert kwargs["network_mode"] == "host"
    assert kwargs["cgroup_parent"] == "/minborg-m0"
    assert kwargs["labels"] == {"minborg.cell": "local"}
    assert kwargs["read_only"] is True and "/tmp" in kwargs["tmpfs"]
    assert kwargs["security_opt"] == ["no-new-privileges"] and kwargs["cap_drop"] == ["ALL"]
    assert kwargs["pids_limit"] == containers.PIDS_LIMIT
    assert kwargs["volumes"] == {"/state/tasks/k": {"bind": "/minborg/logs", "mode": "rw"}}
    assert "working_dir" not in kwargs  # the image's own WORKDIR
    assert kwargs_of(SPEC.model_copy(update={"cwd": "/srv"}))["working_dir"] == "/srv"
    assert kwargs_of(SPEC, read_only=False, pids_limit=10)["read_only"] is False


def test_labels_name_the_cell_machine_job_index_incarnation_and_borglet():
    assert containers.labels("local", "machine0", "/s/m0", SPEC) == {
        "minborg.cell": "local", "minborg.machine": "machine0", "minborg.borglet": "/s/m0",
        "minborg.job": "demo/web", "minborg.index": "1", "minborg.incarnation": "0",
        "minborg.task": "demo/web/1#0@3",
    }  # fmt: skip


def test_task_env_is_the_process_runtimes_without_the_hosts():
    env = containers.task_env(SPEC, 8080, "machine0", {"MINBORG_TASK_ID": SPEC.task_id}, "10.200.0.7")
    assert env == {
        "HOST": "10.200.0.7", "PORT": "8080", "TASK_INDEX": "1", "TASK_ID": "demo/web/1#0@3", "BNS_NAME": "1.web.demo.local.minborg",
        "MINBORG_MACHINE": "machine0", "HOME": "/tmp", "GREETING": "hi", "MINBORG_TASK_ID": "demo/web/1#0@3",
    }  # fmt: skip
    assert "PATH" not in env  # the image's own


@pytest.mark.parametrize(
    "self_cgroup, parent",
    [
        ("12:memory:/user.slice\n11:cpu,cpuacct:/user.slice\n", "/user.slice/minborg-m0"),
        ("4:memory:/\n", "/minborg-m0"),
        ("0::/\n", "/minborg-m0"),  # no v1 memory line: under the hierarchy's root
    ],
)
def test_default_cgroup_parent_is_the_borglets_own_group(self_cgroup, parent):
    assert containers.default_cgroup_parent("m0", self_cgroup) == parent


def test_a_container_in_an_alloc_goes_beneath_the_allocs_group():
    assert containers.alloc_cgroup_parent("/user.slice/minborg-m0/", "alloc-alice.logs.0") == (
        "/user.slice/minborg-m0/alloc-alice.logs.0"
    )
    box = containers.Containers("local", "m0", "/state", "/minborg-m0", client=object())
    assert box.parent_for(None) == "/minborg-m0"
    assert box.parent_for("alloc-alice.logs.0") == "/minborg-m0/alloc-alice.logs.0"


def test_cgroup_dirs_follow_the_cgroupfs_layout():
    assert containers.cgroup_dirs("/a/minborg-m0", "abc", root="/cg") == {
        "memory": "/cg/memory/a/minborg-m0/abc", "cpuacct": "/cg/cpuacct/a/minborg-m0/abc",
    }  # fmt: skip


def test_image_tags_lists_names_with_and_without_latest():
    listed = [{"RepoTags": ["minborg/base:latest"]}, {"RepoTags": ["<none>:<none>"]}, {"RepoTags": None},
              {"RepoTags": ["x:1", "minborg/hello_world:latest"]}]  # fmt: skip
    assert containers.image_tags(listed) == [
        "minborg/base", "minborg/base:latest", "minborg/hello_world", "minborg/hello_world:latest", "x:1",
    ]  # fmt: skip


@pytest.mark.parametrize(
    "live, its_container, found, unwanted",
    [
        (False, "", "c1", True),  # no live task here by that id: forgotten, ended, or never known
        (False, "c1", "c1", True),  # its task ended; the container is left over
        (True, "c1", "c1", False),  # the task's own
        (True, "c2", "c1", True),  # an older run of a task that runs in c2 now
        (True, "", "c1", False),  # the task is being started: this may be its new container
    ],
)
def test_container_unwanted(live, its_container, found, unwanted):
    assert decisions.container_unwanted(live, its_container, found) is unwanted


# --- the supervisor with the docker runtime, on a fake engine whose "containers" are processes ---


class FakeEngine:
    """What Borglet asks of containers.Containers; a container is a local `sleep` process."""

    def __init__(self) -> None:
        self.boxes: dict[str, tuple[str, subprocess.Popen]] = {}  # id -> (task id, process)
        self.oom: set[str] = set()
        self.removed: list[str] = []
        self.runs = 0
        self.parents: dict[str, str | None] = {}  # id -> the cgroup_parent it was made under
        self.lock = threading.Lock()  # the borglet starts several containers at once

    def run(self, spec, env, uid, log_dir, cgroup_parent=None):
        with self.lock:
            self.runs += 1
            cid = f"c{self.runs}"
            self.parents[cid] = cgroup_parent
        proc = subprocess.Popen(["sleep", "60"], start_new_session=True)
        self.boxes[cid] = (spec.task_id, proc)
        return containers.Started(cid, proc.pid, proctime.start_ticks(proc.pid))

    def exit_status(self, cid):
        proc = self.boxes[cid][1]
        return proc.wait(), cid in self.oom

    def owned(self):
        return [
            containers.Found(tid, containers.Started(cid, p.pid, proctime.start_ticks(p.pid)))
            for cid, (tid, p) in self.boxes.items() if p.poll() is None
        ]  # fmt: skip

    def labelled(self):
        return {cid: tid for cid, (tid, _) in self.boxes.items()}

    def all_ids(self):
        return list(self.boxes)

    def remove(self, cid):
        if cid not in self.boxes:  # gone already: as the engine's NotFound, not an error
            return True
        tid, proc = self.boxes.pop(cid)
        proc.kill()
        proc.wait()
        self.removed.append(cid)
        return True

    def parent_for(self, alloc_directory):
        return "/minborg-m" if alloc_directory is None else containers.alloc_cgroup_parent("/minborg-m", alloc_directory)

    def sample(self, cid, pid, cgroup_parent=None):
        return Sample(cpu_ns=0, ram_bytes=1234)

    def refresh_images(self):
        pass

    def images(self):
        return ["minborg/hello_world"]


def borglet_on(tmp_path, engine: FakeEngine) -> Borglet:
    config = MachineConfig(name="m", capacity={"cpu": 1000, "ram": 2**30}, state_dir=str(tmp_path))
    return Borglet(config, RlimitIsolation(), containers=engine)  # type: ignore[arg-type]


def sync(borglet: Borglet, seq: int, *specs: dict) -> None:
    borglet.sync(SyncRequest.model_validate({"epoch": 1, "seq": seq, "tasks": list(specs)}))


def boxed(tid: str, **extra) -> dict:
    return {"task_id": tid, "job": "u/j", "command": ["serve"], "image": "minborg/hello_world", **extra}


def settle(borglet: Borglet, check, what: str) -> None:
    deadline = time.monotonic() + 5
    while not check():
        assert time.monotonic() < deadline, what
        time.sleep(0.01)
        borglet.tick()


def test_a_task_with_an_image_runs_in_a_container_and_one_without_as_a_process(tmp_path):
    engine = FakeEngine()
    borglet = borglet_on(tmp_path, engine)
    try:
        sync(borglet, 1, boxed("a#0"), {"task_id": "p#0", "command": ["sleep", "60"]})
        assert borglet.start_queued() == 2
        assert borglet.tasks["a#0"].container == "c1" and borglet.tasks["p#0"].container == ""
        assert engine.runs == 1  # only the task with an image went to the engine
        report = borglet.report()
        assert report["runtime"] == "docker" and report["images"] == ["minborg/hello_world"]
    finally:
        borglet.stop(kill_tasks=True, timeout_s=3)
    assert engine.boxes == {}  # a stop that kills its tasks removes every container it ran


def test_an_oom_killed_container_is_reported_as_oom_and_removed(tmp_path):
    engine = FakeEngine()
    borglet = borglet_on(tmp_path, engine)
    try:
        sync(borglet, 1, boxed("a#0"))
        borglet.start_queued()
        engine.oom.add("c1")
        engine.boxes["c1"][1].kill()
        settle(borglet, lambda: borglet.tasks["a#0"].ended, "the container's end seen")
        task = borglet.tasks["a#0"]
        assert (task.phase, task.reason, task.container) == ("FAILED", "oom", "")
        borglet.release_groups()
        assert engine.removed == ["c1"]
    finally:
        borglet.stop(kill_tasks=True, timeout_s=3)


def test_a_restarted_borglet_readopts_by_labels_and_removes_what_it_no_longer_wants(tmp_path):
    engine = FakeEngine()
    first = borglet_on(tmp_path, engine)
    sync(first, 1, boxed("a#0"), boxed("b#0"))
    first.start_queued()
    pid, kept, dropped = first.tasks["a#0"].pid, first.tasks["a#0"].container, first.tasks["b#0"].container
    first.stop()  # tasks left running, as at a borglet crash
    # A container whose record never reached the table: the borglet died between its save and
    # the container's start, or a run of a task no longer here.
    stray = engine.run(TaskSpec.model_validate(boxed("gone#0")), {}, 1, "")
    second = borglet_on(tmp_path, engine)
    try:
        second.load()
        assert second.tasks["a#0"].pid == pid and second.tasks["a#0"].container == kept
        assert second.tasks["a#0"].phase == "RUNNING"
        sync(second, 2, boxed("a#0"))  # b is no longer wanted
        second.tick()
        settle(second, lambda: second.tasks["b#0"].ended, "b killed")
        second.tick()
        second.release_groups()
        assert stray.container_id in engine.removed and dropped in engine.removed
        assert kept in engine.boxes and engine.runs == 3  # a kept running, never started again
    finally:
        second.stop(kill_tasks=True, timeout_s=3)


@pytest.mark.parametrize(
    "image, path",
    [
        ("minborg/hello_world", "/s/minborg_hello_world.tar"),
        ("minborg/hello_world:latest", "/s/minborg_hello_world.tar"),  # the same image
        ("minborg/batch:v2", "/s/minborg_batch_v2.tar"),
    ],
)
def test_store_path(image, path):
    assert containers.store_path("/s", image) == path


def test_image_names_are_the_base_then_one_per_dockerfile(tmp_path):
    from reference import images

    for name in ("hello_world", "batch"):
        (tmp_path / "images" / name).mkdir(parents=True)
        (tmp_path / "images" / name / "Dockerfile").write_text("FROM minborg/base\n")
    (tmp_path / "images" / "notes").mkdir()  # no Dockerfile: no image
    assert images.image_names(tmp_path) == ["minborg/base", "minborg/batch", "minborg/hello_world"]
    assert images.image_names(images.repository_root()) == ["minborg/base", "minborg/batch", "minborg/hello_world"]



def test_a_container_in_an_alloc_runs_beneath_the_allocs_group_made_first_and_removed_after(tmp_path):
    """With cgroup isolation the borglet makes the alloc's group (its limits) before the engine
    makes the container beneath it; the group goes once the alloc's last container is removed."""
    root = tmp_path / "cgroup"
    for controller in ("memory", "cpu", "cpuacct", "pids"):
        (root / controller).mkdir(parents=True)
    tree = CgroupTree("m", root=str(root), self_cgroup="4:memory:/\n3:cpu,cpuacct:/\n2:pids:/\n")
    engine = FakeEngine()
    config = MachineConfig(name="m", capacity={"cpu": 1000, "ram": 2**30}, state_dir=str(tmp_path / "state"))
    borglet = Borglet(config, CgroupIsolation(tree), containers=engine)  # type: ignore[arg-type]
    alloc = {"name": "alice/logs/0", "cpu": 500, "ram": 256 << 20}
    group = root / "memory" / "minborg-m" / "alloc-alice.logs.0"
    try:
        sync(borglet, 1, boxed("a#0", alloc=alloc), boxed("b#0"))
        assert borglet.start_queued() == 2
        by_task = {engine.boxes[cid][0]: parent for cid, parent in engine.parents.items()}
        assert by_task == {"a#0": "/minborg-m/alloc-alice.logs.0", "b#0": "/minborg-m"}
        assert (group / "memory.limit_in_bytes").read_text() == str(256 << 20)
        for f in group.iterdir():  # the stand-in tree holds the files a kernel's rmdir ignores
            f.unlink()
        sync(borglet, 2, boxed("b#0"))
        settle(borglet, lambda: borglet.tasks.get("a#0") is None or borglet.tasks["a#0"].ended, "a#0 killed")
        borglet.release_groups()
        assert not group.exists()
    finally:
        borglet.stop(kill_tasks=True, timeout_s=3)


class EndedEngine(FakeEngine):
    """An engine whose containers end before they are inspected: the engine shows no init
    (pid 0), as docker does for a container that has already exited."""

    def run(self, spec, env, uid, log_dir, cgroup_parent=None):
        started = super().run(spec, env, uid, log_dir, cgroup_parent)
        proc = self.boxes[started.container_id][1]
        proc.kill()
        proc.wait()
        return containers.Started(started.container_id, 0, None)

    def exit_status(self, cid):
        return 0, False


@pytest.fixture
def signals_sent(monkeypatch):
    """Every pid the borglet signals; one under 2 is never passed on to the kernel (there, 0
    would kill this test's own process group)."""
    import os

    sent: list[int] = []
    real_kill, real_killpg = os.kill, os.killpg

    def kill(pid, sig):
        sent.append(pid)
        if pid > 1:
            real_kill(pid, sig)

    def killpg(pid, sig):
        sent.append(pid)
        if pid > 1:
            real_killpg(pid, sig)

    monkeypatch.setattr(os, "kill", kill)
    monkeypatch.setattr(os, "killpg", killpg)
    return sent


@pytest.mark.parametrize("killed", [False, True], ids=["ends", "killed"])
def test_a_container_that_ended_before_its_init_was_seen_ends_and_nothing_signals_pid_0(tmp_path, signals_sent, killed):
    engine = EndedEngine()
    borglet = borglet_on(tmp_path, engine)
    try:
        sync(borglet, 1, boxed("a#0", restart_policy="never"))
        assert borglet.start_queued() == 1
        assert borglet.tasks["a#0"].pid == 0 and borglet.tasks["a#0"].container == "c1"
        if killed:  # the cell no longer wants it before the borglet looks again
            sync(borglet, 2)
        settle(borglet, lambda: borglet.tasks["a#0"].ended, "the container's end seen")
        task = borglet.tasks["a#0"]
        assert (task.phase, task.exit_code) == (("KILLED", None) if killed else ("FINISHED", 0))
        borglet.release_groups()
        assert engine.removed == ["c1"]
    finally:
        borglet.stop(kill_tasks=True, timeout_s=3)
    assert all(pid > 1 for pid in signals_sent), signals_sent


def test_signal_session_never_signals_the_callers_own_group(signals_sent):
    # Signalled for real in a child of its own session: without the guard the child kills itself.
    import sys

    code = "import signal; from reference.borglet import processes; processes.signal_session(0, signal.SIGKILL); print('alive')"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, start_new_session=True)
    assert (done.returncode, done.stdout.strip()) == (0, "alive"), done.stderr
    # -1 (every process) and 1 (init) are not tried for real: they reach no kernel call.
    for pid in (-1, 1):
        processes.signal_session(pid, 9)
    assert signals_sent == []
