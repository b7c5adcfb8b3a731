"""The store against a real 3-member etcd: keys, transactions, watches, election, member loss."""

from __future__ import annotations

import ctypes
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from reference import cpuweight
from reference.store import ops
from reference.store.client import StoreClient
from reference.store.election import Election
from reference.store.etcd_cluster import EtcdCluster
from reference.waiting import wait_until

pytestmark = pytest.mark.integration

LEADER_KEY = "/test/leader"
REPO_ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EtcdCluster]:
    # One cluster for the module: starting three members costs seconds on a small machine.
    # Tests that kill a member restart it before they end.
    with EtcdCluster(tmp_path_factory.mktemp("etcd"), members=3).start(timeout=30) as c:
        yield c


@pytest.fixture
def client(cluster: EtcdCluster) -> Iterator[StoreClient]:
    with StoreClient(cluster.client_urls, timeout=3.0, tls=cluster.client_tls) as c:
        yield c


def test_put_get_delete_and_json(client: StoreClient) -> None:
    revision = client.put("/test/kv/a", b"1")
    assert client.get("/test/kv/a") == (b"1", revision)
    assert client.get("/test/kv/missing") is None
    client.put_json("/test/kv/doc", {"b": 2, "a": [1]})
    document, _ = client.get_json("/test/kv/doc")
    assert document == {"a": [1], "b": 2}
    assert client.delete("/test/kv/a") is True
    assert client.delete("/test/kv/a") is False


def test_get_prefix_returns_sorted_keys_and_the_revision_read(client: StoreClient) -> None:
    client.put("/test/prefix/b", "2")
    last = client.put("/test/prefix/a", "1")
    client.put("/test/prefixed", "not under /test/prefix/")
    items, revision = client.get_prefix("/test/prefix/")
    assert [(k, v) for k, v, _ in items] == [(b"/test/prefix/a", b"1"), (b"/test/prefix/b", b"2")]
    assert items[0][2] == last
    assert revision >= last + 1
    assert client.delete_prefix("/test/prefix/") == 2


def test_txn_create_if_absent_then_compare_and_swap(client: StoreClient) -> None:
    absent = [ops.create_revision("/test/txn", "==", 0)]
    created, revision = client.txn(absent, [ops.put("/test/txn", "v1")])
    assert created
    again, _ = client.txn(absent, [ops.put("/test/txn", "v2")])
    assert not again
    assert client.get("/test/txn") == (b"v1", revision)
    stale = client.txn([ops.mod_revision("/test/txn", "==", revision - 1)], [ops.delete("/test/txn")])
    assert stale[0] is False
    swapped = client.txn_result(
        [ops.mod_revision("/test/txn", "==", revision), ops.value("/test/txn", "==", "v1")],
        [ops.put("/test/txn", "v3"), ops.get("/test/txn")],
    )
    assert swapped.succeeded
    assert swapped.responses[1][0].value == b"v3"


def test_a_range_compare_holds_only_while_every_key_in_its_span_is_older(client: StoreClient) -> None:
    """The writer guards a run of a job's task records with one compare over their span
    (etcd's Compare.range_end): it must hold for the keys written and for any other key in
    the span, and for a span with keys absent, as etcd itself judges it."""
    for i in (0, 5, 9):
        client.put(f"/test/span/job/{i}/0", b"old")
    seen = client.revision()
    span = ("/test/span/job/0/0", b"/test/span/job/9/0\0")
    held, _ = client.txn([ops.mod_revision(span[0], "<", seen + 1, range_end=span[1])],
                         [ops.put(f"/test/span/job/{i}/0", b"new") for i in (0, 3, 9)])  # fmt: skip
    assert held
    # Written since `seen` (by the txn above): the same compare no longer holds.
    moved, _ = client.txn([ops.mod_revision(span[0], "<", seen + 1, range_end=span[1])], [ops.put("/test/span/job/1/0", b"x")])
    assert not moved and client.get("/test/span/job/1/0") is None
    # A key outside the span, written after, does not count; one between the ends does.
    seen = client.revision()
    client.put("/test/span/job/99/0", b"after")  # "99/0" sorts after "9/0\0"
    outside, _ = client.txn([ops.mod_revision(span[0], "<", seen + 1, range_end=span[1])], [ops.put("/test/span/job/2/0", b"y")])
    assert outside
    seen = client.revision()
    client.put("/test/span/job/5/1", b"between")
    inside, _ = client.txn([ops.mod_revision(span[0], "<", seen + 1, range_end=span[1])], [ops.put("/test/span/job/4/0", b"z")])
    assert not inside and client.get("/test/span/job/4/0") is None
    client.delete_prefix("/test/span/")


