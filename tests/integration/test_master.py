"""A live cell: 3-member etcd, 3 master replicas and 3 borglets on loopback, driven through the HTTP API.

The scenarios share one cell, in file order (each leaves the cell whole for the next):
bad input changes nothing; a 20-task job runs; writes to a follower are forwarded; a
restarted borglet re-adopts its tasks; a killed borglet's machine goes down and its tasks
run elsewhere; a SIGKILLed leader is replaced and no acknowledged write is lost; a leader
frozen past its lease is fenced off; with every master gone the tasks keep serving.
"""

from __future__ import annotations

import json
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import psutil
import pytest

from tests.integration.cellkit import LocalCell, hello_job, sleeper_job, wait_for

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def cell(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCell]:
    # A restarted borglet takes 1-2 s to import and listen again on a busy 2-core machine: six
    # missed polls (3 s) keep its machine up through that, so re-adoption is what is tested.
    c = LocalCell(tmp_path_factory.mktemp("cell"), masters=3, borglets=3, poll_interval=0.5, down_after=6)
    with c:
        yield c
    assert c.leftovers() == [], "processes of the cell are still running"


def job_keys(cell: LocalCell) -> set[str]:
    return {j["key"] for j in cell.get("/v1/jobs")["jobs"]}


def test_bad_input_is_refused_and_changes_nothing(cell: LocalCell, tmp_path: Path) -> None:
    before = job_keys(cell)
    cases = [
        ({"name": "x", "user": "u"}, "command"),
        ({**sleeper_job("bad1"), "request": {"cpu": "lots"}}, "request.cpu"),
        ({**sleeper_job("bad2"), "colour": "blue"}, "colour"),
        ({**sleeper_job("bad3"), "priority": 1000}, "priority"),
        ({**sleeper_job("bad.dot")}, "name"),
        ({**sleeper_job("bad4"), "constraints": [{"attr": "rack", "op": "near", "value": "r1"}]}, "constraints.0.op"),
        ({**sleeper_job("bad5"), "request": {"cpu": 1e12}}, "request.cpu"),
        ({**sleeper_job("bad6"), "request": {"cpu": float("inf")}}, "request.cpu"),
        ({**sleeper_job("bad7"), "request": {"ram": float("inf")}}, "request.ram"),
    ]
    for body, field in cases:
        # json.dumps writes an infinite float as JSON's `Infinity`, as some clients do.
        r = cell.request("POST", "/v1/jobs", content=json.dumps(body), headers={"content-type": "application/json"})
        assert r.status_code == 422, (body, r.text)
        assert field in {d["field"] for d in r.json()["detail"]}, r.text
    for raw in (b"{not json", b"[1, 2]", b""):
        r = cell.request("POST", "/v1/jobs", content=raw, headers={"content-type": "application/json"})
        assert 400 <= r.status_code < 500, r.text
    r = cell.request("PATCH", "/v1/jobs/nobody/nothing", json={"task_count": 2})
    assert r.status_code == 404
    r = cell.request("POST", "/v1/machines", json={"name": "m", "address": "nope", "capacity": "cpu=1"})
    assert r.status_code == 422
    assert cell.request("GET", "/v1/bns/garbage").status_code == 404
    assert job_keys(cell) == before


def test_twenty_tasks_run_and_duplicates_are_refused(cell: LocalCell) -> None:
    leader = cell.wait_leader()
    follower = next(m for m in cell.live_masters() if m is not leader)
    # Through a follower: forwarded to the leader, answered after the commit.
    r = cell.request("POST", "/v1/jobs", master=follower, json=sleeper_job("twenty", count=20))
    assert r.status_code == 201, r.text
    assert r.json()["revision"] > 0
    wait_for(lambda: cell.running("bob", "twenty", 20), 30, "20 tasks running")
    r = cell.request("POST", "/v1/jobs", json=sleeper_job("twenty", count=1))
    assert r.status_code == 409
    # Every replica serves the read from its cache, stamped with a revision.
    for m in cell.live_masters():
        r = cell.request("GET", "/v1/jobs/bob/twenty", master=m)
        assert r.status_code == 200 and int(r.headers["X-Minborg-Revision"]) > 0
    r = cell.request("PATCH", "/v1/jobs/bob/twenty", json={"task_count": 5})
    assert r.status_code == 200 and r.json()["job"]["task_count"] == 5
    wait_for(lambda: len(cell.live_tasks("bob", "twenty")) == 5, 15, "scale down to 5")
    assert cell.request("DELETE", "/v1/jobs/bob/twenty").json()["killed"] == 5
    assert "bob/twenty" not in job_keys(cell)


