"""Follow a key prefix in etcd from a revision, in order, across member failures.

etcd3gw's watcher cannot be used for this: it ignores compaction and cancellation, has no
read timeout (a silent member hangs it forever) and assumes one JSON message per HTTP chunk.
`PrefixWatch` speaks to the gateway's `/v3/watch` stream directly.
"""

from __future__ import annotations

import contextlib
import logging
import socket
import threading
from collections.abc import Callable, Sequence
from typing import Any

import requests

from reference import fastjson
from reference.store import ops
from reference.store.tls import StoreTLS

log = logging.getLogger(__name__)

# callback(events, revision): the events of one or more whole revisions, oldest first, and
# the revision the watcher has now seen up to. Empty events: a progress notification.
WatchCallback = Callable[[list[ops.WatchEvent], int], None]

# A watch made with this gRPC metadata is cancelled by a member that loses its leader, so
# a watcher on a member cut off from the majority moves on instead of waiting in silence.
REQUIRE_LEADER_HEADER = {"Grpc-Metadata-hasleader": "true"}

MAX_BACKOFF_S = 1.0


class Compacted(Exception):
    def __init__(self, compact_revision: int) -> None:
        super().__init__(f"revision compacted up to {compact_revision}")
        self.compact_revision = compact_revision


class StreamBroken(Exception):
    """The stream ended or etcd cancelled the watch for a reason other than compaction."""


def split_messages(buffer: bytes, chunk: bytes) -> tuple[list[bytes], bytes]:
    """Add `chunk` to `buffer`; return the complete newline-ended messages and the rest."""
    buffer += chunk
    *complete, rest = buffer.split(b"\n")
    return [m for m in complete if m.strip()], rest