def test_lease_keys_vanish_when_revoked(client: StoreClient) -> None:
    lease = client.lease(5)
    client.put("/test/leased", "x", lease=lease)
    assert client.refresh(lease) == 5
    client.revoke(lease)
    assert client.get("/test/leased") is None
    assert client.refresh(lease) == -1
    client.revoke(lease)  # revoking twice is not an error


def test_watch_sees_changes_in_order_and_resumes_after_member_kill(
    cluster: EtcdCluster, client: StoreClient
) -> None:
    _, start = client.get_prefix("/test/watch/")
    seen: list[ops.WatchEvent] = []
    lock = threading.Lock()

    def record(events: list[ops.WatchEvent], _revision: int) -> None:
        with lock:
            seen.extend(events)

    # Put the watch on member 0 so killing member 0 breaks it.
    watch = StoreClient(cluster.client_urls, tls=cluster.client_tls).watch_prefix("/test/watch/", start + 1, record)
    try:
        written = [client.put(f"/test/watch/{i}", str(i)) for i in range(5)]
        client.delete("/test/watch/0")
        wait_until(lambda: len(seen) == 6, 5.0, "6 events", 0.02)
        assert [e.mod_revision for e in seen][:5] == written
        assert seen[5].kind == "DELETE" and seen[5].key == b"/test/watch/0"

        cluster.kill_member(0)
        written += [client.put(f"/test/watch/{i}", f"after-{i}") for i in range(5, 10)]
        wait_until(lambda: len(seen) == 11, 10.0, "11 events", 0.02)
        revisions = [e.mod_revision for e in seen]
        assert revisions == sorted(revisions) and len(set(revisions)) == 11  # no gap, no repeat
        assert watch.reconnects >= 1
        assert [e.value for e in seen[6:]] == [f"after-{i}".encode() for i in range(5, 10)]
    finally:
        watch.stop()
        if cluster.pids()[0] is None:
            cluster.restart_member(0)
    assert not watch.running


def test_watch_reports_compaction(client: StoreClient) -> None:
    first = client.put("/test/compact/a", "1")
    latest = client.put("/test/compact/a", "2")
    client._post("kv/compaction", {"revision": str(latest)})
    compacted: list[int] = []
    watch = client.watch_prefix("/test/compact/", first, lambda _e, _r: None, on_compacted=compacted.append)
    wait_until(lambda: not watch.running, 5.0, "the watch to stop", 0.02)
    assert compacted == [latest] and watch.compacted_at == latest


