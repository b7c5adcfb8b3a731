"""One master replica: its etcd client, watch cache, election, writer, metrics and the leader's term."""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass
from typing import Any

import httpx

from reference import channel
from reference.master import codec, freshness
from reference.master.cache import WatchCache
from reference.master.leader import LeaderConfig, Term
from reference.master.linkshard import REPORTS_PATH, LinkShard, ShardRelay, replica_peer
from reference.master.metrics import MasterMetrics
from reference.master.rollout import Ready
from reference.master.writer import MAX_OPS_PER_TXN, Writer
from reference.store import ops
from reference.store.client import Lease, StoreClient, StoreError
from reference.store.election import Election
from reference.store.tls import StoreTLS

log = logging.getLogger(__name__)

REGISTRATION_TTL_S = 5


@dataclass(frozen=True)
class LeaderRef:
    name: str
    url: str


def parse_leader_value(value: str) -> LeaderRef | None:
    """The leader key holds "name=url"."""
    name, sep, url = value.partition("=")
    return LeaderRef(name, url) if sep and name else None


def named_leader(value: str, *, self_name: str, self_leads: bool, fresh: bool) -> LeaderRef | None:
    """The leader a replica may name from its watch cache's leader key, or None until known.

    Known means: the cache is within its staleness bound, and a key that names this replica
    is backed by this replica's own live lease. A key naming this replica while it does not
    lead was left by an earlier process of the same name (etcd keeps a dead holder's lease
    for up to a TTL, and renews every lease when it restarts) or by a term that just ended.
    """
    ref = parse_leader_value(value)
    if ref is None or not fresh:
        return None
    if ref.name == self_name and not self_leads:
        return None
    return ref


