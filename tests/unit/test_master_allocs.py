"""Alloc sets in API v1 (reference/master/allocs.py): first-fit placement through the spec's guard, all or nothing; delete kills the set's jobs first; only the owner changes a set."""

from __future__ import annotations

import pytest

from reference.allocspec import parse_alloc_set
from reference.master import codec
from reference.master.access import Identity, authorise
from reference.master.allocs import alloc_set_view, delete_alloc_set, place_alloc_set
from reference.master.cell import Cell, Draft
from reference.master.mutations import ApiError, submit_job
from reference.master.writer import diff_ops
from spec.actions import machine_add
from spec.fmap import FMap
from spec.model import Band, CellState, Machine, QuotaKey, Resources


def cell(*cpus: int) -> Cell:
    """Machines m0, m1, ... with the given milli-CPU each, rack r<i % 2>."""
    state = CellState()
    for i, cpu in enumerate(cpus):
        state = machine_add(state, Machine(f"m{i}", Resources.of(cpu=cpu, ram=2**30), (("rack", f"r{i % 2}"),)))
    return Cell(state, {}, {}, {})


def spec(count: int, cpu: str = "1", **more: object):
    return parse_alloc_set({"name": "logs", "user": "alice", "count": count, "priority": 200,
                            "resources": {"cpu": cpu}, **more})  # fmt: skip


def test_a_set_takes_one_alloc_on_each_of_distinct_machines_first_fit() -> None:
    d = Draft(cell(4000, 4000, 4000), 1.0)
    placed = place_alloc_set(d, spec(2))
    assert [(a.name, a.machine) for a in placed] == [("alice/logs/0", "m0"), ("alice/logs/1", "m1")]
    view = alloc_set_view(d.state, "alice/logs")
    assert (view["count"], view["resources"], view["jobs"]) == (2, {"cpu": 1000}, [])
    # Both allocs are written, each under its own key.
    puts = [op for op in diff_ops(d.base, d, codec.Keys("c")) if "request_put" in op]
    assert len(puts) == 2


def test_a_set_that_does_not_fit_reserves_nothing_and_says_why() -> None:
    d = Draft(cell(4000, 500, 4000), 1.0)
    with pytest.raises(ApiError) as caught:
        place_alloc_set(d, spec(3))  # m1 has 500m: allocs 0 and 1 take m0 and m2, alloc 2 fits nowhere
    assert (caught.value.status, caught.value.field) == (409, "count")
    assert "alloc 2 of 3 fits no machine" in caught.value.error
    assert "1 cpu short" in caught.value.error and "2 holds another alloc of the set" in caught.value.error
    # The writer drops a change that raises: its draft is never committed (writer._run_group).


def test_constraints_choose_the_machines() -> None:
    d = Draft(cell(4000, 4000, 4000, 4000), 1.0)
    placed = place_alloc_set(d, spec(2, constraints=[{"attr": "rack", "op": "eq", "value": "r1"}]))
    assert [a.machine for a in placed] == ["m1", "m3"]


def test_a_second_set_of_the_same_name_is_a_conflict() -> None:
    d = Draft(cell(4000, 4000), 1.0)
    place_alloc_set(d, spec(1))
    with pytest.raises(ApiError) as caught:
        place_alloc_set(d, spec(1))
    assert (caught.value.status, caught.value.field) == (409, "name")


def test_deleting_a_set_kills_its_jobs_then_releases_its_allocs() -> None:
    d = Draft(cell(4000, 4000), 1.0)
    place_alloc_set(d, spec(2, cpu="2"))
    submit_job(d, {"name": "web", "user": "alice", "task_count": 2, "alloc": "logs", "command": ["true"],
                   "request": {"cpu": "500m"}})  # fmt: skip
    out = delete_alloc_set(d, "alice/logs")
    assert out == {"deleted": "alice/logs", "allocs": 2, "killed_jobs": ["alice/web"]}
    assert not d.state.allocs and "alice/web" not in d.state.jobs
    with pytest.raises(ApiError) as caught:
        delete_alloc_set(d, "alice/logs")
    assert caught.value.status == 404