def test_one_of_two_candidates_wins_and_the_other_takes_over_after_a_kill(
    client: StoreClient,
) -> None:
    ttl = 2.0
    crashed, thawed = threading.Event(), threading.Event()

    def sleep_unless_crashed(seconds: float) -> None:
        # A crashed leader does nothing at all: no refresh, no revoke, no step-down.
        if crashed.is_set():
            thawed.wait(30.0)
        else:
            time.sleep(seconds)

    deposed: list[str] = []
    a = Election(client, LEADER_KEY, "a", ttl_s=ttl, sleep=sleep_unless_crashed, on_deposed=deposed.append)
    b = Election(client, LEADER_KEY, "b", ttl_s=ttl)
    try:
        a.start()
        assert a.wait_elected(5.0)
        b.start()
        time.sleep(ttl / 2)
        assert a.is_leader and not b.is_leader
        assert b.leader() == "a"
        token_a = a.fencing_token
        assert token_a is not None
        assert a.fenced_txn([ops.put("/test/fenced", "from a")])

        crashed.set()
        crashed_at = time.monotonic()
        assert b.wait_elected(ttl + 3.0), "b did not take over"
        takeover = time.monotonic() - crashed_at
        assert takeover < ttl + 1.5, f"takeover took {takeover:.2f}s"
        assert b.leader() == "b"
        assert b.fencing_token is not None and b.fencing_token > token_a

        # `a`'s own clock deposed it before `b` could win, and its old token is refused.
        assert not a.is_leader
        assert not a.fenced_txn([ops.put("/test/fenced", "stale")])
        assert not _fenced_put_with_token(client, token_a, "a")
        assert b.fenced_txn([ops.put("/test/fenced", "from b")])
        assert client.get("/test/fenced")[0] == b"from b"

        thawed.set()  # `a` wakes up, finds its lease gone and reports it
        wait_until(lambda: bool(deposed), 3.0, "the leader to be deposed", 0.02)
    finally:
        thawed.set()
        b.resign()
        a.resign()
    assert client.get(LEADER_KEY) is None


def test_a_deposed_leader_fenced_txn_fails_and_marks_it_lost(client: StoreClient) -> None:
    deposed: list[str] = []
    # A long TTL keeps the keepalive thread (first turn after ttl/3) from noticing first.
    a = Election(client, LEADER_KEY, "a", ttl_s=6.0, on_deposed=deposed.append)
    try:
        assert a.campaign()
        # The key is taken from under `a` (an operator, or a lease lost during a partition
        # while `a` still thinks it leads): its next fenced write must fail.
        client.delete(LEADER_KEY)
        client.put(LEADER_KEY, "usurper")
        assert not a.fenced_txn([ops.put("/test/fenced", "stale")])
        assert not a.is_leader and a.fencing_token is None
        assert len(deposed) == 1 and "fence failed" in deposed[0]
        assert client.get("/test/fenced") is None or client.get("/test/fenced")[0] != b"stale"
    finally:
        a.resign()
        client.delete(LEADER_KEY)


def test_a_poisoned_marker_fails_every_later_copy_of_its_txn_and_dies_with_the_term(client: StoreClient) -> None:
    """What the writer does with a txn whose answer was lost (master/writer.py): its marker,
    written on the term's lease, fails the txn's every copy from then on; once the term's
    lease is gone, poisoning answers False (the fence holds then) and the marker is gone."""
    a = Election(client, LEADER_KEY, "a", ttl_s=6.0)
    marker = "/minborg-txns/test/a/x/0"
    try:
        assert a.campaign()
        lease_id = a.lease_id
        assert lease_id is not None
        guarded = [ops.create_revision(marker, "==", 0)]
        assert a.fenced_commit([ops.put("/test/poisoned", "first")], guarded) is not None
        assert a.poison(marker, lease_id) is True
        assert a.poison(marker, lease_id) is True  # repeatable
        assert a.fenced_commit([ops.put("/test/poisoned", "late copy")], guarded) is None
        assert client.get("/test/poisoned")[0] == b"first"
        assert a.is_leader, "a failed marker compare is not a lost fence"
    finally:
        a.resign()
    assert client.get(marker) is None, "the marker outlived its term's lease"
    assert a.poison(marker, lease_id) is False
    assert client.get(marker) is None
    client.delete("/test/poisoned")


