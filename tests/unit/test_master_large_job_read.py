"""GET /v1/jobs/{user}/{name} of a job of thousands of tasks walks them (pending reasons, crash
loops, rollout): it is rendered off the event loop, so reads queued behind it are answered
meanwhile; a small job's is rendered where the request is handled, with nothing to wait for."""

from __future__ import annotations

import threading
import warnings
from collections.abc import Iterator
from typing import Any

import pytest

from reference.jobspec import parse_job
from reference.master import codec, jobroutes, views
from reference.master.access import AccessConfig, hash_token
from reference.master.api import make_app
from reference.master.cache import WatchCache
from reference.master.cell import JobInfo, MachineInfo, TaskInfo
from reference.master.leader import LeaderConfig
from reference.master.replica import Replica
from spec.model import Job, Machine, Resources, Task, TaskId, TaskState
from tests.unit.fakestore import Store

with warnings.catch_warnings():  # starlette's TestClient warns about its httpx
    warnings.simplefilter("ignore")
    from fastapi.testclient import TestClient

TOKEN = "mbt_large-job-read-admin"
KEYS = codec.Keys("c")
REQ = Resources.of(cpu=1, ram=1 << 20)
SIZES = {"small": 10, "large": jobroutes.LARGE_LIST + 100}


def _store() -> Store:
    store = Store()
    m = Machine("m0", Resources.of(cpu=64000, ram=1 << 40))
    store.kv[KEYS.machine(m.name).encode()] = codec.encode_machine(m, MachineInfo(address="http://m0"))
    for name, n in SIZES.items():
        spec = parse_job({"name": name, "user": "u", "task_count": n, "request": {"cpu": "1m"}, "command": ["sleep", "1"]})
        job = Job("u", name, 100, n, REQ)
        store.kv[KEYS.job(job.key).encode()] = codec.encode_job(job, JobInfo(spec))
        for i in range(n):
            t = Task(TaskId(job.key, i), TaskState.PENDING, None, 100, REQ)
            store.kv[KEYS.task(t.id).encode()] = codec.encode_task(t, TaskInfo())
    return store


@pytest.fixture
def client() -> Iterator[TestClient]:
    replica = Replica(
        name="m0", url="http://127.0.0.1:1", etcd=["http://127.0.0.1:9"],
        config=LeaderConfig(cell_name="c", master_name="m0"),
    )  # fmt: skip
    store = _store()
    cache = WatchCache(store, KEYS)  # type: ignore[arg-type]
    cache._reload()
    replica.cache = cache
    app = make_app(replica, AccessConfig(admin_hash=hash_token(TOKEN)))
    with TestClient(app, headers={"Authorization": f"Bearer {TOKEN}"}) as c:
        yield c


def test_a_large_jobs_view_is_rendered_off_the_thread_that_handles_requests(
    client: TestClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: dict[str, threading.Thread] = {}
    real = views.pending_reasons

    def recorded(cell: Any, key: str) -> Any:
        seen[key] = threading.current_thread()
        return real(cell, key)

    monkeypatch.setattr(views, "pending_reasons", recorded)
    answers = {name: client.get(f"/v1/jobs/u/{name}?allow_stale=1") for name in SIZES}
    for name, r in answers.items():
        assert r.status_code == 200, r.text
        assert r.json()["tasks"]["PENDING"] == SIZES[name]
    # The small job's view is built by the thread that runs the event loop; the large one's not.
    assert seen["u/large"] is not seen["u/small"]
    assert seen["u/large"].name != seen["u/small"].name
