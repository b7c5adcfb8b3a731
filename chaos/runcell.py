"""Brings up the chaos cell (3 masters, 3 etcd, 4 borglets, Toxiproxy) with hello_world running, and down again."""

from __future__ import annotations

import subprocess
import sys
import tempfile
import time
from pathlib import Path

from chaos import probes
from reference import launcher

REPLICAS, ETCD, MACHINES = 3, 3, 4
HELLO = "examples/hello_world.yaml"


def up(label: str) -> str:
    """Start a fresh cell in a temporary state dir; returns the state dir."""
    state_dir = tempfile.mkdtemp(prefix=f"minborg-chaos-{label}-")
    # Its Locust clients are all the admin: the rate limit is set, off, as every campaign sets it.
    launcher.up(
        state_dir, replicas=REPLICAS, machines=MACHINES, etcd_members=ETCD, toxiproxy=True,
        master_args=("--rate-limit", "0"),
    )  # fmt: skip
    project = Path(__file__).resolve().parent.parent
    subprocess.run(
        [sys.executable, "-m", "reference.cli", "job", "submit", HELLO, "--state-dir", state_dir],
        cwd=project, check=True, capture_output=True, timeout=60,
    )  # fmt: skip
    if not probes.hello_world_answers(state_dir, within_s=60):
        raise RuntimeError(f"hello_world does not answer in the new cell {state_dir}")
    time.sleep(1.0)
    return state_dir


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
