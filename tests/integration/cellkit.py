"""Fixtures of a live cell for the integration tests: the local cell kit and the jobs the scenarios run."""

from __future__ import annotations

import os
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest

from reference import procscan
from reference.borglet.taskusers import task_python
from reference.launcher import cpubudget
from reference.launcher.testcell import REPO, LocalCell, Proc, wait_for
from spec.taskid import parse_task_id

__all__ = [
    "NEEDS_CPU_GROUPS", "REPO", "TASK_PYTHON", "LocalCell", "Proc", "doubles", "hello_job", "sleeper_job", "wait_for",
]  # fmt: skip

# The Python tasks run: one their job users' uids may run (a root borglet runs tasks as those).
TASK_PYTHON = task_python()

# For tests of a cell whose processes the launcher puts in cgroups (`--replica-cpu`,
# `--machine-cpu-shares`): skipped where this host cannot make them.
NEEDS_CPU_GROUPS = pytest.mark.skipif(
    cpubudget.unusable() is not None, reason=f"no CPU groups here: {cpubudget.unusable()}"
)


def doubles(workdir: Path) -> dict[tuple[str, int], set[str]]:
    """Task indices with more than one live incarnation or placement among the processes of
    the cell in `workdir` (scanned in /proc): index -> "incarnation@placement" of each."""
    by_index: dict[tuple[str, int], set[str]] = defaultdict(set)
    for p in procscan.scan(workdir):
        if p.task_id:
            job, index, inc, placement = parse_task_id(p.task_id)
            by_index[(job, index)].add(f"{inc}@{placement}")
    return {k: v for k, v in by_index.items() if len(v) > 1}


def hello_job(name: str = "hello", user: str = "alice", count: int = 2, **extra: Any) -> dict[str, Any]:
    job: dict[str, Any] = {
        "name": name, "user": user, "priority": "production", "task_count": count,
        "request": {"cpu": "100m", "ram": "64MiB"},
        "command": [TASK_PYTHON, "-m", "examples.hello_world.server"],
        "cwd": str(REPO), "restart_policy": "always",
        "health_check": {"path": "/healthz", "interval_s": 0.5},
    }  # fmt: skip
    job.update(extra)
    return job


def sleeper_job(name: str, user: str = "bob", count: int = 1, **extra: Any) -> dict[str, Any]:
    job: dict[str, Any] = {
        "name": name, "user": user, "priority": 100, "task_count": count,
        "request": {"cpu": "10m", "ram": "16MiB"},
        "command": [TASK_PYTHON, "-c", "import time; time.sleep(3600)"],
        "restart_policy": "on_failure",
    }  # fmt: skip
    job.update(extra)
    return job


def docker_engine(needed_for: str) -> Any:
    """The Docker SDK's client of a reachable engine. Without one: a skip, but a failure in CI
    (`.ci/run` installs and starts one with `sh images/engine.sh`)."""
    try:
        import docker

        client = docker.from_env(timeout=30)
        client.ping()
        return client
    except Exception as err:
        if os.environ.get("CI"):
            pytest.fail(f"CI needs a Docker engine for {needed_for}: {err}")
        pytest.skip(f"no Docker engine (run `sh images/engine.sh`): {err}")
