"""Parses resource quantities (CPU, bytes) and key=value lists used on borglet command lines."""

from __future__ import annotations

import re

_BYTE_UNITS: dict[str, int] = {
    "": 1,
    "b": 1,
    "k": 1000,
    "kb": 1000,
    "m": 1000**2,
    "mb": 1000**2,
    "g": 1000**3,
    "gb": 1000**3,
    "t": 1000**4,
    "tb": 1000**4,
    "ki": 1024,
    "kib": 1024,
    "mi": 1024**2,
    "mib": 1024**2,
    "gi": 1024**3,
    "gib": 1024**3,
    "ti": 1024**4,
    "tib": 1024**4,
}

_NUMBER_UNIT = re.compile(r"^\s*([0-9]*\.?[0-9]+)\s*([a-zA-Z]*)\s*$")

# Resources whose values are byte counts; everything else is a plain count.
BYTE_RESOURCES = frozenset({"ram", "disk"})


def parse_cpu(text: str | int | float) -> int:
    """Milli-CPU from '4000m', '4', '0.5' (cores) or an int already in milli-CPU when given as int."""
    if isinstance(text, bool):
        raise ValueError(f"invalid CPU quantity {text!r}")
    if isinstance(text, int):
        return text
    if isinstance(text, float):
        return round(text * 1000)
    match = _NUMBER_UNIT.match(text)
    if not match or match.group(2) not in ("", "m"):
        raise ValueError(
            f"invalid CPU quantity {text!r}: use cores like '4' or milli-CPU like '4000m'"
        )
    value = float(match.group(1))
    return round(value) if match.group(2) == "m" else round(value * 1000)


def parse_bytes(text: str | int) -> int:
    """Bytes from '8GiB', '512MiB', '1G', '100k' or a plain number of bytes."""
    if isinstance(text, bool):
        raise ValueError(f"invalid byte quantity {text!r}")
    if isinstance(text, int):
        return text
    match = _NUMBER_UNIT.match(text)
    unit = match.group(2).lower() if match else None
    if not match or unit not in _BYTE_UNITS:
        raise ValueError(
            f"invalid byte quantity {text!r}: use a number with an optional unit such as 512MiB or 8GiB"
        )
    return round(float(match.group(1)) * _BYTE_UNITS[unit])


def parse_count(text: str | int) -> int:
    """A non-negative integer count such as a number of GPUs or ports."""
    try:
        value = int(text)
    except (TypeError, ValueError):
        raise ValueError(f"invalid count {text!r}: use a whole number") from None
    if value < 0:
        raise ValueError(f"invalid count {text!r}: must not be negative")
    return value


def parse_resource(name: str, text: str | int) -> int:
    """One named resource in its canonical unit: milli-CPU, bytes, or a count."""
    if name == "cpu":
        return parse_cpu(text)
    if name in BYTE_RESOURCES:
        return parse_bytes(text)
    return parse_count(text)


def parse_pairs(text: str) -> dict[str, str]:
    """'a=1,b=2' -> {'a': '1', 'b': '2'}; empty text gives an empty dict."""
    pairs: dict[str, str] = {}
    for item in filter(None, (part.strip() for part in text.split(","))):
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ValueError(f"invalid item {item!r} in {text!r}: expected key=value")
        pairs[key.strip()] = value.strip()
    return pairs


def parse_capacity(text: str) -> dict[str, int]:
    """'cpu=4000m,ram=8GiB,gpu=1' -> {'cpu': 4000, 'ram': 8589934592, 'gpu': 1}."""
    capacity = {name: parse_resource(name, value) for name, value in parse_pairs(text).items()}
    for required in ("cpu", "ram"):
        if required not in capacity:
            raise ValueError(f"capacity {text!r} lacks {required}=...: cpu and ram are required")
    return capacity


def format_bytes(value: int) -> str:
    """Bytes as the largest exact binary unit, for messages: 268435456 -> '256MiB'."""
    for unit, size in (("TiB", 1024**4), ("GiB", 1024**3), ("MiB", 1024**2), ("KiB", 1024)):
        if value and value % size == 0:
            return f"{value // size}{unit}"
    return str(value)