def test_a_leader_cut_off_from_etcd_steps_down_within_its_ttl(
    cluster: EtcdCluster, client: StoreClient
) -> None:
    ttl = 2.0
    deposed = threading.Event()
    a = Election(client, LEADER_KEY, "a", ttl_s=ttl, on_deposed=lambda _r: deposed.set())
    try:
        assert a.campaign()
        time.sleep(a.interval_s * 1.5)  # let one refresh succeed
        # Every member hangs: requests connect but get no answer, as in a partition.
        for i in range(3):
            cluster.pause_member(i)
        cut_at = time.monotonic()
        wait_until(lambda: not a.is_leader, ttl + 0.1, "a to lose its lease", 0.02)
        assert time.monotonic() - cut_at <= ttl
        assert deposed.wait(1.5), "on_deposed came late"
    finally:
        for i in range(3):
            cluster.resume_member(i)
        cluster.wait_healthy(15.0)
        a.resign()
        client.delete(LEADER_KEY)


def test_losing_the_raft_leader_of_three_keeps_reads_and_writes_working(cluster: EtcdCluster) -> None:
    leader = cluster.leader_index()
    assert leader is not None
    # The client's first endpoint is the member that dies, so it must fail over. A write sent
    # to a follower that has not yet noticed the death is forwarded to the dead leader and
    # hangs until etcd's request timeout (7 s); the client's shorter timeout moves it on to
    # the next member, which by then has a new leader (election: 1-2 s).
    urls = cluster.client_urls
    client = StoreClient(urls[leader:] + urls[:leader], timeout=3.0, tls=cluster.client_tls)
    cluster.kill_member(leader)
    killed_at = time.monotonic()
    try:
        for i in range(5):
            client.put(f"/test/minority/{i}", str(i))
        assert time.monotonic() - killed_at < 6.5
        items, _ = client.get_prefix("/test/minority/")
        assert len(items) == 5
        assert client.txn([ops.create_revision("/test/minority/x", "==", 0)], [ops.put("/test/minority/x", "1")])[0]
    finally:
        client.close()
        cluster.restart_member(leader)
    assert cluster.is_healthy(leader)


def _hold_the_interpreter(seconds: int) -> None:
    """Hold this process's GIL for `seconds`, asleep: libc's sleep called through `ctypes.PyDLL`,
    which keeps the GIL for the whole call (a master stuck in a call, using no CPU)."""
    ctypes.PyDLL(None).sleep(seconds)


def _hold_the_interpreter_busy(seconds: float) -> None:
    """Hold this process's GIL for about `seconds` while using the CPU, as a long call into C code
    does on a busy master: `sum` over a range runs in C without returning to the interpreter."""
    n = 2_000_000
    started = time.perf_counter()
    sum(range(n))
    per_item = (time.perf_counter() - started) / n
    sum(range(int(seconds / per_item)))


@pytest.mark.parametrize("in_process", [False, True], ids=["thread", "process"])
def test_a_leader_whose_threads_are_starved_keeps_its_lease_only_when_refreshed_from_its_own_process(
    client: StoreClient, in_process: bool
) -> None:
    deposed: list[str] = []
    a = Election(client, LEADER_KEY, "a", ttl_s=2.0, on_deposed=deposed.append, refresh_in_process=in_process)
    try:
        assert a.campaign()
        token = a.fencing_token
        time.sleep(a.interval_s * 1.5)
        _hold_the_interpreter_busy(3.5)  # longer than the TTL
        time.sleep(0.2)  # the election thread's next turn
        if in_process:
            assert a.is_leader and a.fencing_token == token and deposed == []
            assert a.fenced_txn([ops.put("/test/fenced", "kept")])
        else:
            wait_until(lambda: deposed != [], 2.0, "the thread-refreshed leader to step down", 0.05)
            assert not a.is_leader and "not refreshed" in deposed[0]
    finally:
        a.resign()
        client.delete(LEADER_KEY)
        client.delete("/test/fenced")


