"""An alloc's cgroup: a task of a job in an alloc gets its group beneath the alloc's, which holds the alloc's limits and goes with its last task (on a directory tree standing in for /sys/fs/cgroup)."""

from __future__ import annotations

from pathlib import Path

from reference.borglet import cgroups
from reference.borglet.cgroups import AllocGroup, CgroupTree
from reference.borglet.isolation import CgroupIsolation
from reference.borglet.protocol import TaskSpec

SELF = "4:memory:/\n3:cpu,cpuacct:/\n2:pids:/\n"


def tree(root: Path) -> CgroupTree:
    for controller in ("memory", "cpu", "cpuacct", "pids"):
        (root / controller).mkdir(parents=True)
    return CgroupTree("m0", root=str(root), self_cgroup=SELF)


def test_a_task_in_an_alloc_nests_beneath_the_allocs_group_with_its_limits(tmp_path: Path) -> None:
    t = tree(tmp_path)
    alloc = AllocGroup("alice/logs/0", cpu_milli=1000, ram_bytes=256 << 20)
    group = t.create("alice.web.0.0", 250, 64 << 20, alloc)
    memory = Path(group["memory"])
    assert memory.parent.name == "alloc-alice.logs.0" and memory.parent.parent.name == "minborg-m0"
    assert (memory.parent / "memory.limit_in_bytes").read_text() == str(256 << 20)
    assert (memory / "memory.limit_in_bytes").read_text() == str(64 << 20)
    cpu = Path(group["cpu"]).parent
    assert (cpu / "cpu.cfs_quota_us").read_text() == "100000"  # 1000m over a 100 ms period
    # A second task of another job shares the alloc's group.
    other = t.create("alice.saver.0.0", 100, 0, alloc)
    assert Path(other["memory"]).parent == memory.parent


def test_the_allocs_group_goes_with_its_last_task(tmp_path: Path) -> None:
    t = tree(tmp_path)
    iso = CgroupIsolation(t)
    alloc = AllocGroup("alice/logs/0", 1000, 0)
    a, b = iso.prepare("a", 100, 0, alloc), iso.prepare("b", 100, 0, alloc)
    parent = Path(a["memory"]).parent
    # The stand-in tree holds the limit files a kernel would not: clear them as rmdir would.
    for group in (a, b):
        for path in dict.fromkeys(group.values()):
            for f in Path(path).iterdir():
                f.unlink()
    assert iso.release(a) and parent.is_dir()  # b is still there
    for f in parent.iterdir():
        if f.is_file():
            f.unlink()
    assert iso.release(b) and not parent.exists()


def test_a_task_outside_allocs_is_where_it_was(tmp_path: Path) -> None:
    group = tree(tmp_path).create("t", 100, 0)
    assert Path(group["memory"]).parent.name == "minborg-m0"


def test_the_sync_names_a_tasks_alloc_additively() -> None:
    spec = TaskSpec.model_validate({"task_id": "t", "command": ["true"],
                                    "alloc": {"name": "alice/logs/0", "cpu": 1000, "ram": 0}})  # fmt: skip
    assert spec.alloc is not None and spec.alloc.name == "alice/logs/0"
    assert TaskSpec.model_validate({"task_id": "t", "command": ["true"]}).alloc is None
    assert cgroups.AllocGroup(spec.alloc.name, 1, 0).directory == "alloc-alice.logs.0"
