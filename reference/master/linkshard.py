"""A replica's link shard: polls its share of the borglets, sends the leader only what changed, and relays the leader's syncs.

Every replica, leader or follower, runs one (Borg section 3.4). Each round it works out its
share (`shards.assign` over the live replicas the watch cache lists, so every replica agrees
and a replica that dies loses its share when its registration lease ends), reads the state
of each machine in it (`GET /v1/state`), keeps the last report it sent the leader for each,
and sends the leader, in batches, only the differences, plus the machines that did not
answer and how many polls in a row they have missed. Polling and sending are apart: the
shard's sender thread sends what changed since its last batch whenever the leader has taken
that one, so a leader slow to apply a batch delays the news, never the polls (a machine polled
twice meanwhile is sent once, its latest report). The leader acts on a difference only
when it holds the report it is based on; otherwise it asks for the whole report, which the
next round sends. A new leader, a machine new to the share, a machine that missed a poll and
a batch that did not arrive all start again from a whole report.

A shard that cannot reach a machine does not decide it is down: it tells the leader its misses
(and a borglet's refusal, with its reason: an answer all the same), the leader hands the machine
to every replica (the `poll` of its answer: machines to poll beyond the share) and declares it
down only when none of them reaches it (reach.py). The shard sends a heartbeat every interval
even with nothing new, so the leader knows which replicas still vouch for what they last said.

A shard decides nothing: what a borglet runs comes from the leader's syncs, fenced by the
leader's epoch and ordered by its sequence numbers; the shard owning a machine carries them
(`relay`). The borglet's answer to a sync is its state: the shard takes it as the machine's
latest read (a read begun before it is older, and dropped) and reports it like any change,
and hands the leader back the fence of the sync applied. A borglet's state thus reaches the
leader once per change, by the shard's batches.

The time between two polls of a machine is recorded, so the cell can show its polling
interval (Borg's SLO: 95th percentile under 10 s).

This module is the shell: the threads, the lock, the clock, the sends. What each read, sync
answer and leader's answer does to a machine's record is `shardbook`'s (pure); how a borglet is
read and routed to is `borgletreads`'; the leader's side, relaying its syncs through the
owner's shard, is `shardrelay`'s. The names other modules take from here are re-exported.
"""

from __future__ import annotations

import logging
import math
import os
import threading
import time
from collections import deque
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any
from urllib.parse import urlsplit

from reference import channel, fastjson
from reference.channel import replica_peer
from reference.master import shardbook
from reference.master.borgletreads import ROUTES_ENV, KeptAlive, Refused, Routes
from reference.master.cache import WatchCache
from reference.master.shardbook import Polled
from reference.master.shardrelay import RELAY_PATH, REPORTS_PATH, ShardRelay

# Taken from here by the replica, its API and the tests; each has its home in the module named.
__all__ = [
    "CHUNK", "GAPS_KEPT", "RELAY_PATH", "REPORTS_PATH", "ROUTES_ENV", "Batch", "KeptAlive", "LinkShard", "Refused",
    "SendBatch", "ShardRelay", "replica_peer",
]  # fmt: skip

log = logging.getLogger(__name__)

CHUNK = 256  # machines polled between two batches sent to the leader
GAPS_KEPT = 20_000  # polling intervals kept for the percentiles


Batch = dict[str, Any]
# Sends a batch to the leader; returns its answer ({"need_full": [machine, ...]}) or None
# when it did not arrive.
SendBatch = Callable[[Batch], "dict[str, Any] | None"]


