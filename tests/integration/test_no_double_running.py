"""A live cell never runs two processes of one task index at once on up machines.

A job whose tasks keep running ~2 s after SIGTERM (examples.slowstop) is rolled (its request
changes) and shrunk then grown again, while every borglet's /v1/state is sampled every 0.1 s.
A new incarnation must start only once the old one is gone; the hold shows on the task view
and in the master's /metrics.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from harness.history import double_running
from loadtests.periodic import Periodic
from reference import channel
from reference.borglet.taskusers import task_python
from spec.taskid import parse_task_id
from tests.integration.cellkit import REPO, LocalCell, Proc, wait_for

pytestmark = pytest.mark.integration

JOB = ("bob", "slow")
LIVE = ("STARTING", "RUNNING")
KILL_GRACE_S = 3.0  # the borglet's default
STOP_S = 2.0  # how long a task keeps running after SIGTERM


def slow_job(count: int) -> dict[str, Any]:
    return {
        "name": JOB[1], "user": JOB[0], "priority": 100, "task_count": count,
        "request": {"cpu": "10m", "ram": "32MiB"},
        "command": [task_python(), "-m", "examples.slowstop"], "cwd": str(REPO),
        "env": {"SLOWSTOP_S": str(STOP_S)}, "restart_policy": "on_failure",
    }  # fmt: skip


class Sampler(Periodic):
    """Polls every borglet's state in one thread, in turn: a sample holds when its request was
    sent and when the answer arrived (the state it shows held at some moment in between)."""

    def __init__(self, borglets: list[Proc], key: bytes, every: float = 0.1) -> None:
        super().__init__(every, "sampler")
        self.borglets = borglets
        self.samples: list[dict[str, Any]] = []
        self._http = httpx.Client(timeout=2.0, auth=channel.ClientAuth(key))  # signed as a master's

    def tick(self) -> None:
        for b in self.borglets:
            sent = time.monotonic()
            try:
                tasks = self._http.get(f"{b.url}/v1/state", headers=channel.to_machine(b.name)).json()["tasks"]
            except (httpx.HTTPError, ValueError, KeyError):
                continue
            t = time.monotonic()
            self.samples += [
                {"t": t, "t0": sent, "t1": t, "machine": b.name, "task_id": x["task_id"], "state": x["state"]}
                for x in tasks
            ]

    def close(self) -> None:
        self._http.close()

    def seen_live(self, incarnations: dict[int, int]) -> bool:
        """Whether every index -> incarnation given was seen live in some sample."""
        live = {parse_task_id(k)[1:3] for k in self.spans()}
        return all((index, inc) in live for index, inc in incarnations.items())

    def spans(self) -> dict[str, tuple[float, float]]:
        """task id -> (first, last) time it was seen live."""
        out: dict[str, tuple[float, float]] = {}
        for s in self.samples:
            if s["state"] in LIVE:
                a, b = out.get(s["task_id"], (s["t"], s["t"]))
                out[s["task_id"]] = (min(a, s["t"]), max(b, s["t"]))
        return out


class SlowKillCell(LocalCell):
    """A local cell whose borglets wait the default 3 s kill grace before SIGKILL, so an old
    incarnation that ignores SIGTERM is still running when its successor is placed."""

    def add_borglet(self, name: str, register: bool = True) -> Proc:
        proc = super().add_borglet(name, register=False)
        proc.stop()
        proc.argv[proc.argv.index("--kill-grace") + 1] = str(KILL_GRACE_S)
        self.restart(proc)
        if register:
            self.register(proc)
        return proc


@pytest.fixture(scope="module")
def cell(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCell]:
    c = SlowKillCell(tmp_path_factory.mktemp("cell"), masters=1, borglets=2, poll_interval=0.5)
    with c:
        yield c
    assert c.leftovers() == [], "processes of the cell are still running"


def newest_running(cell: LocalCell, count: int, newer_than: dict[int, int]) -> dict[int, int] | None:
    """index -> incarnation once `count` indices run an incarnation newer than `newer_than`."""
    tasks = [t for t in cell.tasks(*JOB) if t["state"] == "RUNNING"]
    ready = {
        t["index"]: t["incarnation"]
        for t in tasks
        if t["borglet_state"] == "RUNNING" and t["incarnation"] > newer_than.get(t["index"], -1)
    }
    return ready if len(ready) == count else None


def watch_task_states(cell: LocalCell, until: float) -> set[str]:
    """Every borglet_state the task view shows until `until`."""
    seen: set[str] = set()
    while time.monotonic() < until:
        seen |= {str(t["borglet_state"]) for t in cell.tasks(*JOB)}
        time.sleep(0.1)
    return seen


def holds_counted(cell: LocalCell) -> float:
    text = cell.http.get(f"{cell.masters[0].url}/metrics").text
    line = next(x for x in text.splitlines() if x.startswith("minborg_incarnation_holds_total"))
    return float(line.split()[-1])


def test_roll_and_resize_never_run_two_incarnations_at_once(cell: LocalCell, tmp_path: Path) -> None:
    assert cell.submit(slow_job(3)).status_code == 201
    first = wait_for(lambda: newest_running(cell, 3, {}), 30, "3 tasks running")
    with Sampler(cell.borglets, cell.channel_key) as sampler:
        time.sleep(0.5)
        rolled_at = time.monotonic()
        r = cell.request("PATCH", "/v1/jobs/bob/slow", json={"request": {"ram": "40MiB"}})
        assert r.status_code == 200, r.text
        shown = watch_task_states(cell, time.monotonic() + 1.5)
        rolled = wait_for(lambda: newest_running(cell, 3, first), 30, "the roll")
        rolled_done = time.monotonic()
        # The shrink stops indices 1 and 2 at once: make sure the sampler saw them run first.
        wait_for(lambda: sampler.seen_live(rolled), 10, "the sampler to see the rolled processes")
        assert cell.request("PATCH", "/v1/jobs/bob/slow", json={"task_count": 1}).status_code == 200
        time.sleep(0.3)
        assert cell.request("PATCH", "/v1/jobs/bob/slow", json={"task_count": 3}).status_code == 200
        grown = wait_for(lambda: newest_running(cell, 3, {i: n for i, n in rolled.items() if i}), 30, "the grow")
        wait_for(lambda: sampler.seen_live(grown), 10, "the sampler to see the grown processes")
        time.sleep(0.5)
    found, checked = double_running(sampler.samples)
    assert checked >= 8, "too few processes sampled"  # 3 first, 3 rolled, 2 grown
    assert found == [], f"two incarnations of one index ran at once: {found}"
    assert any(s.startswith("waiting for incarnation") for s in shown), shown
    assert holds_counted(cell) >= 3

    # How long each new incarnation waited after its old one was last seen live.
    spans = sampler.spans()
    gaps, starts = [], []
    for index, inc in sorted(rolled.items()):
        old = next(v for k, v in spans.items() if parse_task_id(k)[1:3] == (index, first[index]))
        new = next(v for k, v in spans.items() if parse_task_id(k)[1:3] == (index, inc))
        gaps.append(new[0] - old[1])
        starts.append(new[0] - rolled_at)
    report = (
        f"roll: new incarnation first seen live {min(starts):.2f}-{max(starts):.2f} s after the PATCH, "
        f"{min(gaps):.2f}-{max(gaps):.2f} s after its old one was last seen live; "
        f"whole roll {rolled_done - rolled_at:.2f} s"
    )
    print(report)
    (tmp_path / "delays.txt").write_text(report + "\n")
