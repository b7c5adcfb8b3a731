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
"""

from __future__ import annotations

import http.client
import json
import logging
import math
import os
import ssl
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import httpx

from reference import channel, fastjson
from reference.channel import replica_peer
from reference.master import shards
from reference.master.cache import WatchCache
from reference.master.intake import refusal_reason

log = logging.getLogger(__name__)

CHUNK = 256  # machines polled between two batches sent to the leader
# A JSON file {replica: {"host:port" of a borglet: "host:port" to reach it through}}: the
# replica named reaches those borglets through another address (a proxy in front of them).
# What the fault tests use to cut one replica's links to the borglets and no other link; read
# again whenever the file changes.
ROUTES_ENV = "MINBORG_BORGLET_ROUTES"
GAPS_KEPT = 20_000  # polling intervals kept for the percentiles


@dataclass
class _Polled:
    report: dict[str, Any] | None = None  # the last report the leader was sent, whole or as a change
    version: int = 0  # counts the reports sent for this machine; a change names its base
    misses: int = 0
    polled_at: float | None = None
    latest: dict[str, Any] | None = None  # the last answer, not sent yet when `dirty`
    dirty: bool = False  # something to send: a new answer, or a miss
    refused: str = ""  # why the borglet refused the last poll (an answer: it is alive)
    synced: int = 0  # sync answers taken as the latest read: a read begun before one is older


@dataclass(frozen=True)
class Refused:
    """A borglet's refusal of a signed read (401/403), with the reason its answer gives."""

    status: int
    reason: str


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
        http: httpx.Client | None = None,
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
        self._http = http or httpx.Client(
            timeout=httpx.Timeout(max(0.5, min(interval, 2.0)), connect=0.5), auth=channel.client_auth(key),
            verify=channel.peer_verify(),
        )
        self._pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix=f"shard-{name}")
        self._relay_pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix=f"relay-{name}")
        self._reads = KeptAlive(max(0.5, min(interval, 2.0)))
        self._machines: dict[str, _Polled] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="link-shard", daemon=True)
        self._sender = threading.Thread(target=self._send_loop, name="link-shard-send", daemon=True)
        self._news = threading.Event()
        # Machines the leader handed this shard beyond its own share, because their owner
        # cannot reach them (reach.py): name -> borglet address, as of the leader's last answer.
        self._extra: dict[str, str] = {}
        self._routes = Routes(name, os.environ.get(ROUTES_ENV, ""))
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
        self._http.close()

    # --- the share ---------------------------------------------------------------------------------

    def members(self) -> list[str]:
        """The replicas the machines are shared among: the live ones the cache lists (this one
        counts itself from its start, before its registration shows)."""
        return self._members(self.cache.cell().replicas)

    def _members(self, replicas: Iterable[str]) -> list[str]:
        return sorted(set(replicas) | {self.name})

    def share(self) -> dict[str, str]:
        """The machines this replica polls: name -> borglet address."""
        cell = self.cache.cell()
        members = self._members(cell.replicas)
        out: dict[str, str] = {}
        for m in cell.state.machines:
            address = cell.machines[m].address if m in cell.machines else ""
            if address and shards.owner(m, members) == self.name:
                out[m] = address
        with self._lock:
            extra = dict(self._extra)
        for m, address in extra.items():
            if m in cell.state.machines and address:
                out.setdefault(m, address)
        return out

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
                # A new leader holds none of the reports the changes would be based on; nor
                # does a new term of the same replica (it lost its lease and won it again).
                self._leader, self._term = leader, term
                for p in self._machines.values():
                    p.report = None
                    p.dirty = p.latest is not None or p.misses > 0
            for gone in set(self._machines) - set(share):
                del self._machines[gone]
            for m in share:
                self._machines.setdefault(m, _Polled())
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
        return machine, synced, self._read(machine, address)

    def _read(self, machine: str, address: str) -> dict[str, Any] | Refused | None:
        url = f"{self._routes.route(address).rstrip('/')}/v1/state"
        headers = None
        if self.key is not None:
            headers = channel.sign(self.key, "GET", urlsplit(url).path.encode(), b"", machine, time.time())
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
                if reply is None:
                    p.misses += 1
                    p.report = p.latest = None  # the answer after a silence goes whole
                    p.refused = ""
                    p.dirty = True
                elif isinstance(reply, Refused):
                    # Alive, but refusing this cell's requests: not a miss. Its reason is news
                    # when it changes (and after misses); the leader keeps it meanwhile.
                    p.dirty = p.dirty or p.misses > 0 or p.refused != reply.reason
                    p.misses = 0
                    p.refused = reply.reason
                    p.report = p.latest = None
                else:
                    p.refused = ""
                    # An answer after misses is news even if it reads the same: the leader
                    # must hear that the machine is back.
                    p.dirty = p.dirty or p.misses > 0 or p.report is None or (reply is not p.latest and reply != p.latest)
                    p.misses = 0
                    p.latest = reply

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
        reports: dict[str, Any] = {}
        missed: dict[str, int] = {}
        refused: dict[str, str] = {}
        with self._lock:
            for m, p in self._machines.items():
                if len(reports) + len(missed) + len(refused) >= limit:
                    break
                if not p.dirty:
                    continue
                p.dirty = False
                if p.latest is None:
                    if p.misses:
                        missed[m] = p.misses
                    elif p.refused:
                        refused[m] = p.refused
                    continue
                if p.report is None:
                    p.version += 1
                    reports[m] = {"version": p.version, "report": p.latest}
                    self.sent["whole"] += 1
                else:
                    change = shards.diff(p.report, p.latest)
                    if not change:
                        self.sent["unchanged"] += 1
                        continue
                    p.version += 1
                    reports[m] = {"version": p.version, "base": p.version - 1, "change": change}
                    self.sent["changes"] += 1
                    self.sent["entries"] += shards.size(change)
                p.report = p.latest
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
                for m in (*batch["reports"], *batch["missed"], *(batch.get("refused") or ())):
                    if m in self._machines:
                        self._machines[m].report = None
                        self._machines[m].dirty = True
                return False  # the next news (or a second) tries again
            self._sent_at = self.clock()
            if isinstance(answer.get("poll"), dict):
                self._extra = {str(m): str(a) for m, a in answer["poll"].items()}
            for m in answer.get("need_full") or []:
                if m in self._machines:
                    self._machines[m].report = None
                    self._machines[m].dirty = True
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
            p.synced += 1
            p.dirty = p.dirty or p.misses > 0 or p.report is None or body != p.latest
            p.misses, p.refused, p.latest = 0, "", body
        return {**answer, "body": {"fence": body.get("fence"), "epoch": body.get("epoch")}}

    def _relay_one(self, item: dict[str, Any]) -> dict[str, Any]:
        machine, address = str(item.get("machine", "")), str(item.get("address", ""))
        try:
            response = self._http.post(
                f"{self._routes.route(address).rstrip('/')}/v1/sync", json=item.get("body"),
                headers=channel.to_machine(machine),
            )
        except httpx.HTTPError as err:
            return {"machine": machine, "status": 0, "error": str(err) or type(err).__name__}
        try:
            body: Any = fastjson.loads(response.content)
        except ValueError:
            body = {"error": response.text[:200]}
        if isinstance(body, dict) and (skew := response.headers.get(channel.SKEW_HEADER)) is not None:
            try:
                body["channel_skew_s"] = float(skew)  # as a poll's read shows it (KeptAlive.get_json)
            except ValueError:
                pass
        return {"machine": machine, "status": response.status_code, "body": body}

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
            "poll_interval_s": _percentiles(gaps),
            "sent": sent,
            "not_modified": self._reads.not_modified,
            "connects": self._reads.connects,
        }


