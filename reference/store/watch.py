"""Follow a key prefix in etcd from a revision, in order, across member failures.

The watch is etcd's gRPC `Watch` stream (`etcdpb`), the one request not sent through the JSON
gateway: a gateway watch cost each serving member a JSON rendering of every event per watcher,
and each watcher a JSON parse and base64 decodes (docs/decisions.md, "The watch over gRPC").
etcd3gw's watcher could not be used in any case: it ignores compaction and cancellation and has
no read timeout (a silent member hangs it forever). A stream silent for `idle_timeout` is
cancelled and opened again on the next member.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import grpc

from reference.store import etcdpb, ops
from reference.store.tls import StoreTLS

log = logging.getLogger(__name__)

# callback(events, revision): the events of one or more whole revisions, oldest first, and
# the revision the watcher has now seen up to. Empty events: a progress notification.
WatchCallback = Callable[[list[ops.WatchEvent], int], None]

# A watch made with this gRPC metadata is cancelled by a member that loses its leader, so
# a watcher on a member cut off from the majority moves on instead of waiting in silence.
REQUIRE_LEADER = (("hasleader", "true"),)
# One answer can carry the events of many revisions (a 10,000-task submission's are about 3 MB):
# no cap on what is received, where gRPC's default is 4 MiB.
CHANNEL_OPTIONS = (("grpc.max_receive_message_length", -1),)

MAX_BACKOFF_S = 1.0


class Compacted(Exception):
    def __init__(self, compact_revision: int) -> None:
        super().__init__(f"revision compacted up to {compact_revision}")
        self.compact_revision = compact_revision


class StreamBroken(Exception):
    """The stream ended or etcd cancelled the watch for a reason other than compaction."""


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
        self._endpoint = first_endpoint % len(self.endpoints)
        self._connect_timeout, self._idle_timeout = connect_timeout, idle_timeout
        self._credentials = _credentials(tls)
        self._stopped = threading.Event()
        self._call: Any = None  # the stream being read, for `stop` and the idle check to cancel
        # When the stream last brought a message, or the callback last finished with one: the
        # silence the idle check measures is the stream's, not the callback's time.
        self._heard = time.monotonic()
        self._handling = False
        self._thread = threading.Thread(
            target=self._run, name=f"watch {self.prefix!r}", daemon=True
        )
        self._thread.start()
        self._idle_check = threading.Thread(
            target=self._cancel_when_silent, name=f"watch {self.prefix!r} idle check", daemon=True
        )
        self._idle_check.start()

    @property
    def running(self) -> bool:
        return self._thread.is_alive()

    def stop(self, timeout: float = 5.0) -> None:
        """Stop the watch and wait (at most `timeout`) for its thread to end."""
        self._stopped.set()
        self._abort_stream()
        if threading.current_thread() is not self._thread:
            self._thread.join(timeout)

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
            except (grpc.RpcError, StreamBroken, ValueError, OSError) as exc:
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
        target = url.split("://", 1)[-1]
        if self._credentials is not None:
            channel = grpc.secure_channel(target, self._credentials, options=CHANNEL_OPTIONS)
        else:
            channel = grpc.insecure_channel(target, options=CHANNEL_OPTIONS)
        ended = threading.Event()
        call = None
        try:
            try:
                grpc.channel_ready_future(channel).result(timeout=self._connect_timeout)
            except grpc.FutureTimeoutError as exc:
                raise StreamBroken(f"no connection within {self._connect_timeout} s") from exc
            create = etcdpb.WatchCreateRequest(
                key=self.prefix,
                range_end=ops.prefix_range_end(self.prefix),
                start_revision=self.last_revision + 1,
                progress_notify=True,
            )

            def requests() -> Iterator[Any]:
                # The request side stays open while the stream is read: etcd ends a watch
                # whose client has closed its side.
                yield etcdpb.WatchRequest(create_request=create)
                ended.wait()

            watch = channel.stream_stream(
                etcdpb.WATCH_METHOD,
                request_serializer=etcdpb.WatchRequest.SerializeToString,
                response_deserializer=etcdpb.WatchResponse.FromString,
            )
            self._heard = time.monotonic()
            call = watch(requests(), metadata=REQUIRE_LEADER)
            self._call = call
            if self._stopped.is_set():
                return
            for response in call:
                self._handling = True
                try:
                    self._handle(response)
                finally:
                    self._handling = False
                    self._heard = time.monotonic()
                if self._stopped.is_set():
                    return
            raise StreamBroken("stream closed by the server")
        except grpc.RpcError as exc:
            if self._stopped.is_set():
                return
            code = exc.code() if hasattr(exc, "code") else None
            raise StreamBroken(f"{code}: {exc.details() if hasattr(exc, 'details') else exc}") from exc
        finally:
            self._call = None
            ended.set()
            if call is not None:
                call.cancel()
            channel.close()

    def _handle(self, message: Any) -> None:
        compact_revision = message.compact_revision
        if compact_revision > 0:
            raise Compacted(compact_revision)
        if message.canceled:
            raise StreamBroken(f"watch cancelled: {message.cancel_reason or 'no reason given'}")
        if message.created:
            return
        events = [etcdpb.watch_event(e) for e in message.events]
        if events:
            self.last_revision = max(self.last_revision, events[-1].mod_revision)
            self.progress_revision = max(self.progress_revision, self.last_revision)
        else:
            self.progress_revision = max(self.progress_revision, message.header.revision)
        self._call_safely(self._callback, events, self.progress_revision)

    def _cancel_when_silent(self) -> None:
        """Cancel a stream that brought nothing for `idle_timeout` (a member that hangs, or a
        link that drops packets): `_run` opens the watch again on the next member."""
        tick = min(0.5, self._idle_timeout / 4)
        while not self._stopped.wait(tick):
            call = self._call
            if call is not None and not self._handling and time.monotonic() - self._heard > self._idle_timeout:
                log.info("watch %r: nothing heard for %.1f s; reconnecting", self.prefix, self._idle_timeout)
                self._heard = time.monotonic()
                call.cancel()

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
        """Unblock a read in progress by cancelling the stream."""
        call = self._call
        if call is not None:
            call.cancel()


class _CallbackFailed(Exception):
    pass


def _credentials(tls: StoreTLS | None) -> grpc.ChannelCredentials | None:
    """The cell's CA to verify the member and the client certificate etcd asks for."""
    if tls is None:
        return None
    with open(tls.ca_file, "rb") as ca, open(tls.cert_file, "rb") as cert, open(tls.key_file, "rb") as key:
        return grpc.ssl_channel_credentials(root_certificates=ca.read(), private_key=key.read(), certificate_chain=cert.read())
