"""The hot paths' JSON decoder gives what the standard library gives, including for what
orjson refuses, and the same error for what is not JSON."""

from __future__ import annotations

import json
import math

import pytest

from reference import fastjson
from reference.master import codec


@pytest.mark.parametrize(
    "text",
    [
        '{"a": 1, "b": [1.5, "x", null, true], "c": {"d": "\\u00e9"}}',
        "[]",
        '"just a string"',
        '{"edges": [9223372036854775807, -9223372036854775808, 18446744073709551615]}',  # 64-bit ints, exact
    ],
)
def test_it_decodes_as_the_standard_library_does(text: str) -> None:
    assert fastjson.loads(text.encode()) == json.loads(text)
    assert fastjson.loads(text) == json.loads(text)


def test_nan_and_infinity_written_by_the_standard_library_read_back() -> None:
    doc = fastjson.loads(json.dumps({"x": float("nan"), "y": float("inf")}).encode())
    assert math.isnan(doc["x"]) and doc["y"] == math.inf


@pytest.mark.parametrize("raw", [b"", b"{", b"not json", b'{"a": 1} trailing'])
def test_what_is_not_json_is_a_value_error(raw: bytes) -> None:
    with pytest.raises(ValueError):
        fastjson.loads(raw)


def test_a_stored_record_that_is_not_json_is_a_schema_error() -> None:
    with pytest.raises(codec.SchemaError, match="not JSON"):
        codec.loads(b"{")


def test_it_encodes_what_the_standard_library_decodes_back_the_same() -> None:
    doc = {"b": [1, 2.5, None, True, "é"], "a": {"z": 1, "y": (3, 4)}, "n": -(2**63)}
    out = fastjson.dumps(doc, sort_keys=True)
    assert json.loads(out) == json.loads(json.dumps(doc))
    assert out.index(b'"a"') < out.index(b'"b"') < out.index(b'"n"')  # keys sorted
    assert b" " not in out  # compact


def test_what_orjson_cannot_encode_falls_back_to_the_standard_library() -> None:
    big = {"big": 2**70, 1: "a key that is not a string"}
    assert json.loads(fastjson.dumps(big)) == json.loads(json.dumps(big))