class Routes:
    """This replica's routes to borglets from the `ROUTES_ENV` file (none without one)."""

    def __init__(self, replica: str, path: str) -> None:
        self.replica, self.path = replica, path
        self._stamp: float | None = None
        self._map: dict[str, str] = {}

    def refresh(self) -> None:
        if not self.path:
            return
        try:
            stamp = os.stat(self.path).st_mtime
            if stamp == self._stamp:
                return
            doc = json.loads(open(self.path, encoding="utf-8").read() or "{}")
            mine = doc.get(self.replica) or {}
            self._map = {str(k): str(v) for k, v in mine.items()}
            self._stamp = stamp
        except (OSError, ValueError, AttributeError) as err:
            log.warning("borglet routes in %s not read: %s", self.path, err)

    def route(self, address: str) -> str:
        if not self._map:
            return address
        scheme, sep, rest = address.partition("://")
        hostport = rest.split("/", 1)[0] if sep else address
        via = self._map.get(hostport)
        return address.replace(hostport, via, 1) if via else address


class KeptAlive:
    """GETs of JSON over kept-alive connections (one per thread and borglet host), with the
    standard library: a fraction of what a general HTTP client costs per request, which is
    most of a shard's work when it polls thousands of machines."""

    def __init__(self, timeout: float) -> None:
        self.timeout = timeout
        # Idle connections per borglet host, shared by the shard's threads and taken last in,
        # first out: each host's connection is used at every poll, within the server's
        # keep-alive time. (One per thread and host was used about every `workers` polls,
        # after uvicorn's 5 s keep-alive had closed it: most polls then failed once and
        # connected afresh, on both ends.)
        self._idle: dict[tuple[str, int], list[http.client.HTTPConnection]] = {}
        self._idle_lock = threading.Lock()
        self.connects = 0  # connections opened
        # url -> (ETag, the object read with it): a server that answers 304 to the tag sent
        # back costs neither a body nor a decode, and the object returned is the same one.
        self._tagged: dict[str, tuple[str, dict[str, Any]]] = {}
        self.not_modified = 0  # answers of 304

    def get_json(self, url: str, headers: dict[str, str] | None = None) -> dict[str, Any] | Refused | None:
        """The JSON object at `url`, `Refused` (401 or 403: the server answered but will not
        serve this client, with its reason), or None (no answer in time, another status, not
        an object).
        While the server's answer keeps the ETag of the last one read, the object read then
        is returned again (the same object)."""
        tagged = self._tagged.get(url)
        if tagged is not None:
            headers = {**(headers or {}), "If-None-Match": tagged[0]}
        parts = urlsplit(url)
        https = parts.scheme == "https"
        key = (parts.hostname or "", parts.port or (443 if https else 80))
        path = parts.path + (f"?{parts.query}" if parts.query else "")
        for attempt in (0, 1):
            conn = self._take(key, fresh=bool(attempt), https=https)
            try:
                conn.request("GET", path or "/", headers=headers or {})
                response = conn.getresponse()
                body = response.read()
            except TimeoutError:
                conn.close()
                return None  # slow, not gone: no second wait
            except (OSError, http.client.HTTPException):
                conn.close()
                if attempt:
                    return None
                continue  # a kept-alive connection the server had closed: once more, fresh
            if response.will_close:
                conn.close()
            else:
                self._give_back(key, conn)
            if response.status == 304 and tagged is not None:
                self.not_modified += 1
                return tagged[1]
            if response.status in (401, 403):
                return Refused(response.status, refusal_reason(body))
            if response.status != 200:
                return None
            try:
                doc = fastjson.loads(body)
            except ValueError:
                return None
            if not isinstance(doc, dict):
                return None
            if (skew := response.getheader(channel.SKEW_HEADER)) is not None:
                # The borglet obeyed though its clock is off: the leader shows it on the machine.
                try:
                    doc["channel_skew_s"] = float(skew)
                except ValueError:
                    pass
            tag = response.getheader("ETag")
            if tag:
                self._tagged[url] = (tag, doc)
            else:
                self._tagged.pop(url, None)
            return doc
        return None

    def _take(self, key: tuple[str, int], fresh: bool = False, https: bool = False) -> http.client.HTTPConnection:
        """An idle connection to the host (the last one given back), or a new one (over TLS,
        verified with the cell's CA, to an https borglet)."""
        with self._idle_lock:
            idle = self._idle.get(key)
            if idle and not fresh:
                return idle.pop()
            self.connects += 1
        if https:
            trusted = channel.peer_verify()
            context = trusted if isinstance(trusted, ssl.SSLContext) else None
            return http.client.HTTPSConnection(key[0], key[1], timeout=self.timeout, context=context)
        return http.client.HTTPConnection(key[0], key[1], timeout=self.timeout)

    def _give_back(self, key: tuple[str, int], conn: http.client.HTTPConnection) -> None:
        with self._idle_lock:
            self._idle.setdefault(key, []).append(conn)


