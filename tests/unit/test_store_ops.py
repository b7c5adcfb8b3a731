"""Pure helpers of the store: gateway encoding, transaction builders, response parsing."""

from __future__ import annotations

import base64

import pytest

from reference.store import etcdpb, ops


def b64(raw: bytes) -> str:
    return base64.b64encode(raw).decode()


@pytest.mark.parametrize(
    ("prefix", "range_end"),
    [
        (b"/cell/", b"/cell0"),  # "/" + 1 == "0"
        ("/cell/jobs/", b"/cell/jobs0"),
        (b"a\xff", b"b"),  # a trailing 0xff cannot be incremented: drop it, bump the byte before
        (b"\xff\xff", b"\0"),  # nothing left to bump: range to the end of the keyspace
        (b"", b"\0"),
    ],
)
def test_prefix_range_end(prefix: ops.Key, range_end: bytes) -> None:
    assert ops.prefix_range_end(prefix) == range_end


def test_text_is_utf8_not_latin1() -> None:
    assert ops.to_bytes("é") == b"\xc3\xa9"
    assert ops.unb64(ops.b64("é")) == "é".encode()
    assert ops.unb64(None) == b""


def test_compares_name_the_target_and_carry_int64_as_strings() -> None:
    assert ops.create_revision("/k", "==", 0) == {
        "key": b64(b"/k"),
        "result": "EQUAL",
        "target": "CREATE",
        "create_revision": "0",
    }
    assert ops.mod_revision("/k", "<", 7)["result"] == "LESS"
    assert ops.version("/k", ">", 1)["target"] == "VERSION"
    assert ops.value("/k", "!=", "v") == {
        "key": b64(b"/k"),
        "result": "NOT_EQUAL",
        "target": "VALUE",
        "value": b64(b"v"),
    }
    assert ops.lease("/k", "==", 42)["lease"] == "42"


def test_unknown_compare_operator_is_refused() -> None:
    with pytest.raises(ValueError, match="compare operator"):
        ops.value("/k", "<=", "v")  # type: ignore[arg-type]


def test_ops() -> None:
    assert ops.put("/k", b"v") == {"request_put": {"key": b64(b"/k"), "value": b64(b"v")}}
    assert ops.put("/k", b"v", lease_id=9)["request_put"]["lease"] == "9"
    assert ops.delete("/k") == {"request_delete_range": {"key": b64(b"/k")}}
    assert ops.delete_prefix("/p/")["request_delete_range"]["range_end"] == b64(b"/p0")
    assert ops.get("/k") == {"request_range": {"key": b64(b"/k")}}


def test_parse_kv_fills_omitted_defaults() -> None:
    # The gateway leaves out fields at their default: here value, version and lease.
    kv = ops.parse_kv({"key": b64(b"/k"), "create_revision": "5", "mod_revision": "6"})
    assert kv == ops.KeyValue(b"/k", b"", 5, 6, 0, 0)


def test_watch_event_put_and_delete() -> None:
    response = etcdpb.WatchResponse()
    put = response.events.add()
    put.kv.key, put.kv.value, put.kv.create_revision, put.kv.mod_revision, put.kv.version = b"/k", b"v", 3, 4, 2
    deleted = response.events.add(type=etcdpb.EVENT_DELETE)
    deleted.kv.key, deleted.kv.mod_revision = b"/k", 5
    # Through the wire, as a member sends them: fields at their default are left out.
    put, deleted = etcdpb.WatchResponse.FromString(response.SerializeToString()).events
    assert etcdpb.watch_event(put) == ops.WatchEvent("PUT", b"/k", b"v", 4, 3, 2)
    assert etcdpb.watch_event(deleted) == ops.WatchEvent("DELETE", b"/k", b"", 5, 0, 0)


def test_parse_txn_failed_branch_with_a_range_response() -> None:
    response = {
        "header": {"revision": "12"},
        "responses": [
            {"response_range": {"kvs": [{"key": b64(b"/leader"), "value": b64(b"m2"), "create_revision": "11", "mod_revision": "11"}]}},
            {"response_put": {"header": {}}},
        ],
    }
    result = ops.parse_txn(response)
    assert result.succeeded is False  # "succeeded": false is omitted by the gateway
    assert result.revision == 12
    assert result.responses[0][0].value == b"m2" and result.responses[0][0].create_revision == 11
    assert result.responses[1] == ()
