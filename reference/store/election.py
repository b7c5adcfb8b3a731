"""Elect one leader among candidates with a leased etcd key (the Chubby lock) and fence its writes.

The leader key holds the winner's name and is attached to the winner's lease, so it vanishes
when the winner stops refreshing. The key's create_revision is the fencing token: it is
unique to one term of one leader, and `fenced_txn` commits only while the key still has it.

Two clocks matter. etcd decides when the lease expires; the leader only knows when it last
*sent* a successful refresh. etcd restarts the TTL when it *receives* the refresh, which is
later, so "last successful refresh sent + ttl" on the local monotonic clock is a moment at
which the lease is surely still alive. `is_leader` turns false at that moment even if the
keepalive thread is stuck in a request: a leader cut off from etcd stops believing it leads
before any other candidate can win. Writes do not rely on this: they are fenced in etcd.

Choosing the TTL: while etcd itself elects a new Raft leader (1 to 2 election timeouts)
no refresh succeeds, so the lease must outlast the last refresh before etcd's election plus
that election. With our clusters' 500 ms election timeout (0.6 s median, 0.8 s worst in
trials) and a retry 0.1 s after each failed refresh, a 2 s lease rides through; with
etcd's 1000 ms it sometimes does not (docs/decisions.md). Failover after a master crash
takes about ttl_s - ttl_s/6 (the lease's age at the crash is half a refresh interval on
average), plus up to 0.5 s for etcd to notice the expiry, plus one campaign.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Callable, Sequence

from reference.store import ops
from reference.store.client import Lease, StoreClient, StoreError, StoreOutcomeUnknown
from reference.store.keeper import EXPIRED, LOST, LeaseKeeper, Term

log = logging.getLogger(__name__)

# Pause between refresh attempts after one failed (an etcd election lasts about one election
# timeout: several tries fit in it, each bounded by the keepalive client's short timeouts).
RETRY_S = 0.1
# With the lease refreshed from a process of its own, how long the parent may show no sign of
# life before the refreshes stop: longer than any stall of a busy master seen in the overload
# bench, short enough that a stuck one is replaced (docs/decisions.md).
HUNG_S = 15.0
# How long the lease-keeping process waits for one endpoint's answer to a refresh, at least.
# etcd's leader answers a lease renewal only once it has applied every entry it committed
# (waiting up to a second), so while it applies a burst of large transactions a renewal
# takes hundreds of milliseconds. With a quarter of a second, a 3-replica leader lost its
# lease in the middle of a 10,000-task job's start although etcd was up (docs/decisions.md).
# Safety does not rest on it: the lease counts from when a refresh was sent, and the master
# steps down at that deadline whatever its keeper is still waiting for.
MIN_REFRESH_WAIT_S = 1.0
# A candidate refreshed from a keeping process campaigns only once that process runs: spawned
# with the candidate, it imports for seconds while a hundred borglets start beside it, and a
# term won before it ran lapsed unrefreshed 2 s later (docs/decisions.md). Bounded, so a
# keeper that never starts leaves the candidate trying again on its next turn.
KEEPER_READY_WAIT_S = 30.0


class Election:
    """One candidate in the election for `key`.

    `campaign()` makes one attempt; `start()` campaigns in the background until elected and
    again whenever deposed. While leader, a thread refreshes the lease every ttl/3 and checks
    that the key is still ours. `on_elected(token)` and `on_deposed(reason)` are called from
    that thread (or the caller's, for `campaign`, `fenced_txn` and `resign`), once per term.
    """

    def __init__(
        self,
        client: StoreClient,
        key: str,
        candidate_name: str,
        ttl_s: float = 2.0,
        *,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] | None = None,
        on_elected: Callable[[int], None] | None = None,
        on_deposed: Callable[[str], None] | None = None,
        refresh_in_process: bool = False,
        hung_s: float = HUNG_S,
    ) -> None:
        if not candidate_name:
            raise ValueError("candidate_name must not be empty")
        if ttl_s <= 0:
            raise ValueError("ttl_s must be positive")
        self.client = client
        self.key = key
        self.candidate_name = candidate_name
        self.ttl_s = ttl_s
        self.interval_s = ttl_s / 3
        self.retry_s = RETRY_S
        # One keepalive turn of this thread tries every endpoint and should fit in one refresh
        # interval, so hung members cannot hold the thread (and the step-down it reports)
        # past the lease (the default client timeout is longer than a TTL). The floor avoids
        # false step-downs on a busy host.
        per_request = max(0.25, self.interval_s / len(client.endpoints))
        self._keepalive_client = StoreClient(
            client.endpoints,
            timeout=min(client.timeout, per_request),
            connect_timeout=min(client.connect_timeout, per_request),
            tls=client.tls,
        )
        self._clock = clock
        # The refresh from a child process reads CLOCK_MONOTONIC there: only the real clock agrees.
        if refresh_in_process and clock is not time.monotonic:
            raise ValueError("refresh_in_process needs the real monotonic clock")
        self._keeper = (
            LeaseKeeper(
                self._keepalive_client.endpoints, self.ttl_s, self.interval_s, self.retry_s,
                max(MIN_REFRESH_WAIT_S, per_request), hung_s, self._keepalive_client.tls,
            )
            if refresh_in_process
            else None
        )
        self._wakeup = threading.Event()
        self._sleep = sleep if sleep is not None else self._wakeup.wait
        self._on_elected = on_elected
        self._on_deposed = on_deposed
        self._lock = threading.Lock()
        self._token: int | None = None
        self._lease: Lease | None = None
        self._deadline = 0.0
        self._campaigning = False
        self._closing = threading.Event()
        self._elected = threading.Event()
        self._thread: threading.Thread | None = None

    # -- what this candidate believes -----------------------------------------------------

    @property
    def is_leader(self) -> bool:
        """Whether this candidate leads now: it won, and its lease is surely still alive."""
        with self._lock:
            return self._token is not None and self._clock() < self._deadline_of(self._token)

    @property
    def fencing_token(self) -> int | None:
        """The leader key's create_revision while this candidate leads, else None."""
        with self._lock:
            alive = self._token is not None and self._clock() < self._deadline_of(self._token)
            return self._token if alive else None

    @property
    def lease_id(self) -> int | None:
        """The lease of this candidate's term (the leader key's), while it holds one."""
        with self._lock:
            return self._lease.id if self._lease is not None else None

    def poison(self, marker: ops.Key, lease_id: int) -> bool:
        """Write `marker` on the lease `lease_id` (a term's), so that a txn requiring it absent
        fails from now on: a copy of an unanswered txn, which etcd may still commit, cannot
        commit after this returns. True once written; False where that lease is gone, and with
        it the term's leader key, so the fence already fails every copy of the term's txns.
        StoreError where etcd could not confirm the write (a put is repeatable: try again)."""
        try:
            self.client.put(marker, self.candidate_name, Lease(lease_id, 0))
        except StoreError as err:
            if "lease not found" in str(err):
                return False
            raise
        return True

    @property
    def refresher_pid(self) -> int | None:
        """The process refreshing the lease, when it is refreshed from a process of its own."""
        return self._keeper.pid if self._keeper is not None else None

    def leader(self) -> str | None:
        """The name of the current leader as etcd records it, or None if there is none."""
        found = self.client.get(self.key)
        return None if found is None else found[0].decode("utf-8")

    def wait_elected(self, timeout: float) -> bool:
        """Block until this candidate leads or `timeout` seconds pass (real time)."""
        return self._elected.wait(timeout) and self.is_leader

    # -- campaigning --------------------------------------------------------------------------

    def campaign(self) -> bool:
        """Try once to become leader; returns whether this candidate leads now."""
        if self.is_leader:
            return True
        if self._closing.is_set():
            return False
        if self._keeper is not None and not self._keeper.wait_ready(KEEPER_READY_WAIT_S, self._closing):
            log.info("%s: not campaigning: its lease keeper is not running yet", self.candidate_name)
            return False
        held = self.client.get(self.key)
        if held is not None:
            return False  # someone leads; reading is cheaper than a doomed lease and txn
        sent = self._clock()
        lease = self.client.lease(math.ceil(self.ttl_s))
        try:
            result = self.client.txn_result(
                [ops.create_revision(self.key, "==", 0)],
                [ops.put(self.key, self.candidate_name, lease.id)],
            )
            token = result.revision if result.succeeded else None
        except StoreOutcomeUnknown:
            token = self._token_if_ours(lease)
        if token is None:
            self._revoke_quietly(lease)
            return False
        with self._lock:
            self._token, self._lease, self._deadline = token, lease, sent + self.ttl_s
            if self._keeper is not None:
                self._keeper.keep(Term(lease.id, lease.ttl, self.key, token, self.candidate_name), self._deadline)
            self._elected.set()
        log.info("%s elected for %s (fencing token %d)", self.candidate_name, self.key, token)
        self._ensure_thread()
        if self._on_elected is not None:
            self._on_elected(token)
        return True

    def start(self) -> Election:
        """Campaign in a background thread until `resign()`: now, and whenever deposed."""
        self._campaigning = True
        self._ensure_thread()
        return self

    def resign(self) -> None:
        """Leave the race for good: stop campaigning and, if leading, delete the key by revoking
        the lease. The Election cannot campaign again; make a new one."""
        self._campaigning = False
        self._closing.set()
        self._wakeup.set()
        # Join first: the thread may be finishing a campaign that is about to win.
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout=self.ttl_s + 2 * self._keepalive_client.timeout)
        with self._lock:
            token = self._token
        if token is not None:
            self._step_down(token, "resigned", revoke=True)
        if self._keeper is not None:
            self._keeper.close()
        self._keepalive_client.close()

    # -- fenced writes ------------------------------------------------------------------------

    def fenced_txn(
        self,
        ops_success: Sequence[ops.Op],
        extra_compares: Sequence[ops.Compare] = (),
        ops_failure: Sequence[ops.Op] = (),
    ) -> bool:
        """Commit `ops_success` only if this candidate still holds the leader key (same
        create_revision and value) and `extra_compares` hold.

        Returns False if a compare failed; when the fence itself failed, this candidate is
        deposed (check `is_leader`). Raises `StoreOutcomeUnknown` if no answer came back.
        """
        return self.fenced_commit(ops_success, extra_compares, ops_failure) is not None

    def fenced_commit(
        self,
        ops_success: Sequence[ops.Op],
        extra_compares: Sequence[ops.Compare] = (),
        ops_failure: Sequence[ops.Op] = (),
    ) -> int | None:
        """`fenced_txn`, returning the store's revision after the commit (from the txn's own
        response header, so no second round trip), or None where a compare failed."""
        token = self.fencing_token
        if token is None:
            return None
        fence = [
            ops.create_revision(self.key, "==", token),
            ops.value(self.key, "==", self.candidate_name),
        ]
        result = self.client.txn_result(
            fence + list(extra_compares), ops_success, [ops.get(self.key), *ops_failure]
        )
        if result.succeeded:
            return result.revision
        leader_key = result.responses[0]
        if not self._holds(leader_key, token):
            self._step_down(token, "fence failed: the leader key is no longer ours", revoke=True)
        return None

    # -- the background thread ------------------------------------------------------------------

    def _ensure_thread(self) -> None:
        with self._lock:
            if self._thread is not None:
                return  # the running thread sees the new term on its next turn
            self._thread = threading.Thread(
                target=self._run, name=f"election {self.key} {self.candidate_name}", daemon=True
            )
            self._thread.start()

    def _run(self) -> None:
        if self._token is not None:
            self._sleep(self._next_wait())  # just elected: the lease is fresh
        while not self._closing.is_set():
            with self._lock:
                token = self._token
                if token is None and not self._campaigning:
                    # Elected by a manual campaign() and since deposed: nothing to do. Deciding
                    # under the lock means a new campaign() either sees no thread and starts
                    # one, or is seen by this one.
                    self._thread = None
                    return
            refreshed = True
            if token is not None and self._keeper is not None:
                self._watch_keeper(token)
            elif token is not None:
                refreshed = self._keepalive(token)
            else:
                try:
                    self.campaign()
                except StoreError as exc:
                    log.info("%s: campaign failed: %s", self.candidate_name, exc)
            self._sleep(self._next_wait(retry=not refreshed))

    def _next_wait(self, retry: bool = False) -> float:
        # Wake up no later than the local deadline so the step-down is on time. After a
        # failed refresh, try again soon: during etcd's own leader election every refresh
        # fails, and the first one after it must not wait a whole interval.
        with self._lock:
            if self._token is None:
                return self.interval_s
            every = min(self.interval_s, self.retry_s) if retry else self.interval_s
            return max(0.0, min(every, self._deadline_of(self._token) - self._clock()))

    def _keepalive(self, token: int) -> bool:
        """One refresh; returns False if etcd could not be reached (the term goes on until its deadline)."""
        with self._lock:
            lease = self._lease
        assert lease is not None
        if self._expire_if_late(token):
            return True
        sent = self._clock()
        try:
            if self._keepalive_client.refresh(lease) <= 0:
                self._step_down(token, "lease expired in etcd", revoke=False)
                return True
            kv = self._keepalive_client.get_kv(self.key)
            if not self._holds((kv,) if kv is not None else (), token):
                self._step_down(token, "the leader key is no longer ours", revoke=True)
                return True
            with self._lock:
                if self._token == token:
                    self._deadline = sent + self.ttl_s
        except StoreError as exc:
            log.warning("%s: lease refresh failed: %s", self.candidate_name, exc)
            self._expire_if_late(token)
            return False
        self._expire_if_late(token)
        return True

    def _watch_keeper(self, token: int) -> None:
        """With the refresh in a child process: tell it this process lives, and act on its verdict."""
        assert self._keeper is not None
        self._keeper.beat()
        verdict = self._keeper.verdict(token)
        if verdict == EXPIRED:
            self._step_down(token, "lease expired in etcd", revoke=False)
        elif verdict == LOST:
            self._step_down(token, "the leader key is no longer ours", revoke=True)
        else:
            self._expire_if_late(token)

    def _deadline_of(self, token: int) -> float:
        """Until when `token`'s lease is surely alive: the child's last refresh, or this thread's."""
        return self._keeper.deadline(token) if self._keeper is not None else self._deadline

    def _expire_if_late(self, token: int) -> bool:
        """Step down if the lease may have expired in etcd by now; returns whether it did."""
        with self._lock:
            late = self._token == token and self._clock() >= self._deadline_of(token)
        if late:
            self._step_down(token, f"lease not refreshed within {self.ttl_s}s", revoke=False)
        return late

    # -- helpers ---------------------------------------------------------------------------------

    def _holds(self, leader_key: tuple[ops.KeyValue, ...], token: int) -> bool:
        return (
            len(leader_key) == 1
            and leader_key[0].create_revision == token
            and leader_key[0].value == self.candidate_name.encode("utf-8")
        )

    def _token_if_ours(self, lease: Lease) -> int | None:
        """After an unanswered campaign txn: did it commit? Ours if the key is on our lease."""
        try:
            kv = self.client.get_kv(self.key)
        except StoreError:
            return None
        return kv.create_revision if kv is not None and kv.lease == lease.id else None

    def _step_down(self, token: int, reason: str, revoke: bool) -> None:
        with self._lock:
            if self._token != token:
                return  # this term already ended
            lease, self._token, self._lease = self._lease, None, None
            self._elected.clear()
            if self._keeper is not None:
                self._keeper.release(token)
        log.warning("%s deposed from %s: %s", self.candidate_name, self.key, reason)
        if revoke and lease is not None:
            # Deleting the key at once lets another candidate win without waiting a TTL.
            self._revoke_quietly(lease)
        if self._on_deposed is not None:
            self._on_deposed(reason)

    def _revoke_quietly(self, lease: Lease) -> None:
        try:
            self._keepalive_client.revoke(lease)
        except StoreError as exc:
            log.info("%s: revoking lease %d failed (it will expire): %s", self.candidate_name, lease.id, exc)