def _percentiles(values: list[float]) -> dict[str, float | int]:
    if not values:
        return {"count": 0}

    def rank(q: float) -> float:
        return round(values[min(len(values) - 1, max(0, math.ceil(len(values) * q / 100) - 1))], 4)  # nearest rank

    return {
        "count": len(values),
        "p50": rank(50),
        "p95": rank(95),
        "p99": rank(99),
        "max": round(values[-1], 4),
    }


class ShardRelay:
    """The leader's side of the link shards: which replica owns a machine, and syncs sent
    through that replica's shard (through this replica's own when the owner cannot be
    reached: the leader can always reach a borglet itself)."""

    def __init__(self, shard: LinkShard, timeout: float = 30.0) -> None:
        self.shard = shard
        self._http = httpx.Client(
            timeout=httpx.Timeout(timeout, connect=1.0), auth=channel.client_auth(shard.key), verify=channel.peer_verify()
        )
        self.fallbacks = 0

    def close(self) -> None:
        self._http.close()

    def owner(self, machine: str) -> str:
        return shards.owner(machine, self.shard.members()) or self.shard.name

    def relay(self, owner: str, items: list[dict[str, Any]]) -> list[dict[str, Any]]:
        url = self.shard.cache.cell().replicas.get(owner, "")
        if owner != self.shard.name and url:
            try:
                response = self._http.post(
                    f"{url.rstrip('/')}{RELAY_PATH}", json={"items": items}, headers=channel.to_machine(replica_peer(owner))
                )
                if response.status_code == 200:
                    replies = fastjson.loads(response.content).get("replies")
                    if isinstance(replies, list):
                        return replies
                log.info("relay through %s answered %d", owner, response.status_code)
            except (httpx.HTTPError, ValueError, AttributeError) as err:
                log.info("relay through %s failed: %s", owner, err)
            self.fallbacks += 1
        return self.shard.relay(items)


REPORTS_PATH = "/internal/v1/shard/reports"  # a shard's batch, to the leader
RELAY_PATH = "/internal/v1/shard/sync"  # the leader's syncs, to the shard that carries them