def test_restarted_borglet_readopts_its_tasks(cell: LocalCell) -> None:
    assert cell.submit(sleeper_job("adopt", count=6)).status_code == 201
    tasks = wait_for(lambda: cell.running("bob", "adopt", 6), 30, "6 tasks running")
    b = next(b for b in cell.borglets if any(t["machine"] == b.name for t in tasks))
    mine = {(t["index"], t["incarnation"], t["started_at"]) for t in tasks if t["machine"] == b.name}
    b.kill(signal.SIGKILL)
    cell.restart(b)
    time.sleep(2.0)  # a few polls of the restarted borglet
    after = cell.running("bob", "adopt", 6)
    assert after is not None
    assert {(t["index"], t["incarnation"], t["started_at"]) for t in after if t["machine"] == b.name} == mine
    cell.request("DELETE", "/v1/jobs/bob/adopt")


def test_killed_borglet_machine_goes_down_and_tasks_move(cell: LocalCell) -> None:
    assert cell.submit(sleeper_job("move", count=6)).status_code == 201
    tasks = wait_for(lambda: cell.running("bob", "move", 6), 30, "6 tasks running")
    victim = next(b for b in cell.borglets if any(t["machine"] == b.name for t in tasks))
    victim.kill(signal.SIGKILL)
    wait_for(
        lambda: any(m["name"] == victim.name and m["state"] == "down" for m in cell.get("/v1/machines")["machines"]),
        15, "the machine to go down",
    )  # fmt: skip
    moved = wait_for(lambda: cell.running("bob", "move", 6), 30, "the tasks to run elsewhere")
    assert all(t["machine"] != victim.name for t in moved)
    assert any(t["incarnation"] > 0 for t in moved), "lost tasks come back as new incarnations"
    cell.restart(victim)
    wait_for(
        lambda: all(m["state"] == "up" for m in cell.get("/v1/machines")["machines"]), 15, "the machine back up"
    )
    cell.request("DELETE", "/v1/jobs/bob/move")


def test_leader_killed_new_leader_loses_nothing(cell: LocalCell) -> None:
    leader = cell.wait_leader()
    acked = []
    for i in range(5):
        r = cell.submit(sleeper_job(f"before{i}", count=0))
        assert r.status_code == 201
        acked.append(f"bob/before{i}")
    killed_at = time.monotonic()
    leader.kill(signal.SIGKILL)
    r = cell.submit(sleeper_job("after", count=1), timeout=20)
    failover = time.monotonic() - killed_at
    assert r.status_code == 201, r.text
    acked.append("bob/after")
    new = cell.wait_leader()
    assert new is not leader
    assert set(acked) <= job_keys(cell)
    assert failover < 10, f"failover took {failover:.1f}s"
    cell.restart(leader)
    wait_for(lambda: cell.request("GET", "/healthz", master=leader).status_code == 200, 20, "old leader back")
    wait_for(lambda: set(acked) <= job_keys_from(cell, leader), 10, "restarted replica to catch up")
    for key in acked:
        cell.request("DELETE", f"/v1/jobs/{key}")


def job_keys_from(cell: LocalCell, master: object) -> set[str]:
    return {j["key"] for j in cell.get("/v1/jobs", master=master)["jobs"]}  # type: ignore[arg-type]


def test_frozen_leader_is_fenced(cell: LocalCell) -> None:
    leader = cell.wait_leader()
    assert leader.pid is not None
    proc = psutil.Process(leader.pid)
    proc.suspend()  # cut off from etcd and everyone: its lease runs out
    try:
        new = wait_for(lambda: cell.leader(skip=leader), 15, "a new leader")
        assert cell.submit(sleeper_job("fenced", count=0)).status_code == 201
    finally:
        proc.resume()
    # Back from its pause, the old leader knows its lease is gone: it does not claim to lead,
    # and a write sent to it is forwarded to the new leader, not written by it.
    wait_for(lambda: cell.request("GET", "/healthz", master=leader).json()["role"] == "follower", 10, "old leader follows")
    # Its watch may still show the leader key naming it for a moment after it wakes; while it
    # does, a write sent to it is refused with a 503 to retry rather than forwarded.
    wait_for(lambda: cell.get("/v1/cell", master=leader)["leader"] == new.name, 10, "old leader sees the new one")
    r = cell.request("POST", "/v1/jobs", master=leader, json=sleeper_job("via-old", count=0))
    assert r.status_code == 201 and r.headers.get("X-Minborg-Leader") == new.name
    cell.request("DELETE", "/v1/jobs/bob/fenced")
    cell.request("DELETE", "/v1/jobs/bob/via-old")


def test_tasks_keep_serving_without_masters(cell: LocalCell) -> None:
    assert cell.submit(hello_job(count=2)).status_code == 201
    wait_for(lambda: len(cell.get("/v1/jobs/alice/hello/endpoints")["endpoints"]) == 2, 30, "2 healthy endpoints")
    resolved = cell.get("/v1/bns/0.hello.alice.test.minborg")
    endpoints = cell.get("/v1/jobs/alice/hello/endpoints")["endpoints"]
    for m in cell.masters:
        m.kill(signal.SIGKILL)
    time.sleep(1.0)
    for e in endpoints:
        r = httpx.get(f"http://{e['host']}:{e['port']}/", timeout=3)
        assert r.status_code == 200
    assert httpx.get(f"http://{resolved['host']}:{resolved['port']}/healthz", timeout=3).status_code == 200
