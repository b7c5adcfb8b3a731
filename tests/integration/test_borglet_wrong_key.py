"""A borglet that comes back with a channel key that is not the cell's stops the old copies of its tasks.

Its process is killed (its tasks live on); the machine goes down and its tasks start elsewhere.
It comes back with another key (a stale copy of the cell bundle): it refuses every replica's
requests, so no master can tell it to kill the old copies, and before they ran beside the new
ones with no end. Now every replica's refusal (a second replica tried: the cell has three)
while the other machines answer makes the leader ask the borglet to stand down; it stops its
tasks `channel.STAND_DOWN_S` later. No task index runs twice (scanned in /proc) past BOUND_S
after the restart, nor in the OBSERVE_S after it; the machine stays down and says why.
"""

from __future__ import annotations

import signal
import time
from pathlib import Path

import pytest

from reference import channel
from tests.integration.cellkit import LocalCell, doubles, sleeper_job, wait_for

pytestmark = pytest.mark.integration

OBSERVE_S = 10.0
# Restart to the old copies killed: the borglet up (~2 s), refused by its owner and then by a
# second replica, asked (~2 polls), the borglet's wait (STAND_DOWN_S), its kill grace (1 s).
BOUND_S = channel.STAND_DOWN_S + 15.0


def test_a_borglet_with_another_key_stops_its_old_copies_within_the_bound(tmp_path: Path) -> None:
    with LocalCell(tmp_path, masters=3, borglets=3) as cell:
        cell.wait_leader()
        assert cell.submit(sleeper_job("steady", count=6)).status_code == 201
        tasks = wait_for(lambda: cell.running("bob", "steady", 6), 60, "6 tasks running")
        stale = next(b for b in cell.borglets if any(t["machine"] == b.name for t in tasks))

        stale.kill(signal.SIGKILL)  # its tasks live on

        def moved() -> list[dict] | None:
            running = cell.running("bob", "steady", 6)
            return running if running and all(t["machine"] != stale.name for t in running) else None

        wait_for(moved, 60, "the machine down and its tasks running elsewhere")
        assert doubles(cell.workdir), "the old copies should still run: the test sees nothing otherwise"

        other_key = channel.create_key_file(tmp_path / "stale.key")
        at = stale.argv.index("--channel-key-file")
        stale.argv[at + 1] = str(other_key)
        stale.start()
        restarted = time.monotonic()

        wait_for(lambda: not doubles(cell.workdir) or None, BOUND_S + 5, "the old copies stopped")
        took = time.monotonic() - restarted
        print(f"FIGURES wrong-key: old copies stopped {took:.1f} s after the restart (bound {BOUND_S:.0f} s)")
        assert took <= BOUND_S, f"old copies ran {took:.1f} s after the restart (bound {BOUND_S:.0f} s)"
        end = time.monotonic() + OBSERVE_S
        while time.monotonic() < end:
            assert not doubles(cell.workdir), doubles(cell.workdir)
            assert len(cell.running("bob", "steady", 6) or []) == 6
            time.sleep(0.5)
        machine = next(m for m in cell.get("/v1/machines")["machines"] if m["name"] == stale.name)
        assert machine["state"] == "down"
        assert "refuses this cell's requests" in machine.get("reason", ""), machine
        log = Path(stale.log).read_text(errors="replace")
        assert "asks this borglet to stand down" in log


def _placed(task: dict) -> tuple:
    return task["index"], task["incarnation"], task["machine"], task["started_at"]


def test_asking_a_borglet_its_masters_reach_to_stand_down_stops_nothing(tmp_path: Path) -> None:
    """The attack on the unsigned header: a process on the network without the key asks a
    borglet to stand down, five times a second for 2.5 times the wait, while the masters poll
    it. Every request is refused, and the masters' signed polls in between undo the asking:
    no task is stopped or moved, and the machine stays up."""
    import httpx

    with LocalCell(tmp_path, masters=1, borglets=3) as cell:
        cell.wait_leader()
        assert cell.submit(sleeper_job("steady", count=6)).status_code == 201
        before = {_placed(t) for t in wait_for(lambda: cell.running("bob", "steady", 6), 60, "6 tasks running")}
        target = cell.borglets[0]
        forged_key = bytes(range(channel.KEY_BYTES))
        answers: list[int] = []
        end = time.monotonic() + 2.5 * channel.STAND_DOWN_S
        with httpx.Client(timeout=2) as client:
            while time.monotonic() < end:
                headers = channel.sign(forged_key, "GET", b"/v1/state", b"", target.name, time.time())
                headers[channel.STAND_DOWN_HEADER] = "1"
                answers.append(client.get(f"{target.url}/v1/state", headers=headers).status_code)
                time.sleep(0.2)
        assert answers and set(answers) == {401}, answers
        time.sleep(2)  # a poll or two after the last forged request
        after = {_placed(t) for t in cell.running("bob", "steady", 6) or []}
        assert after == before, (before, after)
        assert not doubles(cell.workdir)
        assert cell.get("/v1/cell")["machines"] == {"up": 3, "down": 0}
        assert "stand down" not in Path(target.log).read_text(errors="replace")
