"""Sample CPU and RSS of a set of processes (and the whole machine) about once a second, in a thread.

CPU is psutil's per-process percentage of one core over the interval, so a single-threaded
Python process (one GIL) saturates at about 100 whatever the core count; `machine_cpu` is the
whole machine's busy percentage, all cores together.
"""

from __future__ import annotations

import csv
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, fields
from pathlib import Path

import psutil


@dataclass(frozen=True)
class Target:
    """A process to follow: its role (etcd, master, borglet, task, locust), name and pid."""

    role: str
    name: str
    pid: int


@dataclass(frozen=True)
class Sample:
    t: float  # wall clock (epoch seconds), to line samples up with the steps
    role: str
    name: str
    pid: int
    cpu_percent: float
    rss_bytes: int
    machine_cpu: float  # whole machine, percent of all cores
    load1: float


Targets = Callable[[], Iterable[Target]]


class Sampler:
    """Samples `targets()` every `interval_s` until stopped; the target list is re-read each
    time, so processes started later (tasks, Locust workers) are followed from then on."""

    def __init__(self, targets: Targets, interval_s: float = 1.0) -> None:
        self._targets = targets
        self.interval_s = interval_s
        self.samples: list[Sample] = []
        self._procs: dict[int, psutil.Process] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="sampler", daemon=True)

    def start(self) -> Sampler:
        psutil.cpu_percent(None)  # primes the machine-wide counter
        self._thread.start()
        return self

    def stop(self) -> list[Sample]:
        self._stop.set()
        self._thread.join(5 * self.interval_s + 5)
        return self.samples

    def __enter__(self) -> Sampler:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _run(self) -> None:
        self.sample_once(prime_only=True)
        while not self._stop.wait(self.interval_s):
            self.sample_once()

    def sample_once(self, prime_only: bool = False) -> None:
        """One round: psutil's cpu_percent counts from the previous call on the same Process
        object, so objects are kept between rounds and a new one's first reading is dropped."""
        now = time.time()
        machine = psutil.cpu_percent(None)
        load1 = psutil.getloadavg()[0]
        try:
            targets = list(self._targets())
        except Exception:  # noqa: BLE001 - a listing failure must not end the sampling
            targets = []
        for target in targets:
            proc = self._procs.get(target.pid)
            try:
                if proc is None:
                    proc = self._procs[target.pid] = psutil.Process(target.pid)
                    proc.cpu_percent(None)
                    continue
                cpu = proc.cpu_percent(None)
                rss = proc.memory_info().rss
            except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
                self._procs.pop(target.pid, None)
                continue
            if not prime_only:
                self.samples.append(
                    Sample(now, target.role, target.name, target.pid, cpu, rss, machine, load1)
                )


def write_csv(samples: Iterable[Sample], path: Path) -> None:
    names = [f.name for f in fields(Sample)]
    with path.open("w", newline="") as out:
        writer = csv.DictWriter(out, fieldnames=names)
        writer.writeheader()
        for s in samples:
            writer.writerow(asdict(s))


def read_csv(path: Path) -> list[Sample]:
    with path.open(newline="") as src:
        return [
            Sample(
                float(r["t"]), r["role"], r["name"], int(r["pid"]), float(r["cpu_percent"]),
                int(r["rss_bytes"]), float(r["machine_cpu"]), float(r["load1"]),
            )  # fmt: skip
            for r in csv.DictReader(src)
        ]
