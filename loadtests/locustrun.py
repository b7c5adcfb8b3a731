"""Run one Locust ladder headless in a subprocess, with the step shape's options and a hard time bound."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path

import psutil

REPO = Path(__file__).resolve().parent.parent
# Locust startup, worker hand-shake and shutdown on top of the ladder itself.
OVERHEAD_S = 45.0


class Target(StrEnum):
    CONTROL = "control-plane"
    READS = "reads"
    SUBMIT = "submit"
    SERVICE = "service"


LOCUSTFILES = {
    Target.CONTROL: "loadtests/locust_control.py",
    Target.READS: "loadtests/locust_reads.py",
    Target.SUBMIT: "loadtests/locust_submit.py",
    Target.SERVICE: "loadtests/locust_service.py",
}


@dataclass(frozen=True)
class Ladder:
    """Users start, start+step, ... max_users, each step `step_seconds` long."""

    start: int
    step: int
    max_users: int
    step_seconds: float
    slo_p95_ms: float
    max_error_rate: float = 0.01

    @property
    def steps(self) -> int:
        return len(range(self.start, self.max_users + 1, self.step)) + (
            0 if (self.max_users - self.start) % self.step == 0 else 1
        )

    @property
    def bound_s(self) -> float:
        return self.steps * self.step_seconds + OVERHEAD_S


@dataclass(frozen=True)
class LocustRun:
    prefix: Path  # Locust's --csv prefix: <prefix>_stats.csv, _stats_history.csv, _failures.csv
    shape: Path
    log: Path
    returncode: int
    seconds: float

    def csv(self, suffix: str) -> Path:
        return self.prefix.with_name(f"{self.prefix.name}_{suffix}.csv")


def command(target: Target, ladder: Ladder, prefix: Path, shape: Path, processes: int) -> list[str]:
    cmd = [
        sys.executable, "-m", "locust", "-f", LOCUSTFILES[target], "--headless",
        "--csv", str(prefix), "--only-summary", "--loglevel", "WARNING",
        "--step-start", str(ladder.start), "--step-users", str(ladder.step),
        "--max-users", str(ladder.max_users), "--step-seconds", f"{ladder.step_seconds:g}",
        "--slo-p95-ms", f"{ladder.slo_p95_ms:g}", "--max-error-rate", f"{ladder.max_error_rate:g}",
        "--shape-out", str(shape),
    ]  # fmt: skip
    if processes > 1:
        cmd += ["--processes", str(processes)]
    return cmd


def start(
    target: Target, ladder: Ladder, prefix: Path, env: dict[str, str], processes: int
) -> tuple[subprocess.Popen[bytes], Path, Path]:
    prefix.parent.mkdir(parents=True, exist_ok=True)
    shape = prefix.with_name(f"{prefix.name}_shape.json")
    log = prefix.with_name(f"{prefix.name}_locust.log")
    full_env = {**os.environ, **env}
    full_env["PYTHONPATH"] = os.pathsep.join(
        [str(REPO), *filter(None, full_env.get("PYTHONPATH", "").split(os.pathsep))]
    )
    with log.open("wb") as out:
        proc = subprocess.Popen(
            command(target, ladder, prefix, shape, processes), cwd=REPO, env=full_env,
            stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
        )  # fmt: skip
    return proc, shape, log


def wait(proc: subprocess.Popen[bytes], bound_s: float) -> int:
    """Wait for Locust to finish; past `bound_s` stop it and its workers (it is ours)."""
    try:
        return proc.wait(bound_s)
    except subprocess.TimeoutExpired:
        pass
    return stop(proc)


def stop(proc: subprocess.Popen[bytes]) -> int:
    """Terminate Locust and its worker processes (started by us), then kill what is left."""
    try:
        children = psutil.Process(proc.pid).children(recursive=True)
    except psutil.NoSuchProcess:
        children = []
    for child in children:
        try:
            child.terminate()
        except psutil.NoSuchProcess:
            pass
    proc.terminate()
    try:
        return proc.wait(10)
    except subprocess.TimeoutExpired:
        proc.kill()
        return proc.wait(5)


def run(
    target: Target, ladder: Ladder, prefix: Path, env: dict[str, str], processes: int
) -> LocustRun:
    started = time.monotonic()
    proc, shape, log = start(target, ladder, prefix, env, processes)
    rc = wait(proc, ladder.bound_s)
    return LocustRun(prefix, shape, log, rc, time.monotonic() - started)