def test_a_candidate_campaigns_only_once_its_refresher_process_runs(client: StoreClient) -> None:
    """A keeper still starting (here: stopped before it could) must not leave a won term to
    lapse: the campaign waits for it, and the term it then wins is kept."""
    import signal

    deposed: list[str] = []
    a = Election(client, LEADER_KEY, "a", ttl_s=2.0, on_deposed=deposed.append, refresh_in_process=True)
    keeper_pid = a.refresher_pid
    assert keeper_pid is not None
    os.kill(keeper_pid, signal.SIGSTOP)  # a new interpreter takes far longer than this to get going
    won: list[bool] = []
    campaign = threading.Thread(target=lambda: won.append(a.campaign()), daemon=True)
    try:
        campaign.start()
        campaign.join(a.ttl_s + 0.5)
        assert campaign.is_alive() and client.get(LEADER_KEY) is None  # waiting for its keeper
        os.kill(keeper_pid, signal.SIGCONT)
        campaign.join(30)
        assert won == [True]
        token = a.fencing_token
        time.sleep(2 * a.ttl_s)
        assert a.is_leader and a.fencing_token == token and deposed == []
    finally:
        os.kill(keeper_pid, signal.SIGCONT)
        campaign.join(30)
        a.resign()
        client.delete(LEADER_KEY)


def test_a_stuck_leader_loses_its_lease_though_its_refresher_process_lives(client: StoreClient) -> None:
    deposed: list[str] = []
    a = Election(client, LEADER_KEY, "a", ttl_s=2.0, on_deposed=deposed.append, refresh_in_process=True, hung_s=1.0)
    keeper_pid = a.refresher_pid
    try:
        assert a.campaign()
        time.sleep(a.interval_s * 1.5)
        _hold_the_interpreter(5)  # past hung_s, then past the lease's TTL in etcd
        # etcd dropped the key with the lease: another candidate can win at once.
        assert client.get(LEADER_KEY) is None
        wait_until(lambda: deposed != [], 2.0, "the stuck leader to step down", 0.05)
        assert not a.is_leader
    finally:
        a.resign()
        client.delete(LEADER_KEY)
    assert keeper_pid is not None and not _alive(keeper_pid)


@pytest.mark.skipif(
    not os.path.exists("/proc/self/autogroup") or os.geteuid() != 0,
    reason="the kernel has no autogroups here, or lowering a nice value needs root",
)
def test_etcd_members_weigh_as_much_as_the_masters(tmp_path: Path) -> None:
    c = EtcdCluster(tmp_path, members=1).start()
    try:
        pids = [p for p in c.pids() if p is not None]
        assert pids and all(cpuweight.session_nice(p) == cpuweight.CONTROL_PLANE_NICE for p in pids)
    finally:
        c.stop()


def test_stop_leaves_no_process_and_another_process_can_stop_it(tmp_path: Path) -> None:
    c = EtcdCluster(tmp_path, members=1).start()
    pids = [p for p in c.pids() if p is not None]
    assert pids and all(psutil.pid_exists(p) for p in pids)
    # Stopped from another process, as a launcher's `cell down` would.
    stopper = f"from reference.store.etcd_cluster import EtcdCluster; EtcdCluster.load({str(tmp_path)!r}).stop()"
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    subprocess.run([sys.executable, "-c", stopper], check=True, timeout=30, env=env)
    wait_until(lambda: not any(_alive(p) for p in pids), 5.0, "the members to exit", 0.02)
    c.stop()  # reaps the children this process started
    assert not any(_alive(p) for p in pids)


def test_module_cluster_stops_cleanly(cluster: EtcdCluster) -> None:
    # Last in the file: stop the shared cluster and check every member is gone.
    pids = [p for p in cluster.pids() if p is not None]
    assert len(pids) == 3
    cluster.stop()
    assert not any(_alive(p) for p in pids)
    assert cluster.pids() == [None, None, None]


def _alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def _fenced_put_with_token(client: StoreClient, token: int, name: str) -> bool:
    succeeded, _ = client.txn(
        [ops.create_revision(LEADER_KEY, "==", token), ops.value(LEADER_KEY, "==", name)],
        [ops.put("/test/fenced", f"from {name}")],
    )
    return succeeded

