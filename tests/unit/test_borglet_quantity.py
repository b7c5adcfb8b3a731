"""Table tests of the borglet's quantity parsers (CPU, bytes, capacity, key=value lists)."""

import pytest

from reference.borglet import quantity


@pytest.mark.parametrize(
    ("text", "milli"),
    [
        ("4000m", 4000),
        ("4", 4000),  # cores -> milli-CPU
        ("0.5", 500),
        ("250m", 250),
        (" 2 ", 2000),
        (1500, 1500),  # an int is already milli-CPU
        (1.5, 1500),  # a float is cores
    ],
)
def test_parse_cpu(text, milli):
    assert quantity.parse_cpu(text) == milli


@pytest.mark.parametrize("text", ["", "4 cores", "4k", "m", "-1", True])
def test_parse_cpu_rejects(text):
    with pytest.raises(ValueError):
        quantity.parse_cpu(text)


@pytest.mark.parametrize(
    ("text", "size"),
    [
        ("8GiB", 8 * 1024**3),
        ("512MiB", 512 * 1024**2),
        ("1G", 1_000_000_000),
        ("1Gi", 1024**3),
        ("100k", 100_000),
        ("1.5KiB", 1536),
        ("268435456", 268435456),
        ("10gib", 10 * 1024**3),  # units are case-insensitive
        (4096, 4096),
    ],
)
def test_parse_bytes(text, size):
    assert quantity.parse_bytes(text) == size


@pytest.mark.parametrize("text", ["", "GiB", "8 parsecs", "1.2.3G", "-5"])
def test_parse_bytes_rejects(text):
    with pytest.raises(ValueError):
        quantity.parse_bytes(text)


def test_parse_capacity_canonical_units():
    assert quantity.parse_capacity("cpu=4000m,ram=8GiB,gpu=1,disk=10GiB,ports=100") == {
        "cpu": 4000,
        "ram": 8 * 1024**3,
        "gpu": 1,
        "disk": 10 * 1024**3,
        "ports": 100,
    }


@pytest.mark.parametrize("text", ["ram=1GiB", "cpu=2", "cpu=2,ram=1GiB,gpu=x", "cpu=2,ram"])
def test_parse_capacity_rejects(text):
    with pytest.raises(ValueError):
        quantity.parse_capacity(text)


@pytest.mark.parametrize(
    ("text", "pairs"),
    [
        ("", {}),
        ("rack=r1,arch=x86", {"rack": "r1", "arch": "x86"}),
        (" rack = r1 , ", {"rack": "r1"}),
        ("ssd=", {"ssd": ""}),
    ],
)
def test_parse_pairs(text, pairs):
    assert quantity.parse_pairs(text) == pairs


def test_parse_pairs_rejects_missing_equals():
    with pytest.raises(ValueError, match="key=value"):
        quantity.parse_pairs("rack")


@pytest.mark.parametrize(
    ("size", "text"), [(268435456, "256MiB"), (8 * 1024**3, "8GiB"), (1000, "1000"), (0, "0")]
)
def test_format_bytes(size, text):
    assert quantity.format_bytes(size) == text
