"""Brings up the chaos cell (3 masters, 3 etcd, 4 borglets, Toxiproxy) with hello_world running, and down again."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from chaos import probes
from reference import launcher

REPLICAS, ETCD, MACHINES = 3, 3, 4
HELLO = "examples/hello_world.yaml"


def runtime() -> str:
    """The borglets' runtime: `MINBORG_CHAOS_RUNTIME` (process, the default, or docker: then
    hello_world runs as containers of its image, `minborg image build`)."""
    return os.environ.get("MINBORG_CHAOS_RUNTIME", "process")


def up(label: str) -> str:
    """Start a fresh cell in a temporary state dir; returns the state dir."""
    state_dir = tempfile.mkdtemp(prefix=f"minborg-chaos-{label}-")
    # Its Locust clients are all the admin: the rate limit is set, off, as every campaign sets it.
    launcher.up(
        state_dir, replicas=REPLICAS, machines=MACHINES, etcd_members=ETCD, toxiproxy=True,
        master_args=("--rate-limit", "0"), runtime=runtime(),
    )  # fmt: skip
    project = Path(__file__).resolve().parent.parent
    subprocess.run(
        [sys.executable, "-m", "reference.cli", "job", "submit", HELLO, "--state-dir", state_dir],
        cwd=project, check=True, capture_output=True, timeout=60,
    )  # fmt: skip
    if not probes.hello_world_answers(state_dir, within_s=60):
        raise RuntimeError(f"hello_world does not answer in the new cell {state_dir}")
    if runtime() == "docker" and containers_of(state_dir) < 3:
        raise RuntimeError(f"hello_world does not run as containers in the docker-runtime cell {state_dir}")
    time.sleep(1.0)
    return state_dir


def containers_of(state_dir: str) -> int:
    """How many running containers the borglets of the cell in `state_dir` started (by their labels)."""
    out = subprocess.run(
        ["docker", "ps", "--filter", "label=minborg.job", "--format", '{{.Label "minborg.borglet"}}'],
        check=True, capture_output=True, text=True, timeout=30,
    ).stdout  # fmt: skip
    return sum(1 for line in out.splitlines() if line.startswith(state_dir))


def down(state_dir: str) -> None:
    try:
        launcher.down(state_dir)
    except launcher.LauncherError as err:
        print(f"cell down: {err}", file=sys.stderr)


def keep_logs(state_dir: str, into: Path, lines: int = 400) -> None:
    """Copy the end of each process log next to the report (Toxiproxy logs every connection)."""
    for log in Path(state_dir, "logs").glob("*.log"):
        tail = log.read_text(errors="replace").splitlines()[-lines:]
        (into / f"cell-{log.name}").write_text("\n".join(tail) + "\n")
