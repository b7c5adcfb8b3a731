"""Pure helpers of the store's client, watch and cluster modules (no etcd needed)."""

from __future__ import annotations

import pytest
import requests
import urllib3
from etcd3gw import exceptions as gw_exceptions

from reference.store.client import dumps, never_reached_server, normalize_endpoint
from reference.store.etcd_cluster import Member, initial_cluster_flag
from reference.store.watch import split_messages


@pytest.mark.parametrize(
    ("endpoint", "expected"),
    [
        ("http://127.0.0.1:2379", ("127.0.0.1", 2379)),
        ("127.0.0.1:2379", ("127.0.0.1", 2379)),
        ("http://localhost:1/", ("localhost", 1)),
    ],
)
def test_normalize_endpoint(endpoint: str, expected: tuple[str, int]) -> None:
    assert normalize_endpoint(endpoint) == expected


@pytest.mark.parametrize("bad", ["https://127.0.0.1:2379", "127.0.0.1", "http://:2379"])
def test_normalize_endpoint_refuses_what_it_cannot_reach(bad: str) -> None:
    with pytest.raises(ValueError, match="http://HOST:PORT"):
        normalize_endpoint(bad)


def _wrapped(cause: BaseException) -> gw_exceptions.Etcd3Exception:
    """Wrap `cause` the way etcd3gw does: a new exception raised inside `except`."""
    try:
        try:
            raise cause
        except requests.exceptions.RequestException as exc:
            raise gw_exceptions.ConnectionFailedError(str(exc))  # noqa: B904
    except gw_exceptions.ConnectionFailedError as wrapped:
        return wrapped


def test_a_refused_connection_never_reached_the_server() -> None:
    refused = urllib3.exceptions.NewConnectionError(None, "Connection refused")  # type: ignore[arg-type]
    cause = requests.exceptions.ConnectionError(urllib3.exceptions.MaxRetryError(None, "/", refused))  # type: ignore[arg-type]
    assert never_reached_server(_wrapped(cause))
    assert never_reached_server(_wrapped(requests.exceptions.ConnectTimeout()))


def test_a_reset_or_read_timeout_leaves_the_outcome_unknown() -> None:
    reset = requests.exceptions.ConnectionError(urllib3.exceptions.ProtocolError("Connection aborted"))
    assert not never_reached_server(_wrapped(reset))
    assert not never_reached_server(_wrapped(requests.exceptions.ReadTimeout()))
    # A 503 answer has no cause at all: etcd got the request.
    assert not never_reached_server(gw_exceptions.ConnectionFailedError("no leader"))


def test_dumps_is_canonical() -> None:
    assert dumps({"b": 1, "a": [1, 2]}) == b'{"a":[1,2],"b":1}'


def test_split_messages_keeps_partial_lines_for_the_next_chunk() -> None:
    messages, rest = split_messages(b"", b'{"a":1}\n{"b":')
    assert messages == [b'{"a":1}'] and rest == b'{"b":'
    messages, rest = split_messages(rest, b"2}\n\n")
    assert messages == [b'{"b":2}'] and rest == b""


def test_initial_cluster_flag_lists_every_peer() -> None:
    members = [Member("etcd0", 1, 2), Member("etcd1", 3, 4)]
    assert initial_cluster_flag(members, "127.0.0.1") == (
        "etcd0=http://127.0.0.1:2,etcd1=http://127.0.0.1:4"
    )
