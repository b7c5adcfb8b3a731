"""The watch's gRPC stream against members that misbehave: one that accepts the watch and then
says nothing, one that closes it, one that cancels it; and what a good member sees of the
watch (its request side held open, `hasleader` asked for, the revision to resume from)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from concurrent import futures
from typing import Any

import grpc
import pytest

from reference.store import etcdpb, ops
from reference.store.watch import PrefixWatch

PREFIX = b"/c/"


class Member:
    """A gRPC server answering `etcdserverpb.Watch/Watch` with `behave(request, context)`."""

    def __init__(self, behave: Callable[[Any, grpc.ServicerContext], Iterator[Any]]) -> None:
        self.requests: list[Any] = []
        self.metadata: list[dict[str, str]] = []
        self.request_side_ended: list[bool] = []
        self.behave = behave

        def watch(request_iterator: Iterator[Any], context: grpc.ServicerContext) -> Iterator[Any]:
            self.metadata.append(dict(context.invocation_metadata()))
            first = next(request_iterator)
            self.requests.append(first)
            ended = threading.Event()

            def drain() -> None:
                try:
                    for _ in request_iterator:
                        pass
                    ended.set()  # the watcher closed its side
                except grpc.RpcError:
                    pass  # the call ended first (cancelled or finished)

            threading.Thread(target=drain, daemon=True).start()
            yield from self.behave(first, context)
            self.request_side_ended.append(ended.is_set())

        handler = grpc.method_handlers_generic_handler(
            "etcdserverpb.Watch",
            {
                "Watch": grpc.stream_stream_rpc_method_handler(
                    watch,
                    request_deserializer=etcdpb.WatchRequest.FromString,
                    response_serializer=etcdpb.WatchResponse.SerializeToString,
                )
            },
        )
        self.server = grpc.server(futures.ThreadPoolExecutor(8))
        self.server.add_generic_rpc_handlers((handler,))
        self.port = self.server.add_insecure_port("127.0.0.1:0")
        self.server.start()
        self.url = f"http://127.0.0.1:{self.port}"

    def stop(self) -> None:
        self.server.stop(0)


def created(revision: int) -> Any:
    r = etcdpb.WatchResponse(created=True)
    r.header.revision = revision
    return r


def events(*revisions: int) -> Any:
    r = etcdpb.WatchResponse()
    r.header.revision = revisions[-1]
    for rev in revisions:
        e = r.events.add()
        e.kv.key, e.kv.value, e.kv.mod_revision = PREFIX + str(rev).encode(), b"v", rev
    return r


def serve_from(request: Any, context: grpc.ServicerContext) -> Iterator[Any]:
    """A good member: the events from the asked revision to 12, then a second of quiet."""
    start = request.create_request.start_revision
    yield created(start - 1)
    yield events(*range(start, 13))
    time.sleep(1.0)


def silent(request: Any, context: grpc.ServicerContext) -> Iterator[Any]:
    """A hung member: the watch is taken, and nothing more is said for 30 s."""
    yield created(request.create_request.start_revision - 1)
    deadline = time.monotonic() + 30
    while context.is_active() and time.monotonic() < deadline:
        time.sleep(0.05)


def watch_on(urls: list[str], start: int, seen: list[ops.WatchEvent], **kw: Any) -> PrefixWatch:
    lock = threading.Lock()

    def record(evs: list[ops.WatchEvent], _rev: int) -> None:
        with lock:
            seen.extend(evs)

    return PrefixWatch(urls, PREFIX, start, record, **kw)


def wait_for(what: Callable[[], bool], timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if what():
            return True
        time.sleep(0.02)
    return what()


@pytest.fixture
def members() -> Iterator[list[Member]]:
    made: list[Member] = []
    yield made
    for m in made:
        m.stop()


def test_a_silent_member_is_left_after_the_idle_timeout_and_the_next_serves_every_event(members: list[Member]) -> None:
    hung, good = Member(silent), Member(serve_from)
    members += [hung, good]
    seen: list[ops.WatchEvent] = []
    began = time.monotonic()
    w = watch_on([hung.url, good.url], 5, seen, idle_timeout=0.5)
    try:
        assert wait_for(lambda: len(seen) == 8, 10), f"saw {len(seen)} events"
        took = time.monotonic() - began
    finally:
        w.stop()
    assert [e.mod_revision for e in seen] == list(range(5, 13))
    assert w.reconnects >= 1 and 0.5 <= took < 5, took
    assert [r.create_request.start_revision for r in good.requests][0] == 5
    assert not w.running


def test_the_request_side_stays_open_and_hasleader_is_asked(members: list[Member]) -> None:
    good = Member(serve_from)
    members.append(good)
    seen: list[ops.WatchEvent] = []
    w = watch_on([good.url], 3, seen, idle_timeout=5.0)
    try:
        assert wait_for(lambda: len(seen) == 10, 5)
        assert wait_for(lambda: bool(good.request_side_ended), 5)
    finally:
        w.stop()
    # While the member served, the watcher's side was open: etcd ends a watch whose client closed it.
    assert good.request_side_ended[0] is False
    assert good.metadata[0].get("hasleader") == "true"
    create = good.requests[0].create_request
    assert create.key == PREFIX and create.range_end == ops.prefix_range_end(PREFIX) and create.progress_notify


def test_a_closed_or_cancelled_stream_resumes_after_the_last_event_delivered(members: list[Member]) -> None:
    calls = {"n": 0}

    def flaky(request: Any, context: grpc.ServicerContext) -> Iterator[Any]:
        calls["n"] += 1
        start = request.create_request.start_revision
        yield created(start - 1)
        if calls["n"] == 1:
            yield events(start, start + 1)
            return  # the stream ends: the watch opens again from start + 2
        if calls["n"] == 2:
            yield events(start)
            cancel = etcdpb.WatchResponse(canceled=True, cancel_reason="etcdserver: no leader")
            yield cancel  # a member that lost its leader cancels the watch
            return
        yield from serve_from(request, context)

    member = Member(flaky)
    members.append(member)
    seen: list[ops.WatchEvent] = []
    w = watch_on([member.url], 1, seen, idle_timeout=5.0)
    try:
        assert wait_for(lambda: len(seen) == 12, 10), [e.mod_revision for e in seen]
    finally:
        w.stop()
    assert [e.mod_revision for e in seen] == list(range(1, 13))  # no gap, no repeat
    assert [r.create_request.start_revision for r in member.requests][:3] == [1, 3, 4]


def test_a_member_that_cannot_be_reached_is_passed_over(members: list[Member]) -> None:
    good = Member(serve_from)
    members.append(good)
    seen: list[ops.WatchEvent] = []
    w = watch_on(["http://127.0.0.1:9"], 1, seen)  # nothing listens on the discard port
    w.stop()
    w = watch_on(["http://127.0.0.1:9", good.url], 1, seen, connect_timeout=0.5)
    try:
        assert wait_for(lambda: len(seen) == 12, 10)
    finally:
        w.stop()
    assert w.reconnects >= 1