class PrefixWatch:
    """A background thread that delivers every change under a prefix, reconnecting as needed.

    `last_revision`: every event up to this revision has been delivered. A reconnect asks
    for `last_revision + 1`. Progress notifications advance `progress_revision` (reported to
    the callback) but not `last_revision`: etcd 3.5 before 3.5.8 could send a progress
    notification ahead of pending events (etcd issue 15220), so resuming from it could skip
    events.
    """

    def __init__(
        self,
        endpoints: Sequence[str],
        prefix: ops.Key,
        start_revision: int,
        callback: WatchCallback,
        *,
        on_compacted: Callable[[int], None] | None = None,
        connect_timeout: float = 1.0,
        idle_timeout: float = 5.0,
        first_endpoint: int = 0,
        tls: StoreTLS | None = None,
    ) -> None:
        if start_revision < 1:
            raise ValueError("start_revision must be >= 1 (read the prefix first, then watch from its revision + 1)")
        self.endpoints = list(endpoints)
        self.prefix = ops.to_bytes(prefix)
        self.last_revision = start_revision - 1
        self.progress_revision = start_revision - 1
        self.compacted_at: int | None = None
        self.error: BaseException | None = None
        self.reconnects = 0
        self._callback = callback
        self._on_compacted = on_compacted
        # Without events, a member sends a progress notification every second (our clusters)
        # or every ten minutes (etcd's default); `idle_timeout` bounds how long a dead
        # connection goes unnoticed. On an idle external etcd it only causes a reconnect.
        self._timeouts = (connect_timeout, idle_timeout)
        self._endpoint = first_endpoint % len(self.endpoints)
        self._stopped = threading.Event()
        self._response: requests.Response | None = None
        self._session = requests.Session()
        self._session.trust_env = False  # as StoreClient's: explicit member addresses, no proxy
        if tls is not None:
            self._session.verify = tls.ca_file
            self._session.cert = (tls.cert_file, tls.key_file)
        self._thread = threading.Thread(
            target=self._run, name=f"watch {self.prefix!r}", daemon=True
        )
        self._thread.start()

    @property
    def running(self) -> bool:
        return self._thread.is_alive()

    def stop(self, timeout: float = 5.0) -> None:
        """Stop the watch and wait (at most `timeout`) for its thread to end."""
        self._stopped.set()
        self._abort_stream()
        if threading.current_thread() is not self._thread:
            self._thread.join(timeout)
        self._session.close()

    # -- the thread --------------------------------------------------------------------------

    def _run(self) -> None:
        failures = 0
        while not self._stopped.is_set():
            url = self.endpoints[self._endpoint]
            try:
                self._follow(url)
                failures = 0  # a stream that ended cleanly was healthy until then
            except Compacted as exc:
                self.compacted_at = exc.compact_revision
                log.warning("watch %r: %s", self.prefix, exc)
                if self._on_compacted is not None:
                    with contextlib.suppress(_CallbackFailed):
                        self._call_safely(self._on_compacted, exc.compact_revision)
                self._stopped.set()
                return
            except _CallbackFailed:
                self._stopped.set()
                return
            except (requests.RequestException, StreamBroken, ValueError, OSError) as exc:
                if self._stopped.is_set():
                    return
                failures += 1
                log.info("watch %r on %s broke (%s); reconnecting", self.prefix, url, exc)
            self.reconnects += 1
            self._endpoint = (self._endpoint + 1) % len(self.endpoints)
            # Back off only after trying every endpoint once, so failover is immediate.
            if failures >= len(self.endpoints):
                self._stopped.wait(min(0.05 * 2 ** (failures - len(self.endpoints)), MAX_BACKOFF_S))

    def _follow(self, url: str) -> None:
        """Open a watch on `url` from last_revision + 1 and deliver until the stream ends."""
        request = {
            "create_request": {
                "key": ops.b64(self.prefix),
                "range_end": ops.b64(ops.prefix_range_end(self.prefix)),
                "start_revision": str(self.last_revision + 1),
                "progress_notify": True,
            }
        }
        response = self._session.post(
            f"{url}/v3/watch",
            json=request,
            stream=True,
            timeout=self._timeouts,
            headers=REQUIRE_LEADER_HEADER,
        )
        self._response = response
        try:
            if self._stopped.is_set():
                return
            if response.status_code != 200:
                raise StreamBroken(f"HTTP {response.status_code}: {response.text[:200]}")
            buffer = b""
            for chunk in response.iter_content(chunk_size=None):
                messages, buffer = split_messages(buffer, chunk)
                for message in messages:
                    self._handle(fastjson.loads(message))
                if self._stopped.is_set():
                    return
            raise StreamBroken("stream closed by the server")
        finally:
            self._response = None
            response.close()

    def _handle(self, message: dict[str, Any]) -> None:
        if "error" in message:
            raise StreamBroken(f"gateway error: {message['error']}")
        result = message.get("result", {})
        compact_revision = int(result.get("compact_revision", 0))
        if compact_revision > 0:
            raise Compacted(compact_revision)
        if result.get("canceled"):
            raise StreamBroken(f"watch cancelled: {result.get('cancel_reason', 'no reason given')}")
        if result.get("created"):
            return
        events = [ops.parse_event(e) for e in result.get("events", [])]
        if events:
            self.last_revision = max(self.last_revision, events[-1].mod_revision)
            self.progress_revision = max(self.progress_revision, self.last_revision)
        else:
            self.progress_revision = max(self.progress_revision, ops.header_revision(result))
        self._call_safely(self._callback, events, self.progress_revision)

    def _call_safely(self, function: Callable[..., None], *args: Any) -> None:
        try:
            function(*args)
        except Exception as exc:
            # Skipping an event would silently corrupt whatever the callback maintains, so a
            # failing callback ends the watch; `error` says why.
            log.exception("watch %r: callback failed; stopping the watch", self.prefix)
            self.error = exc
            raise _CallbackFailed() from exc

    def _abort_stream(self) -> None:
        """Unblock a read in progress by shutting the stream's socket down."""
        response = self._response
        if response is None:
            return
        try:
            sock = response.raw.connection.sock  # type: ignore[union-attr]
            sock.shutdown(socket.SHUT_RDWR)
        except (AttributeError, OSError):
            pass


class _CallbackFailed(Exception):
    pass
