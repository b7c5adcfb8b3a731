"""Starts and stops the bounded Locust load of a chaos run (headless, its run time capped)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil

from chaos.events import run_dir
from reference import proctime

LOAD_FILE = "load.json"
USERS = 5  # 3 register clients, 1 hello_world caller, 1 watcher
MAX_RUN_S = 900  # no load outlives this, whatever a caller asks


def start(state_dir: str, run: str | None = None, duration_s: float = 120.0) -> dict[str, object]:
    """Start Locust in the background for at most `duration_s` seconds."""
    root = run_dir(run)
    seconds = int(min(max(duration_s, 5), MAX_RUN_S))
    locustfile = Path(__file__).with_name("locustfile.py")
    env = dict(os.environ)
    project = str(Path(__file__).resolve().parent.parent)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [project, env.get("PYTHONPATH", "")]))
    env.update(
        CHAOS_STATE_DIR=str(Path(state_dir).resolve()), CHAOS_RUN_DIR=str(root.resolve()),
        CHAOS_RUN_ID=str(int(time.time() * 1000) % 10**9),
    )  # fmt: skip
    command = [
        sys.executable, "-m", "locust", "-f", str(locustfile), "--headless",
        "-u", str(USERS), "-r", str(USERS), "-t", f"{seconds}s", "--stop-timeout", "5",
        "--only-summary", "--csv", str(root / "locust"), "--loglevel", "WARNING",
    ]  # fmt: skip
    with open(root / "locust.log", "ab") as out:
        popen = subprocess.Popen(
            command, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
            env=env, cwd=project, start_new_session=True,
        )  # fmt: skip
    doc = {"pid": popen.pid, "start_ticks": proctime.start_ticks(popen.pid),
           "started": time.time(), "duration_s": seconds}  # fmt: skip
    (root / LOAD_FILE).write_text(json.dumps(doc))
    return doc


def _process(root: Path) -> psutil.Process | None:
    try:
        doc = json.loads((root / LOAD_FILE).read_text())
        if not proctime.is_started_at(doc["pid"], doc["start_ticks"]):
            return None
        return psutil.Process(doc["pid"])
    except (FileNotFoundError, ValueError, KeyError, TypeError, psutil.NoSuchProcess):
        return None


def running(run: str | None = None) -> bool:
    return _process(run_dir(run)) is not None


def stop(run: str | None = None, timeout: float = 20.0) -> bool:
    """Stop the load (SIGTERM lets Locust write its summary); True when it is gone."""
    proc = _process(run_dir(run))
    if proc is None:
        return True
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout)
    except psutil.TimeoutExpired:
        proc.kill()
        proc.wait(5)
    return True
