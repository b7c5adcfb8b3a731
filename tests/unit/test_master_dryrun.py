"""Would it fit? `POST /v1/jobs?dry_run=true` and `GET /v1/whatif` answer from a Fauxmaster on a copy of the cell."""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from typing import Any

import pytest

from reference.fauxmaster import Fauxmaster
from reference.master import dryrun
from reference.master.access import AccessConfig, hash_token
from reference.master.api import make_app
from reference.master.leader import LeaderConfig
from reference.master.mutations import ApiError
from reference.master.replica import Replica
from spec.model import Band, Job, Machine, QuotaKey, Resources

with warnings.catch_warnings():  # starlette's TestClient warns about its httpx
    warnings.simplefilter("ignore")
    from fastapi.testclient import TestClient

ADMIN_TOKEN = "mbt_dryrun-test-admin"
CAP = Resources.of({"cpu": 4000, "ram": 4 << 30})


def body(name: str = "web", count: int = 3, cpu: str = "2", priority: int = 200) -> dict[str, Any]:
    return {"name": name, "user": "alice", "priority": priority, "task_count": count,
            "request": {"cpu": cpu, "ram": "256Mi"}, "command": ["sleep", "60"]}  # fmt: skip


def cell_with_low_priority_work() -> Fauxmaster:
    # 2 machines of 4000m, each half held by a batch task of 2000m at priority 0.
    fm = Fauxmaster.from_workload(
        [Machine(name=f"m{i}", capacity=CAP) for i in range(2)],
        [Job("bob", "batch", 0, 2, Resources.of({"cpu": 2000, "ram": 1 << 28}))],
        quotas={QuotaKey("alice", Band.PRODUCTION): Resources.of({"cpu": 10000, "ram": 8 << 30})},
    )
    fm.schedule_all_pending()
    return fm


def test_a_dry_run_says_where_what_it_preempts_and_which_quota_and_changes_nothing() -> None:
    fm = cell_with_low_priority_work()
    before = fm.cell
    # 3 prod tasks of 2000m: 2 fit beside the batch tasks, the third preempts one of them.
    answer = dryrun.submit(before, body())
    assert answer["job"] == "alice/web" and len(answer["placed"]) == 3 and answer["pending"] == []
    assert answer["preempted"] == [{"job": "bob/batch", "priority": 0, "tasks": 1}]
    assert answer["quota"] == {
        "user": "alice", "band": "production", "quota": {"cpu": 10000, "ram": 8 << 30},
        "used_by_others": {}, "job": {"cpu": 6000, "ram": 3 * (256 << 20)},
    }  # fmt: skip
    assert fm.cell is before and "alice/web" not in before.state.jobs


def test_a_dry_run_names_why_a_task_would_wait() -> None:
    answer = dryrun.submit(cell_with_low_priority_work().cell, body(count=1, cpu="6"))
    (waits,) = answer["pending"]
    assert waits["task"] == "alice/web/0#0"
    assert waits["reason"].startswith("0 of 2 machines fit: cpu: 0 of 2 machines have 6000m free")


def test_a_dry_run_is_refused_as_the_submit_would_be() -> None:
    cell = cell_with_low_priority_work().cell
    with pytest.raises(ApiError) as over:
        dryrun.submit(cell, body(count=6))  # 12 cores > 10
    assert over.value.status == 403
    with pytest.raises(ApiError) as bad:
        dryrun.submit(cell, {**body(), "priority": 1000})
    assert bad.value.status == 422 and bad.value.field == "priority"


@pytest.fixture(scope="module")
def client() -> Iterator[TestClient]:
    # Never started: its cache holds an empty cell, which is enough to see the route's shape.
    replica = Replica(
        name="m0", url="http://127.0.0.1:1", etcd=["http://127.0.0.1:9"],
        config=LeaderConfig(cell_name="c", master_name="m0"),
    )  # fmt: skip
    app = make_app(replica, AccessConfig(admin_hash=hash_token(ADMIN_TOKEN)))
    with TestClient(app, headers={"Authorization": f"Bearer {ADMIN_TOKEN}"}) as c:
        yield c


def test_the_routes_answer_their_declared_shapes(client: TestClient) -> None:
    r = client.post("/v1/jobs", params={"dry_run": "true"}, json=body())
    assert r.status_code == 200, r.text
    assert dryrun.DryRun.model_validate(r.json()).pending[0].reason.startswith("0 of 0 machines fit")
    r = client.post("/v1/jobs", params={"dry_run": "true"}, json={**body(), "task_count": -1})
    assert r.status_code == 422 and r.json()["detail"][0]["field"] == "task_count"
    r = client.get("/v1/whatif", params={"remove_machine": "m9", "allow_stale": "1"})
    assert r.status_code == 404 and r.json()["detail"][0]["field"] == "name"
    r = client.get("/v1/whatif", params={"allow_stale": "1"})
    assert r.status_code == 422 and r.json()["detail"][0]["field"] == "query.remove_machine"