def test_a_set_over_its_users_quota_is_refused_as_a_job_is_and_reserves_nothing() -> None:
    c = cell(4000, 4000, 4000)
    c = Cell(c.state.with_(quotas=FMap({QuotaKey("alice", Band.PRODUCTION): Resources.of(cpu=2500)})), {}, {}, {})
    d = Draft(c, 1.0)
    with pytest.raises(ApiError) as caught:
        place_alloc_set(d, spec(3))  # 3 x 1000m = 3000m > alice's production 2500m
    assert (caught.value.status, caught.value.field) == (403, "resources")
    assert "alice's production quota is exceeded: cpu 3000 > 2500" in caught.value.error
    assert not d.state.allocs
    place_alloc_set(d, spec(2))  # 2000m fits; the set's jobs then take none of the quota
    submit_job(d, {"name": "web", "user": "alice", "priority": 200, "task_count": 2, "alloc": "logs",
                   "command": ["true"], "request": {"cpu": "900m"}})  # fmt: skip
    with pytest.raises(ApiError) as caught:  # 2000m of allocs + 600m > 2500m
        submit_job(d, {"name": "out", "user": "alice", "priority": 200, "command": ["true"],
                       "request": {"cpu": "600m"}})  # fmt: skip
    assert (caught.value.status, caught.value.field) == (403, "request")


def test_only_the_owner_or_the_admin_changes_an_alloc_set() -> None:
    bob, alice, admin = Identity("bob"), Identity("alice"), Identity("admin", admin=True)
    assert authorise(alice, "DELETE", "/v1/allocs/alice/logs") is None
    assert authorise(admin, "DELETE", "/v1/allocs/alice/logs") is None
    refusal = authorise(bob, "DELETE", "/v1/allocs/alice/logs")
    assert refusal is not None and "alice" in refusal
    assert authorise(bob, "POST", "/v1/allocs") is None  # the body's user is checked by the handler
    assert authorise(bob, "GET", "/v1/allocs/alice/logs") is None


def test_an_alloc_set_file_names_each_bad_field() -> None:
    from reference.jobspec import JobFileError

    with pytest.raises(JobFileError) as caught:
        parse_alloc_set({"name": "logs", "user": "alice", "count": 0, "resources": {"cpu": "x"}, "size": 1})
    fields = {e["field"] for e in caught.value.errors}
    assert {"count", "resources", "size"} <= fields


def test_the_endpoints_refuse_bad_bodies_by_field_and_are_in_the_document() -> None:
    import warnings

    from reference.master.access import AccessConfig, hash_token
    from reference.master.api import make_app
    from reference.master.leader import LeaderConfig
    from reference.master.replica import Replica

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from fastapi.testclient import TestClient
    replica = Replica(name="m0", url="http://127.0.0.1:1", etcd=["http://127.0.0.1:9"],
                      config=LeaderConfig(cell_name="c", master_name="m0"))  # fmt: skip
    app = make_app(replica, AccessConfig(admin_hash=hash_token("mbt_t")))
    with TestClient(app, headers={"Authorization": "Bearer mbt_t"}) as c:
        r = c.post("/v1/allocs", json={"name": "logs", "user": "alice", "count": "many"})
        assert r.status_code == 422 and r.json()["detail"][0]["field"] == "count"
        assert c.post("/v1/allocs", json=[1]).status_code == 422
        assert c.post("/v1/allocs", json={"name": "logs", "user": "alice"}).status_code == 503  # valid; no leader
        paths = c.get("/openapi.json").json()["paths"]
        assert set(paths["/v1/allocs"]) == {"get", "post"}
        assert set(paths["/v1/allocs/{user}/{name}"]) == {"get", "delete"}
        assert "AllocSetSpec" in paths["/v1/allocs"]["post"]["requestBody"]["content"]["application/json"]["schema"]["$ref"]
