"""Users, tokens and limits on a live cell: no token changes nothing, a user cannot touch another's job or the cell's machines, only the admin sets quotas, a revoked token stops working on every replica, a follower forwards its caller's identity, and each user has a rate limit of its own.

Each test is an attack that once worked on an open master: anyone who reached a replica could
resize or kill another user's job, add a machine of 100 TiB or remove real ones.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.integration.cellkit import LocalCell, sleeper_job, wait_for

pytestmark = pytest.mark.integration

RATE, BURST = 30, 60  # well above what the tests' polling makes, well below a burst of 200


@pytest.fixture(scope="module")
def cell(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCell]:
    c = LocalCell(
        tmp_path_factory.mktemp("access"), masters=1, borglets=2, poll_interval=0.3,
        master_args=("--rate-limit", str(RATE), "--rate-burst", str(BURST)),
    )  # fmt: skip
    with c:
        assert c.submit(sleeper_job("web", user="alice", count=2)).status_code == 201
        wait_for(lambda: c.running("alice", "web", 2), 30, "alice/web to run")
        yield c
    assert c.leftovers() == [], "processes of the cell are still running"


@pytest.fixture(scope="module")
def tokens(cell: LocalCell) -> dict[str, str]:
    return {name: cell.add_user(name) for name in ("alice", "bob", "carol", "dave")}


def as_user(cell: LocalCell, token: str | None) -> httpx.Client:
    headers = {"Authorization": f"Bearer {token}"} if token is not None else {}
    return httpx.Client(base_url=cell.masters[0].url, timeout=10.0, headers=headers)


def snapshot(cell: LocalCell) -> dict[str, Any]:
    """What the attacks must leave as it was: alice's job and tasks, the machines, the users."""
    job = cell.get("/v1/jobs/alice/web")["job"]
    return {
        "job": (job["task_count"], job.get("request"), job.get("version")),
        "tasks": sorted((t["index"], t["incarnation"], t["state"]) for t in cell.tasks("alice", "web")),
        "machines": sorted((m["name"], m["state"]) for m in cell.get("/v1/machines")["machines"]),
        "users": sorted(u["name"] for u in cell.get("/v1/users")["users"]),
    }


HUGE_MACHINE = {"name": "evil", "address": "http://10.255.255.1:1", "capacity": {"cpu": 1000, "ram": "100TiB"}}
MUTATIONS = [
    ("POST", "/v1/jobs", sleeper_job("intruder", user="alice")),
    ("PATCH", "/v1/jobs/alice/web", {"task_count": 5}),
    ("PATCH", "/v1/jobs/alice/web", {"request": {"cpu": "2"}}),
    ("DELETE", "/v1/jobs/alice/web/tasks/0", None),
    ("DELETE", "/v1/jobs/alice/web", None),
    ("POST", "/v1/machines", HUGE_MACHINE),
    ("DELETE", "/v1/machines/b0", None),
    ("DELETE", "/v1/machines/b1", None),
    ("POST", "/v1/users", {"name": "mallory"}),
    ("DELETE", "/v1/users/alice", None),
]


@pytest.mark.parametrize("token", [None, "mbt_guessed", "not-even-bearer"])
def test_without_a_valid_token_every_mutation_is_401_and_nothing_changes(
    cell: LocalCell, tokens: dict[str, str], token: str | None
) -> None:
    before = snapshot(cell)
    with as_user(cell, token) as http:
        for method, path, body in MUTATIONS:
            r = http.request(method, path, json=body)
            assert r.status_code == 401, (method, path, r.text)
            assert r.headers["WWW-Authenticate"].startswith("Bearer"), r.headers
            assert r.json()["detail"][0]["field"] == "Authorization"
        assert http.get("/v1/jobs").status_code == 401  # reads need a token too
        assert http.get("/healthz").status_code == 200 and http.get("/readyz").status_code == 200
        assert http.get("/metrics").status_code == 200  # open by default
    assert snapshot(cell) == before


def test_a_user_cannot_change_another_users_job_or_its_tasks(cell: LocalCell, tokens: dict[str, str]) -> None:
    before = snapshot(cell)
    with as_user(cell, tokens["bob"]) as bob:
        for method, path, body in MUTATIONS[:5]:
            r = bob.request(method, path, json=body)
            assert r.status_code == 403, (method, path, r.text)
            error = r.json()["detail"][0]["error"]
            assert "user alice" in error and "bob" in error, error
        # Reads are anyone's: Borg shows its debugging information to every user.
        assert bob.get("/v1/jobs/alice/web").status_code == 200
        assert bob.get("/v1/jobs/alice/web/tasks").status_code == 200
    assert snapshot(cell) == before


def test_a_user_changes_its_own_jobs_and_the_admin_anyones(cell: LocalCell, tokens: dict[str, str]) -> None:
    with as_user(cell, tokens["bob"]) as bob:
        assert bob.post("/v1/jobs", json=sleeper_job("mine", user="bob")).status_code == 201
        assert bob.patch("/v1/jobs/bob/mine", json={"task_count": 0}).status_code == 200
        assert bob.delete("/v1/jobs/bob/mine").status_code == 200
    # The admin (LocalCell's own client) may change alice's job.
    assert cell.request("PATCH", "/v1/jobs/alice/web", json={"task_count": 2}).status_code == 200


