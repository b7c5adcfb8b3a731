"""How a link shard reaches a borglet: its reads of `/v1/state` over kept-alive connections, a refusal told from a silence, and the routes the fault tests put in front of borglets.

A shard polls thousands of machines a round, so a read is a bare standard-library GET on a
connection kept alive per borglet host (`KeptAlive`), sending back the ETag of the last report
read: an unchanged report costs a 304 and returns the object read before, the same one. A 401
or 403 is an answer (`Refused`, with the borglet's reason): the machine is alive but will not
serve this cell; anything else that is not a JSON object is no answer.

`Routes` maps a borglet's address to another one (a proxy in front of it) for one replica,
read from the `ROUTES_ENV` file whenever it changes: the shard's reads and the syncs it relays
both go by it. Without the file every address is its own route.
"""

from __future__ import annotations

import json
import logging
import os
import ssl
import threading
import time
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from reference import channel, fastjson
from reference.master import http11
from reference.master.intake import refusal_reason

log = logging.getLogger(__name__)

# A JSON file {replica: {"host:port" of a borglet: "host:port" to reach it through}}: the
# replica named reaches those borglets through another address (a proxy in front of them).
# What the fault tests use to cut one replica's links to the borglets and no other link; read
# again whenever the file changes.
ROUTES_ENV = "MINBORG_BORGLET_ROUTES"


@dataclass(frozen=True)
class Refused:
    """A borglet's refusal of a signed read (401/403), with the reason its answer gives."""

    status: int
    reason: str


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
    """GETs of JSON, and the POSTs of relayed syncs, over kept-alive connections (one per thread
    and borglet host) of a bare HTTP/1.1 client (`http11`): a fraction of what a general HTTP
    client costs per request, which is most of a shard's work when it polls thousands of
    machines."""

    def __init__(self, timeout: float, connect_timeout: float | None = None) -> None:
        self.timeout, self.connect_timeout = timeout, connect_timeout
        # Idle connections per borglet host, shared by the shard's threads and taken last in,
        # first out: each host's connection is used at every poll, within the server's
        # keep-alive time. (One per thread and host was used about every `workers` polls,
        # after uvicorn's 5 s keep-alive had closed it: most polls then failed once and
        # connected afresh, on both ends.)
        self._idle: dict[tuple[str, int, bool], list[http11.Connection]] = {}
        self._idle_lock = threading.Lock()
        self.connects = 0  # connections opened
        # url -> (ETag, the object read with it): a server that answers 304 to the tag sent
        # back costs neither a body nor a decode, and the object returned is the same one.
        self._tagged: dict[str, tuple[str, dict[str, Any]]] = {}
        self.not_modified = 0  # answers of 304

    def close(self) -> None:
        """Close the idle connections (one in use is closed by its answer or given back after)."""
        with self._idle_lock:
            idle, self._idle = self._idle, {}
        for conns in idle.values():
            for conn in conns:
                conn.close()

    def exchange(self, method: str, url: str, headers: dict[str, str] | None = None, body: bytes = b"") -> http11.Answer:
        """One request to `url` on a kept-alive connection, once more on a fresh one where the
        kept one had been closed by the server. Raises OSError: TimeoutError where the server
        was slow (not tried again: slow is not gone), another where it did not answer."""
        parts = urlsplit(url)
        https = parts.scheme == "https"
        key = (parts.hostname or "", parts.port or (443 if https else 80), https)
        target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        for attempt in (0, 1):
            conn = self._take(key, fresh=bool(attempt))
            try:
                answer = conn.request(method, target, headers, body)
            except TimeoutError:
                raise
            except OSError:
                if attempt:
                    raise
                continue  # a kept-alive connection the server had closed: once more, fresh
            if not answer.will_close:
                self._give_back(key, conn)
            return answer
        raise AssertionError("unreachable")

    def post_json(self, url: str, body: bytes, key: bytes | None, machine: str) -> http11.Answer:
        """POST the JSON `body` to `url`, signed with the cell's `key` for `machine` as
        `channel.ClientAuth` signs a request (without a key, unsigned, naming `machine`);
        raises as `exchange` does."""
        if key is None:
            headers = channel.to_machine(machine)
        else:
            headers = channel.sign(key, "POST", urlsplit(url).path.encode(), body, machine, time.time())
        headers["Content-Type"] = "application/json"
        return self.exchange("POST", url, headers, body)

    def get_json(self, url: str, headers: dict[str, str] | None = None) -> dict[str, Any] | Refused | None:
        """The JSON object at `url`, `Refused` (401 or 403: the server answered but will not
        serve this client, with its reason), or None (no answer in time, another status, not
        an object).
        While the server's answer keeps the ETag of the last one read, the object read then
        is returned again (the same object)."""
        tagged = self._tagged.get(url)
        if tagged is not None:
            headers = {**(headers or {}), "If-None-Match": tagged[0]}
        try:
            answer = self.exchange("GET", url, headers)
        except (OSError, ValueError):
            return None
        if answer.status == 304 and tagged is not None:
            self.not_modified += 1
            return tagged[1]
        if answer.status in (401, 403):
            return Refused(answer.status, refusal_reason(answer.body))
        if answer.status != 200:
            return None
        try:
            doc = fastjson.loads(answer.body)
        except ValueError:
            return None
        if not isinstance(doc, dict):
            return None
        if (skew := answer.headers.get(channel.SKEW_HEADER.lower())) is not None:
            # The borglet obeyed though its clock is off: the leader shows it on the machine.
            try:
                doc["channel_skew_s"] = float(skew)
            except ValueError:
                pass
        tag = answer.headers.get("etag")
        if tag:
            self._tagged[url] = (tag, doc)
        else:
            self._tagged.pop(url, None)
        return doc

    def _take(self, key: tuple[str, int, bool], fresh: bool = False) -> http11.Connection:
        """An idle connection to the host (the last one given back), or a new one (over TLS,
        verified with the cell's CA, to an https borglet)."""
        with self._idle_lock:
            idle = self._idle.get(key)
            if idle and not fresh:
                return idle.pop()
            self.connects += 1
        context = None
        if key[2]:
            trusted = channel.peer_verify()
            context = trusted if isinstance(trusted, ssl.SSLContext) else ssl.create_default_context()
        return http11.Connection(key[0], key[1], self.timeout, context, self.connect_timeout)

    def _give_back(self, key: tuple[str, int, bool], conn: http11.Connection) -> None:
        with self._idle_lock:
            self._idle.setdefault(key, []).append(conn)