class Replica:
    def __init__(
        self,
        *,
        name: str,
        url: str,
        etcd: list[str],
        config: LeaderConfig,
        lease_ttl: float = 2.0,
        peers: dict[str, str] | None = None,
        max_staleness: float = freshness.DEFAULT_MAX_STALENESS_S,
        max_txn_ops: int = MAX_OPS_PER_TXN,
        etcd_tls: StoreTLS | None = None,
    ) -> None:
        self.name = name
        self.url = url
        self.config = config
        self.peers = dict(peers or {})
        self.keys = codec.Keys(config.cell_name)
        self.client = StoreClient(etcd, timeout=2.0, tls=etcd_tls)
        self.max_staleness = max_staleness
        # Leave a silent member half a second before reads would be refused, so a hung
        # member costs a reconnect rather than a window of 503s (never above the watch's 5 s).
        self.cache = WatchCache(self.client, self.keys, idle_timeout=min(5.0, max(1.5, max_staleness - 0.5)))
        self.metrics = MasterMetrics(self.cache.cell)
        self.election = Election(
            self.client,
            self.keys.leader,
            f"{name}={url}",
            ttl_s=lease_ttl,
            on_elected=self._elected,
            on_deposed=self._deposed,
            refresh_in_process=True,
        )
        self.writer = Writer(
            self.cache, self.election, self.keys, on_txn=self.metrics.on_txn, max_ops=max_txn_ops
        )
        self._term: Term | None = None
        self._term_lock = threading.Lock()
        self._stop = threading.Event()
        self._campaigning = threading.Lock()
        self._registration = threading.Thread(target=self._register, name="register", daemon=True)
        self._leader_http = httpx.Client(
            timeout=httpx.Timeout(30.0, connect=1.0), auth=channel.client_auth(config.channel_key),
            verify=channel.peer_verify(),
        )
        # Every replica's link shard polls its share of the borglets; the leader's syncs go
        # through them (`relay`).
        self.shard = LinkShard(
            self.cache, name=name, send=self._send_batch, interval=config.poll_interval, key=config.channel_key
        )
        self.relay = ShardRelay(self.shard)

    # --- lifecycle -------------------------------------------------------------------------------

    def start(self) -> None:
        self.cache.start()
        self._clear_predecessor()
        self.cache.on_change(self._changed)
        self.election.start()
        self._registration.start()
        self.shard.start()

    def stop(self) -> None:
        self._stop.set()
        try:
            self.election.resign()
        except StoreError as err:
            log.info("resign failed: %s", err)
        with self._term_lock:
            if self._term is not None:
                self._term.stop()
                self._term = None
        self.shard.stop()
        self.relay.close()
        self._leader_http.close()
        self.cache.stop()
        self.client.close()

    # --- leadership ------------------------------------------------------------------------------

    @property
    def is_leader(self) -> bool:
        return self.election.is_leader

    @property
    def term(self) -> Term | None:
        return self._term

    def ready_word(self) -> Ready | None:
        """The borglets' word on which tasks have run MIN_READY_S (rollout.Ready), while this
        replica leads: what its rollouts decide on, so its views show the same. None on a follower."""
        term = self._term
        return term.poller.ready if term is not None else None

    def leader(self) -> LeaderRef | None:
        return parse_leader_value(self.cache.cell().leader)

    def named_leader(self) -> LeaderRef | None:
        """The leader /v1/cell names: `named_leader` over this replica's cache and election."""
        fresh = freshness.too_old(self.cache_age(), self.max_staleness) is None
        return named_leader(self.cache.cell().leader, self_name=self.name, self_leads=self.is_leader, fresh=fresh)

    def cache_age(self) -> float:
        """Seconds since this replica's watch cache last heard from etcd."""
        return freshness.cache_age(self.cache.clock(), self.cache.heard_at)

    def _clear_predecessor(self) -> None:
        """Delete a leader key that names this replica before this process has campaigned.

        Names are unique in a cell, so the key is a dead predecessor's (a restart within its
        lease). Deleted, guarded on its create_revision, the cell elects at once instead of
        waiting out that lease; if the delete fails the lease still expires on its own."""
        try:
            kv = self.client.get_kv(self.keys.leader)
            ref = parse_leader_value(kv.value.decode()) if kv is not None else None
            if kv is None or ref is None or ref.name != self.name:
                return
            done, _ = self.client.txn(
                [ops.create_revision(self.keys.leader, "==", kv.create_revision)], [ops.delete(self.keys.leader)]
            )
            if done:
                log.info("%s removed the leader key its predecessor left (epoch %d)", self.name, kv.create_revision)
        except StoreError as err:
            log.info("could not check for a predecessor's leader key: %s", err)

    def _elected(self, token: int) -> None:
        log.info("%s leads the cell (epoch %d)", self.name, token)
        with self._term_lock:
            if self._term is not None:
                self._term.stop()
            self._term = Term(
                token,
                self.cache,
                self.writer,
                self.config,
                on_pass=self.metrics.on_pass,
                on_poll=self.metrics.on_poll,
                link=self.relay,
                scheduler_leased=self._scheduler_leased,
            )
            self._term.start()
        self.metrics.leader.set(1)

    def _scheduler_leased(self) -> bool:
        """Whether a scheduler process holds the cell's scheduler lease now (its key stands
        only while the lease it was written with is alive)."""
        return self.client.get(self.keys.scheduler) is not None

    def _deposed(self, reason: str) -> None:
        log.warning("%s no longer leads: %s", self.name, reason)
        self.metrics.leader.set(0)
        with self._term_lock:
            term, self._term = self._term, None
        if term is not None:
            term.stop()

    def _changed(self, revision: int) -> None:
        term = self._term
        if term is not None:
            term.nudge()
        elif not self.cache.cell().leader and not self._stop.is_set():
            # The leader key is gone (its lease expired or was revoked): campaign now rather
            # than at the election thread's next turn, which shortens failover by up to ttl/3.
            threading.Thread(target=self._campaign_now, name="campaign", daemon=True).start()

    def _campaign_now(self) -> None:
        if not self._campaigning.acquire(blocking=False):
            return
        try:
            self.election.campaign()
        except StoreError as err:
            log.info("campaign failed: %s", err)
        finally:
            self._campaigning.release()

    # --- the link shard's reports ------------------------------------------------------------------

    def _send_batch(self, batch: dict[str, Any]) -> dict[str, Any] | None:
        """Hand a batch of this replica's shard to the leader: in process when this replica
        leads, else over HTTP. None when it did not arrive."""
        term = self._term
        if term is not None and self.is_leader:
            return term.poller.accept(batch)
        leader = self.leader()
        if leader is None or leader.name == self.name:
            return None
        try:
            response = self._leader_http.post(
                f"{leader.url.rstrip('/')}{REPORTS_PATH}", json=batch, headers=channel.to_machine(replica_peer(leader.name))
            )
            answer = response.json() if response.status_code == 200 else None
        except (httpx.HTTPError, ValueError) as err:
            log.debug("batch to %s failed: %s", leader.name, err)
            return None
        return answer if isinstance(answer, dict) else None

    def accept_batch(self, batch: dict[str, Any]) -> dict[str, Any] | None:
        """A shard's batch, on the leader; None when this replica does not lead."""
        term = self._term
        if term is None or not self.is_leader:
            return None
        return term.poller.accept(batch)

    # --- membership --------------------------------------------------------------------------------

    def _register(self) -> None:
        """Keep replicas/<name> on a lease of our own, so /v1/cell lists the live replicas."""
        lease: Lease | None = None
        doc = codec.dumps({"schema": codec.SCHEMA, "name": self.name, "url": self.url})
        while not self._stop.is_set():
            try:
                if lease is None or self.client.refresh(lease) <= 0:
                    lease = self.client.lease(REGISTRATION_TTL_S)
                    self.client.put(self.keys.replica(self.name), doc, lease)
            except StoreError as err:
                log.debug("registration: %s", err)
                lease = None
            self._stop.wait(REGISTRATION_TTL_S / 3)
        if lease is not None:
            try:
                self.client.revoke(lease)
            except StoreError:
                pass
