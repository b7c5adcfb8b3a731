"""A replica cut off from etcd refuses reads within its staleness bound while another serves; revision floors give read-your-writes."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import httpx
import pytest

from reference.launcher import ask_leader
from reference.launcher.testcell import Proc, wait_for
from reference.ports import free_port
from reference.store.etcd_cluster import EtcdCluster

pytestmark = pytest.mark.integration

BOUND_S = 2.0
TOKEN = "mbt_freshness-test-admin"


def master(name: str, etcd_urls: list[str], workdir: Path, tls_args: list[str]) -> Proc:
    port = free_port()
    token_file = workdir / "admin.token"
    token_file.write_text(TOKEN)
    argv = [
        sys.executable, "-m", "reference.master", "--name", name, "--listen", f"127.0.0.1:{port}",
        "--etcd", ",".join(etcd_urls), "--cell", "fresh", "--lease-ttl", "3", "--max-staleness", str(BOUND_S),
        "--admin-token-file", str(token_file), *tls_args,
    ]  # fmt: skip
    return Proc(name, port, argv, workdir / f"master-{name}.log")


def job(name: str) -> dict[str, object]:
    return {
        "name": name, "user": "fresh", "priority": 100, "task_count": 0,
        "request": {"cpu": "10m", "ram": "8MiB"}, "command": ["true"],
    }  # fmt: skip


def test_replica_cut_from_etcd_refuses_reads_while_another_serves(tmp_path: Path) -> None:
    cluster = EtcdCluster(tmp_path / "etcd", members=3).start()
    procs: list[Proc] = []
    http = httpx.Client(timeout=5.0, headers={"Authorization": f"Bearer {TOKEN}"})
    try:
        # A tuple, so that member 0 (falsy as an int) counts as found.
        (etcd_leader,) = wait_for(lambda: (i,) if (i := cluster.leader_index()) is not None else None, 10, "etcd leader")
        cut = next(i for i in range(3) if i != etcd_leader)  # pausing a follower keeps etcd's quorum calm
        urls = cluster.client_urls
        tls_args = cluster.client_tls.args() if cluster.client_tls else []
        a = master("a", [u for i, u in enumerate(urls) if i != cut], tmp_path, tls_args)
        b = master("b", [urls[cut]], tmp_path, tls_args)
        procs += [a, b]
        a.start()
        wait_for(lambda: ask_leader(http, [a.url], itself=True) == "a", 30, "a leads")
        b.start()
        wait_for(lambda: http.get(b.url + "/healthz").json()["ready"], 30, "b ready")

        first = http.post(a.url + "/v1/jobs", json=job("one"))
        assert first.status_code == 201, first.text
        rev = int(first.headers["X-Minborg-Revision"])
        # Read-your-writes on another replica: the floor makes b wait for its watch.
        r = http.get(b.url + "/v1/jobs/fresh/one", headers={"X-Minborg-Min-Revision": str(rev)})
        assert r.status_code == 200 and r.json()["revision"] >= rev

        cluster.pause_member(cut)
        paused = time.monotonic()
        refused = wait_for(
            lambda: (resp := http.get(b.url + "/v1/jobs")).status_code == 503 and resp, 15, "b refuses reads", 0.1
        )
        # The cache may have heard etcd just before the pause: the bound, plus slack for a loaded host.
        assert time.monotonic() - paused < BOUND_S + 3.0
        assert refused.headers["Retry-After"] == "1"
        assert "has not heard from etcd for" in refused.json()["detail"][0]["error"]
        health = http.get(b.url + "/healthz")
        assert health.status_code == 200 and health.json()["ready"] is False  # alive, not ready
        assert http.get(b.url + "/readyz").status_code == 503
        assert http.get(b.url + "/v1/jobs", params={"allow_stale": "true"}).status_code == 200

        # The other replica still serves, and its own writes are readable at once.
        second = http.post(a.url + "/v1/jobs", json=job("two"))
        assert second.status_code == 201, second.text
        rev2 = int(second.headers["X-Minborg-Revision"])
        assert http.get(a.url + "/v1/jobs", params={"min_revision": rev2}).status_code == 200
        assert http.get(a.url + "/readyz").status_code == 200
        began = time.monotonic()
        ahead = http.get(a.url + "/v1/jobs", params={"min_revision": rev2 + 1000})
        assert ahead.status_code == 503 and "below the requested" in ahead.json()["detail"][0]["error"]
        assert time.monotonic() - began < 3.0  # the wait for a floor is bounded

        cluster.resume_member(cut)
        wait_for(lambda: http.get(b.url + "/readyz").status_code == 200, 20, "b ready again")
        r = http.get(b.url + "/v1/jobs/fresh/two", params={"min_revision": rev2})
        assert r.status_code == 200, r.text
    finally:
        for p in procs:
            p.stop()
        cluster.stop()
        http.close()
