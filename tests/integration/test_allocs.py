"""Alloc sets on a real cell: reserved on distinct machines and held while empty, two jobs sharing them (task i in alloc i, its cgroup beneath the alloc's), and deleting the set kills both jobs and leaves nothing."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from reference.borglet import cgroups
from tests.integration.cellkit import LocalCell, sleeper_job, wait_for

pytestmark = pytest.mark.integration

#: cgroup v1 writable (as root here): the borglets isolate with cgroups and the nesting is checked.
CGROUPS = cgroups.CgroupTree("probe-allocs").usable() is None
ALLOC = {"name": "logs", "user": "alice", "priority": 200, "count": 2, "resources": {"cpu": "1000m", "ram": "256MiB"}}


def alloc_groups(pid: int) -> set[str]:
    """The alloc groups (directory names) a process's cgroups are in."""
    text = Path(f"/proc/{pid}/cgroup").read_text()
    return {part for line in text.splitlines() for part in line.split(":", 2)[-1].split("/") if part.startswith("alloc-")}


def test_an_alloc_set_is_reserved_shared_by_two_jobs_and_deleted_with_them(tmp_path: Path) -> None:
    with LocalCell(tmp_path, masters=1, borglets=2, isolation="cgroup" if CGROUPS else "rlimit") as cell:
        r = wait_for(lambda: (x := cell.request("POST", "/v1/allocs", json=ALLOC)).status_code != 503 and x, 20, "alloc set")
        assert r.status_code == 201, r.text
        view = r.json()["alloc_set"]
        machines = [a["machine"] for a in view["allocs"]]
        assert len(set(machines)) == 2
        assert cell.request("POST", "/v1/allocs", json=ALLOC).status_code == 409  # the name is taken

        # Empty, the allocs still hold their room: 3500m beside a 1000m alloc exceeds 4000m.
        assert cell.submit(sleeper_job("big", user="bob", count=1, request={"cpu": "3500m", "ram": "16MiB"})).status_code == 201
        time.sleep(3)
        assert [t["state"] for t in cell.tasks("bob", "big")] == ["PENDING"]
        cell.request("DELETE", "/v1/jobs/bob/big")

        # A job naming the set may not have more tasks than it has allocs.
        r = cell.submit(sleeper_job("wide", user="alice", count=3, alloc="logs"))
        assert r.status_code == 422 and r.json()["detail"][0]["field"] == "alloc"
        for name in ("web", "saver"):
            assert cell.submit(sleeper_job(name, user="alice", count=2, alloc="logs")).status_code == 201
        for name in ("web", "saver"):
            tasks = wait_for(lambda n=name: cell.running("alice", n, 2), 30, f"alice/{name} running")
            for t in tasks:
                assert t["machine"] == machines[t["index"]], t  # task i runs in alloc i
                if CGROUPS:
                    pid = wait_for(lambda n=name, i=t["index"]: next((x.get("pid") for x in cell.live_tasks("alice", n)
                                                                      if x["index"] == i), None), 10, "pid")  # fmt: skip
                    assert alloc_groups(pid) == {f"alloc-alice.logs.{t['index']}"}
        shown = cell.get("/v1/allocs/alice/logs")["alloc_set"]
        assert shown["jobs"] == ["alice/saver", "alice/web"]
        assert shown["allocs"][0]["used"]["cpu"] == 20  # two 10m tasks share alloc 0

        r = cell.request("DELETE", "/v1/allocs/alice/logs")
        assert r.status_code == 200, r.text
        assert r.json()["killed_jobs"] == ["alice/saver", "alice/web"]
        assert cell.get("/v1/allocs")["alloc_sets"] == []
        for name in ("web", "saver"):
            wait_for(lambda n=name: not cell.live_tasks("alice", n), 20, f"alice/{name} dead")
        if CGROUPS:
            def gone() -> bool:
                left = [p for h in Path("/sys/fs/cgroup").iterdir() for p in h.rglob("alloc-alice.logs.*")]
                return not left
            wait_for(gone, 20, "the alloc groups removed")
        assert cell.request("GET", "/v1/allocs/alice/logs").status_code == 404