class LinkShard:
    def __init__(
        self,
        cache: WatchCache,
        *,
        name: str,
        send: SendBatch,
        interval: float = 1.0,
        workers: int = 16,
        clock: Callable[[], float] = time.monotonic,
        key: bytes | None = None,
    ) -> None:
        self.cache = cache
        self.name = name
        self.key = key  # the cell's channel key: every request to a borglet is signed
        self.send = send
        self.interval = interval
        self.clock = clock
        self._pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix=f"shard-{name}")
        self._relay_pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix=f"relay-{name}")
        self._reads = KeptAlive(max(0.5, min(interval, 2.0)))
        self._machines: dict[str, Polled] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="link-shard", daemon=True)
        self._sender = threading.Thread(target=self._send_loop, name="link-shard-send", daemon=True)
        self._news = threading.Event()
        # Machines the leader handed this shard beyond its own share, because their owner
        # cannot reach them (reach.py): name -> borglet address, as of the leader's last answer.
        self._extra: dict[str, str] = {}
        self._routes = Routes(name, os.environ.get(ROUTES_ENV, ""))
        # Machines whose borglet the leader asks to stand down (shardreports._stand_downs), as
        # of its last answer: each read of them carries channel.STAND_DOWN_HEADER.
        self._stand_down: frozenset[str] = frozenset()
        self._sent_at = -math.inf  # when the leader last took a batch (a heartbeat, if empty)
        self._leader = ""
        self._term = 0  # the leader key's revision when _leader was read (Cell.leader_revision)
        self.gaps: deque[float] = deque(maxlen=GAPS_KEPT)
        self.rounds = 0
        self.polls = 0  # machine polls made, answered or not: what a poll's cost is counted per
        self.sent = {
            "batches": 0,
            "whole": 0,
            "changes": 0,
            "unchanged": 0,
            "entries": 0,
            "failed": 0,
        }

    def start(self) -> None:
        self._thread.start()
        self._sender.start()

    def stop(self) -> None:
        self._stop.set()
        self._news.set()
        for thread in (self._thread, self._sender):
            if thread.is_alive() and thread is not threading.current_thread():
                thread.join(5)
        self._pool.shutdown(wait=False, cancel_futures=True)
        self._relay_pool.shutdown(wait=False, cancel_futures=True)

    # --- the share ---------------------------------------------------------------------------------

    def members(self) -> list[str]:
        """The replicas the machines are shared among: the live ones the cache lists (this one
        counts itself from its start, before its registration shows)."""
        return shardbook.members(self.cache.cell().replicas, self.name)

    def share(self) -> dict[str, str]:
        """The machines this replica polls: name -> borglet address."""
        cell = self.cache.cell()
        with self._lock:
            extra = dict(self._extra)
        return shardbook.share(cell, self.name, extra)

    # --- the loop ----------------------------------------------------------------------------------

    def _run(self) -> None:
        while not self._stop.is_set():
            began = self.clock()
            try:
                self.round()
            except Exception:  # one bad round must not end the polling
                log.exception("link shard round failed")
            self._stop.wait(max(0.0, self.interval - (self.clock() - began)))

    def round(self) -> None:
        """Poll every machine of the share once; the sender takes what changed as it comes."""
        cell = self.cache.cell()
        leader, term = cell.leader.partition("=")[0], cell.leader_revision
        share = self.share()
        with self._lock:
            if (leader, term) != (self._leader, self._term):
                self._leader, self._term = leader, term
                shardbook.new_term(self._machines.values())
            for gone in set(self._machines) - set(share):
                del self._machines[gone]
            for m in share:
                self._machines.setdefault(m, Polled())
        names = sorted(share)
        self._routes.refresh()
        for i in range(0, len(names), CHUNK):
            if self._stop.is_set():
                return
            chunk = names[i : i + CHUNK]
            self._record(list(self._pool.map(lambda m: self._poll(m, share[m]), chunk)))
            self._news.set()
        self.rounds += 1

    def _poll(self, machine: str, address: str) -> tuple[str, int, dict[str, Any] | Refused | None]:
        """Read `machine`'s state; with the count of sync answers taken for it before the read."""
        with self._lock:
            p = self._machines.get(machine)
            synced = p.synced if p is not None else 0
        try:
            return machine, synced, self._read(machine, address)
        except Exception as err:  # one machine's reply must not end the round for the others: its miss
            log.warning("read of %s failed: %r", machine, err)
            return machine, synced, None

    def _read(self, machine: str, address: str) -> dict[str, Any] | Refused | None:
        url = f"{self._routes.route(address).rstrip('/')}/v1/state"
        headers = None
        if self.key is not None:
            headers = channel.sign(self.key, "GET", urlsplit(url).path.encode(), b"", machine, time.time())
            if machine in self._stand_down:
                headers[channel.STAND_DOWN_HEADER] = "1"
        return self._reads.get_json(url, headers)

    def _record(self, replies: list[tuple[str, int, dict[str, Any] | Refused | None]]) -> None:
        """Take a chunk's reads: (machine, sync answers taken before the read, what it said)."""
        now = self.clock()
        with self._lock:
            self.polls += len(replies)
            for m, synced, reply in replies:
                p = self._machines.get(m)
                if p is None:
                    continue
                if p.polled_at is not None:
                    self.gaps.append(now - p.polled_at)
                p.polled_at = now
                if p.synced != synced:
                    continue  # a sync's answer came meanwhile: newer than this read, and an answer
                shardbook.take_read(p, reply)

    def _send_loop(self) -> None:
        while not self._stop.is_set():
            self._news.wait(min(1.0, self.interval))
            self._news.clear()
            try:
                self.flush()
                if self.clock() - self._sent_at >= self.interval:
                    self.heartbeat()
            except Exception:  # one bad batch must not end the sending
                log.exception("link shard batch failed")

    def heartbeat(self) -> bool:
        """Tell the leader this shard is there even with nothing new: a shard it hears from
        vouches for the machines it last said answered (reach.py), and the answer names the
        machines handed to it. Whether the leader took it."""
        return self._deliver(self._batch(), heartbeat=True)

    def flush(self) -> int:
        """Send the leader everything that changed, batch by batch, until nothing is left or a
        batch does not arrive; returns the batches sent."""
        sent = 0
        while not self._stop.is_set() and self._deliver(self._batch()):
            sent += 1
        return sent

    def _batch(self, limit: int = 4 * CHUNK) -> Batch:
        """What changed since the last batch, for at most `limit` machines."""
        with self._lock:
            reports, missed, refused = shardbook.batch_entries(self._machines, self.sent, limit)
        batch: Batch = {"shard": self.name, "leader": self._leader, "reports": reports, "missed": missed}
        if refused:
            batch["refused"] = refused
        return batch

    def _deliver(self, batch: Batch, heartbeat: bool = False) -> bool:
        """Send one batch; whether there was anything to send (a heartbeat: whether it arrived)."""
        if not batch["reports"] and not batch["missed"] and not batch.get("refused") and not heartbeat:
            return False
        answer = self.send(batch)
        with self._lock:
            self.sent["batches"] += 1
            if answer is None:
                # Whether the leader applied it is unknown: start these machines again whole.
                self.sent["failed"] += 1
                shardbook.whole_again(self._machines, (*batch["reports"], *batch["missed"], *(batch.get("refused") or ())))
                return False  # the next news (or a second) tries again
            self._sent_at = self.clock()
            if isinstance(answer.get("poll"), dict):
                self._extra = {str(m): str(a) for m, a in answer["poll"].items()}
            stand_down = answer.get("stand_down")
            self._stand_down = frozenset(map(str, stand_down)) if isinstance(stand_down, list) else frozenset()
            shardbook.whole_again(self._machines, answer.get("need_full") or [])
        return True

    # --- relaying the leader's syncs -----------------------------------------------------------

    def relay(self, items: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """Send each {"machine", "address", "body"} to its borglet's /v1/sync, at once; each
        answer is {"machine", "status", "body"}, status 0 when the borglet did not answer.

        A borglet's answer to a sync is its state, as a poll reads it: for a machine this shard
        polls it is taken as the machine's latest read and reaches the leader in the next
        batch, once, like any change; the leader is handed back only the fence of the sync
        applied. A machine the shard does not poll (removed from the cell, or relayed for an
        owner the leader cannot reach) is answered whole."""
        out = [self._took(answer) for answer in self._relay_pool.map(self._relay_one, items)]
        self._news.set()  # once a request: its answers go to the leader in one batch, not one each
        return out

    def _took(self, answer: dict[str, Any]) -> dict[str, Any]:
        """Take a 200's state as the machine's latest read, when the shard polls it; what the
        leader is handed back."""
        body = answer.get("body")
        if answer.get("status") != 200 or not isinstance(body, dict):
            return answer
        with self._lock:
            p = self._machines.get(str(answer.get("machine")))
            if p is None:
                return answer
            shardbook.take_sync(p, body)
        return {**answer, "body": {"fence": body.get("fence"), "epoch": body.get("epoch")}}

    def _relay_one(self, item: dict[str, Any]) -> dict[str, Any]:
        machine, address = str(item.get("machine", "")), str(item.get("address", ""))
        url = f"{self._routes.route(address).rstrip('/')}/v1/sync"
        try:
            answer = self._reads.post_json(url, fastjson.dumps(item.get("body")), self.key, machine)
        except (OSError, ValueError) as err:
            return {"machine": machine, "status": 0, "error": str(err) or type(err).__name__}
        try:
            got: Any = fastjson.loads(answer.body)
        except ValueError:
            got = {"error": answer.body[:200].decode("utf-8", "replace")}
        if isinstance(got, dict) and (skew := answer.headers.get(channel.SKEW_HEADER.lower())) is not None:
            try:
                got["channel_skew_s"] = float(skew)  # as a poll's read shows it (KeptAlive.get_json)
            except ValueError:
                pass
        return {"machine": machine, "status": answer.status, "body": got}

    # --- what it shows -------------------------------------------------------------------------

    def stats(self) -> dict[str, Any]:
        """Polling intervals (seconds between two polls of a machine) over the last
        `GAPS_KEPT` polls, the share's size and what was sent."""
        with self._lock:
            gaps = sorted(self.gaps)
            share = len(self._machines)
            sent = dict(self.sent)
            polls = self.polls
            handed = sorted(self._extra)
        return {
            "replica": self.name,
            "machines": share,
            "handed_over": handed,  # machines polled for a replica that cannot reach them (reach.py)
            "rounds": self.rounds,
            "polls": polls,
            "poll_interval_s": shardbook.percentiles(gaps),
            "sent": sent,
            "not_modified": self._reads.not_modified,
            "connects": self._reads.connects,
        }


