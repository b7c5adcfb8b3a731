"""A borglet whose clock is 60 s ahead (Debian's faketime) keeps obeying its masters.

Its process is killed (the machine goes down, as any dead borglet's, and its tasks are started
elsewhere while their old processes live on) and comes back with its clock 60 s ahead. Before,
it refused every signed request forever and the old copies ran beside the new ones with no
end. Now its channel measures the window on the masters' clock too (channel.skew_floor): the
machine comes back up, shows the skew as its reason (API and `machine list`), and the old
copies are killed: no task index runs twice (scanned in /proc) past BOUND_S after the restart.
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest

from reference.cli.views import machine_rows
from tests.integration.cellkit import LocalCell, doubles, sleeper_job, wait_for

pytestmark = pytest.mark.integration

LIBFAKETIME = "/usr/lib/x86_64-linux-gnu/faketime/libfaketimeMT.so.1"
OBSERVE_S = 10.0
BOUND_S = 15.0  # restart to the old copies killed: the borglet heard again, then its kill grace



@pytest.mark.skipif(not os.path.exists(LIBFAKETIME), reason="no libfaketime: apt-get install -y faketime")
def test_a_borglet_60_s_ahead_comes_back_says_why_and_nothing_runs_twice_past_the_bound(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with LocalCell(tmp_path, masters=1, borglets=2) as cell:
        cell.wait_leader()
        assert cell.submit(sleeper_job("steady", count=4)).status_code == 201
        tasks = wait_for(lambda: cell.running("bob", "steady", 4), 60, "4 tasks running")
        skewed = next(b for b in cell.borglets if any(t["machine"] == b.name for t in tasks))

        # The borglet dies (its tasks live on) and comes back with its clock 60 s ahead.
        skewed.kill(signal.SIGKILL)
        monkeypatch.setenv("LD_PRELOAD", LIBFAKETIME)
        monkeypatch.setenv("FAKETIME", "+60s")
        monkeypatch.setenv("FAKETIME_DONT_FAKE_MONOTONIC", "1")
        skewed.start()
        monkeypatch.delenv("LD_PRELOAD")
        monkeypatch.delenv("FAKETIME")

        restarted = time.monotonic()

        def reason() -> str | None:
            m = next(m for m in cell.get("/v1/machines")["machines"] if m["name"] == skewed.name)
            return m.get("reason") if m["state"] == "up" and "clock skew" in m.get("reason", "") else None

        text = wait_for(reason, 20, "the machine up again, its reason the skew")
        assert "60 s ahead of the master's" in text
        # The old copies are gone within the bound, and nothing runs twice after it.
        wait_for(lambda: not doubles(cell.workdir) or None, BOUND_S, "the old copies killed")
        assert time.monotonic() - restarted <= BOUND_S
        end = time.monotonic() + OBSERVE_S
        while time.monotonic() < end:
            assert cell.get("/v1/cell")["machines"] == {"up": 2, "down": 0}
            assert not doubles(cell.workdir), doubles(cell.workdir)
            time.sleep(0.5)
        wait_for(lambda: cell.running("bob", "steady", 4), 30, "4 tasks running")
        columns, rows = machine_rows(cell.get("/v1/machines")["machines"])
        row = next(r for r in rows if r[0] == skewed.name)
        assert columns[-1] == "reason" and "clock skew" in row[-1]