def test_machines_quotas_and_users_are_the_admins(cell: LocalCell, tokens: dict[str, str]) -> None:
    before = snapshot(cell)
    with as_user(cell, tokens["alice"]) as alice:
        for method, path, body in [*MUTATIONS[5:], ("PUT", "/v1/quotas/alice/production", {"cpu": 1000})]:
            r = alice.request(method, path, json=body)
            assert r.status_code == 403, (method, path, r.text)
            assert "admin" in r.json()["detail"][0]["error"]
        assert alice.get("/v1/users").status_code == 403
        assert alice.get("/v1/machines").status_code == 200
    assert snapshot(cell) == before


def test_the_admin_sets_a_quota_and_lowering_it_below_running_use_kills_nothing(
    cell: LocalCell, tokens: dict[str, str]
) -> None:
    before = snapshot(cell)["tasks"]  # alice/web: 2 tasks of 10m and 16MiB, RUNNING in batch
    with as_user(cell, tokens["alice"]) as alice, as_user(cell, tokens["bob"]) as bob:
        try:
            r = cell.request("PUT", "/v1/quotas/alice/batch", json={"cpu": "1", "ram": "1GiB"})
            assert r.status_code == 200, r.text
            assert r.json()["quota"]["used"] == {"cpu": 20, "ram": 32 * 1024**2}
            assert alice.get("/v1/quotas/alice/batch").json()["quota"]["limit"] == {"cpu": 1000, "ram": 1024**3}
            assert cell.request("PUT", "/v1/quotas/alice/best_effort", json={"cpu": 1}).json()["detail"][0]["field"] == "band"
            for method in ("PUT", "DELETE"):
                r = bob.request(method, "/v1/quotas/alice/batch", json={"cpu": "100"} if method == "PUT" else None)
                assert r.status_code == 403 and "admin" in r.text, (method, r.text)
            # Lowered below what alice/web already requests: only new admissions are refused.
            assert cell.request("PUT", "/v1/quotas/alice/batch", json={"cpu": "10m", "ram": "16MiB"}).status_code == 200
            r = alice.post("/v1/jobs", json=sleeper_job("more", user="alice"))
            assert r.status_code == 403 and "alice's batch quota is exceeded" in r.text, r.text
            time.sleep(2.0)  # several poll and scheduling passes
            assert snapshot(cell)["tasks"] == before
        finally:
            assert cell.request("DELETE", "/v1/quotas/alice/batch").status_code == 200
    assert cell.request("DELETE", "/v1/quotas/alice/batch").status_code == 404
    assert cell.request("GET", "/v1/quotas/alice/batch").status_code == 404  # no default quota in this cell


def test_a_revoked_token_is_refused_within_two_seconds(cell: LocalCell, tmp_path: Path) -> None:
    token = cell.add_user("erin")
    with as_user(cell, token) as erin:
        assert erin.get("/v1/cell").status_code == 200
        assert cell.request("DELETE", "/v1/users/erin").json() == {"revoked": "erin"}
        wait_for(lambda: erin.get("/v1/cell").status_code == 401, 2.0, "the revoked token refused", every=0.05)
        assert erin.post("/v1/jobs", json=sleeper_job("late", user="erin")).status_code == 401
    assert cell.request("DELETE", "/v1/users/erin").status_code == 404
    assert cell.request("DELETE", "/v1/users/admin").status_code == 409  # the admin is the token file's


def test_a_burst_above_the_limit_is_429_and_another_user_is_not_affected(
    cell: LocalCell, tokens: dict[str, str]
) -> None:
    with as_user(cell, tokens["carol"]) as carol, as_user(cell, tokens["dave"]) as dave:
        answers = [carol.get("/v1/cell") for _ in range(BURST + 40)]
        limited = [r for r in answers if r.status_code == 429]
        assert limited, "a burst of BURST + 40 requests was never limited"
        assert all(r.status_code in (200, 429) for r in answers)
        refused = limited[0]
        assert int(refused.headers["Retry-After"]) >= 1
        error = refused.json()["detail"][0]["error"]
        assert "carol" in error and "rate limit" in error, error
        # dave's bucket is his own.
        assert [dave.get("/v1/cell").status_code for _ in range(10)] == [200] * 10


def test_a_follower_forwards_its_callers_identity_to_the_leader(tmp_path: Path) -> None:
    with LocalCell(tmp_path, masters=3, borglets=1, poll_interval=0.3) as cell:
        bob_token = cell.add_user("bob")
        leader = cell.wait_leader()
        follower = next(m for m in cell.masters if m is not leader)
        wait_for(lambda: httpx.get(f"{follower.url}/v1/users", headers=cell.auth).json()["users"], 5, "the user on the follower")
        with httpx.Client(base_url=follower.url, timeout=10.0, headers={"Authorization": f"Bearer {bob_token}"}) as bob:
            # Accepted by the leader only if the follower passed bob's token on.
            r = bob.post("/v1/jobs", json=sleeper_job("through", user="bob", count=0))
            assert r.status_code == 201, r.text
            assert r.headers.get("X-Minborg-Leader") == leader.name
            r = bob.post("/v1/jobs", json=sleeper_job("theirs", user="alice", count=0))
            assert r.status_code == 403 and "user alice" in r.text
        with httpx.Client(base_url=follower.url, timeout=10.0) as anonymous:
            assert anonymous.post("/v1/jobs", json=sleeper_job("anon", user="bob", count=0)).status_code == 401
        # The admin's quota change goes through the leader's writer too.
        r = httpx.put(f"{follower.url}/v1/quotas/bob/batch", json={"cpu": "1"}, headers=cell.auth, timeout=10.0)
        assert r.status_code == 200 and r.headers.get("X-Minborg-Leader") == leader.name, r.text
        assert "bob/anon" not in {j["key"] for j in cell.get("/v1/jobs")["jobs"]}
    assert cell.leftovers() == []
