"""The sampler on dummy processes: a busy one shows CPU, every one shows RSS; samples survive a CSV round trip."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

from loadtests.analysis import saturation
from loadtests.sampler import Sampler, Target, read_csv, write_csv

BUSY = "import time\nend = time.time() + 30\nwhile time.time() < end: pass\n"
IDLE = "import time\ntime.sleep(30)\n"


def test_sampler_follows_a_busy_and_an_idle_process(tmp_path: Path) -> None:
    busy = subprocess.Popen([sys.executable, "-c", BUSY])
    idle = subprocess.Popen([sys.executable, "-c", IDLE])
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    time.sleep(1.0)  # past the interpreters' start-up, which is not idle
    try:
        targets = [Target("task", "busy", busy.pid), Target("task", "idle", idle.pid),
                   Target("task", "gone", gone.pid)]  # fmt: skip
        with Sampler(lambda: targets, interval_s=0.2) as sampler:
            time.sleep(1.5)
        samples = sampler.samples
    finally:
        for proc in (busy, idle):
            proc.kill()
            proc.wait()
    by_name = {name: [s for s in samples if s.name == name] for name in ("busy", "idle", "gone")}
    assert len(by_name["busy"]) >= 3 and len(by_name["idle"]) >= 3
    assert not by_name["gone"]  # a process that exited is skipped, not an error
    # A busy loop gets a good share of a core even on a machine loaded by other work (tests
    # run beside other jobs); an idle sleeper gets none.
    assert max(s.cpu_percent for s in by_name["busy"]) > 10
    assert max(s.cpu_percent for s in by_name["idle"]) < 5
    assert sum(s.cpu_percent for s in by_name["busy"]) > 5 * sum(s.cpu_percent for s in by_name["idle"])
    assert all(s.rss_bytes > 1_000_000 for s in samples)
    assert all(0 <= s.machine_cpu <= 100 for s in samples)

    path = tmp_path / "samples.csv"
    write_csv(samples, path)
    assert read_csv(path) == samples

    sat = saturation(samples, cores=2)
    assert sat.processes[0].name == "busy"
    assert "busy" in sat.verdict


def test_sampler_picks_up_targets_that_appear_later() -> None:
    targets: list[Target] = []
    proc = subprocess.Popen([sys.executable, "-c", IDLE])
    try:
        with Sampler(lambda: list(targets), interval_s=0.2) as sampler:
            time.sleep(0.5)
            assert not sampler.samples
            targets.append(Target("locust", "late", proc.pid))
            time.sleep(1.0)
    finally:
        proc.kill()
        proc.wait()
    assert any(s.name == "late" for s in sampler.samples)
