"""Read-your-writes through a follower: a write sent to a follower is forwarded to the leader,
and the follower answers only once its own watch cache holds the write, so the same client's
next read from that follower sees it (3-member etcd, 3 masters, no borglets)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.integration.cellkit import LocalCell, sleeper_job, wait_for

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def cell(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCell]:
    c = LocalCell(tmp_path_factory.mktemp("cell"), masters=3, borglets=0, poll_interval=0.5)
    with c:
        yield c
    assert c.leftovers() == [], "processes of the cell are still running"


def test_a_follower_reads_its_forwarded_writes(cell: LocalCell) -> None:
    leader = cell.wait_leader()
    followers = [m for m in cell.live_masters() if m is not leader]
    assert followers

    def serving() -> bool:
        try:
            return all(cell.request("GET", "/healthz", master=m).status_code == 200 for m in followers)
        except Exception:
            return False

    wait_for(serving, 30, "the followers serve")
    for i in range(40):
        follower = followers[i % len(followers)]
        r = cell.request("POST", "/v1/jobs", master=follower, json=sleeper_job(f"ryw{i}"))
        assert r.status_code == 201, r.text
        revision = int(r.headers["X-Minborg-Revision"])
        got = cell.request("GET", f"/v1/jobs/bob/ryw{i}", master=follower)
        assert got.status_code == 200, (i, got.text)
        assert int(got.headers["X-Minborg-Revision"]) >= revision
        r = cell.request("PATCH", f"/v1/jobs/bob/ryw{i}", master=follower, json={"task_count": 2})
        assert r.status_code == 200, r.text
        got = cell.request("GET", f"/v1/jobs/bob/ryw{i}", master=follower)
        assert got.status_code == 200 and got.json()["job"]["task_count"] == 2, (i, got.text)


def test_a_write_past_its_deadline_is_not_made_on_the_leader_nor_through_a_follower(cell: LocalCell) -> None:
    """A copy of a write that reaches a master after its deadline (held up by a partition
    while its client retried elsewhere) is answered 503 and makes nothing, on the leader as
    through a follower; in time, the same write is made."""
    import time

    leader = cell.wait_leader()
    follower = next(m for m in cell.live_masters() if m is not leader)
    assert cell.request("POST", "/v1/jobs", master=leader, json=sleeper_job("kept")).status_code == 201
    for n, master in enumerate((leader, follower)):
        late = {"X-Minborg-Deadline": f"{time.time() - 1:.3f}"}
        r = cell.request("POST", "/v1/jobs", master=master, json=sleeper_job(f"late{n}"), headers=late)
        assert r.status_code == 503 and "after its deadline" in r.text, r.text
        assert cell.request("GET", f"/v1/jobs/bob/late{n}", master=leader).status_code == 404
        r = cell.request("DELETE", "/v1/jobs/bob/kept", master=master, headers=late)
        assert r.status_code == 503, r.text
        assert cell.request("GET", "/v1/jobs/bob/kept", master=leader).status_code == 200
        in_time = {"X-Minborg-Deadline": f"{time.time() + 30:.3f}"}
        r = cell.request("POST", "/v1/jobs", master=master, json=sleeper_job(f"late{n}"), headers=in_time)
        assert r.status_code == 201, r.text
