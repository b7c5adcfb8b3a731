"""Link shards in a live 3-replica cell: every machine polled by exactly one replica, and a
replica that dies hands its machines over without any machine going down."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from tests.integration.cellkit import LocalCell, sleeper_job, wait_for

pytestmark = pytest.mark.integration


def _shares(cell: LocalCell) -> dict[str, dict[str, Any]]:
    out = {}
    for m in cell.live_masters():
        body = cell.request("GET", "/v1/shard", master=m).json()
        out[body["replica"]] = body
    return out


def _covered(cell: LocalCell, n: int, replicas: int) -> dict[str, dict[str, Any]] | None:
    """The shares when `replicas` replicas poll `n` machines between them, else None."""
    s = _shares(cell)
    return s if len(s) == replicas and sum(b["machines"] for b in s.values()) == n else None


def _running_ids(cell: LocalCell, user: str, job: str) -> list[str]:
    return sorted(f"{t['index']}#{t['incarnation']}" for t in cell.tasks(user, job) if t["state"] == "RUNNING")


def test_a_dead_replicas_machines_move_without_going_down(tmp_path: Path) -> None:
    with LocalCell(tmp_path, masters=3, borglets=6) as cell:
        leader = cell.wait_leader()
        # Every replica polls: together they cover each machine exactly once.
        shares = wait_for(lambda: _covered(cell, 6, 3), 20, "three shares covering six machines")
        assert all(b["link_shards"] for b in shares.values())
        assert cell.submit(sleeper_job("before", count=12)).status_code == 201
        wait_for(lambda: cell.running("bob", "before", 12), 60, "12 tasks running")
        ids = _running_ids(cell, "bob", "before")
        # The leader's syncs to the followers' machines went through their shards, signed for
        # them: none had to fall back to the leader's own shard (a refused signature would).
        relayed = cell.request("GET", "/v1/shard", master=leader).json()["relayed"]
        if any(b["machines"] for name, b in shares.items() if name != leader.name):
            assert relayed["through_owners"] >= 1, relayed
        assert relayed["fallbacks"] == 0, relayed

        # Kill a follower that polls at least one machine.
        followers = [m for m in cell.masters if m is not leader and shares[m.name]["machines"] > 0]
        if not followers:  # rendezvous gave the followers nothing: kill the leader instead
            followers = [leader]
        victim = followers[0]
        moved = shares[victim.name]["machines"]
        victim.kill()
        killed_at = time.monotonic()

        # Within about one registration lease the survivors take its machines over ...
        wait_for(lambda: _covered(cell, 6, 2), 30, f"the {moved} machines of {victim.name} re-sharded")
        # ... and no machine is declared down meanwhile or after (its tasks would be lost
        # and restarted as new incarnations).
        while time.monotonic() - killed_at < 12:
            assert cell.get("/v1/cell")["machines"] == {"up": 6, "down": 0}
            time.sleep(0.5)
        assert _running_ids(cell, "bob", "before") == ids

        # Syncs still reach every machine: a new job starts everywhere, killing the old one
        # stops all of its processes.
        assert cell.submit(sleeper_job("after", count=12)).status_code == 201
        placed = wait_for(lambda: cell.running("bob", "after", 12), 60, "12 new tasks running")
        assert len({t["machine"] for t in placed}) >= 2
        assert cell.request("DELETE", "/v1/jobs/bob/before").status_code == 200
        wait_for(lambda: not cell.live_tasks("bob", "before") or None, 30, "the old job's tasks dead")
        assert cell.get("/v1/cell")["machines"] == {"up": 6, "down": 0}


def test_the_replicas_internal_endpoints_obey_only_the_cell(tmp_path: Path) -> None:
    """A relay would sign whatever it is asked to send: an unsigned request to it (or a forged
    batch of reports to the leader, or a forged plan) is refused and changes nothing."""
    with LocalCell(tmp_path, masters=1, borglets=1) as cell:
        leader = cell.wait_leader()
        borglet = cell.borglets[0]
        forged_sync = {"master": "mallory", "epoch": 10**12, "seq": 1, "revision": 0,
                       "tasks": [{"task_id": "x/y/0#0", "command": ["/bin/true"]}]}  # fmt: skip
        relay = cell.request("POST", "/internal/v1/shard/sync", master=leader,
                             json={"items": [{"machine": borglet.name, "address": borglet.url, "body": forged_sync}]})  # fmt: skip
        assert relay.status_code == 401, relay.text
        reports = cell.request("POST", "/internal/v1/shard/reports", master=leader,
                               json={"shard": "m0", "reports": {}, "missed": {borglet.name: 99}})  # fmt: skip
        assert reports.status_code == 401, reports.text
        plan = cell.request("POST", "/internal/v1/plans", master=leader, json={"plan": {"placements": []}})
        assert plan.status_code == 401, plan.text
        time.sleep(2)
        assert cell.get("/v1/cell")["machines"] == {"up": 1, "down": 0}
        # The real leader still runs work on the machine: its epoch was not raised.
        assert cell.submit(sleeper_job("ok", count=1)).status_code == 201
        wait_for(lambda: cell.running("bob", "ok", 1), 30, "a task started by the real leader")


def test_a_leader_that_wins_its_lease_back_syncs_its_idle_machines(tmp_path: Path) -> None:
    # One replica, frozen past its lease, then thawed: it is deposed and elected again under
    # the same name. Its new term has heard of no machine yet; the idle machines' reports
    # have not changed since the shard last sent them, and they must still reach the new
    # term, or it never syncs those machines and the tasks placed there never start. (Here
    # the shard may also see the cell without a leader between the terms, which resends the
    # reports by itself; test_linkshard pins the case where it does not, seen in an overload run.)
    import psutil

    with LocalCell(tmp_path, masters=1, borglets=3) as cell:
        leader = cell.wait_leader()
        wait_for(lambda: _covered(cell, 3, 1), 20, "one share covering three machines")
        assert leader.pid is not None
        proc = psutil.Process(leader.pid)
        proc.suspend()
        try:
            time.sleep(5.0)  # past the 2 s lease
        finally:
            proc.resume()
        wait_for(lambda: cell.leader() is leader or None, 30, "the replica to lead again")
        # Two tasks fit a machine: the six are spread over all three.
        job = sleeper_job("after", count=6, request={"cpu": "1500m", "ram": "16MiB"})
        assert cell.submit(job).status_code == 201
        placed = wait_for(
            lambda: (ts := cell.tasks("bob", "after")) and all(t["confirmed"] for t in ts) and len(ts) == 6 and ts,
            60, "6 tasks started by their borglets",
        )  # fmt: skip
        assert len({t["machine"] for t in placed}) == 3
