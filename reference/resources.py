"""Resource quantities read and written one way for every caller: CPU, bytes, GPUs and other counts, `key=value` lists.

CPU is held as milli-CPU. A bare number of CPU, an int, a float or a string, is cores, as
in Kubernetes and the job file: `4`, `0.5` and `"2"` are 4000, 500 and 2000 milli-CPU.
Milli-CPU is written with an `m` suffix: `"250m"`. A figure that already is milli-CPU (what
a borglet reports) goes through `cpu_from_milli`, which says so, never through `parse_cpu`.
RAM and disk are bytes, with an optional decimal or binary unit (`"1G"`, `"8GiB"`). GPUs,
ports and any other resource are whole counts. The job file, the borglet's, the master's and
the launcher's command lines, the machines API and the command line's tables all use these.

Every quantity read is bounded (docs/decisions.md, "Upper bounds on quantities"): at most
1,024 cores, 64 TiB of RAM, 1 PiB of disk and 65,536 of any count for one machine or one
task, and `CELL_MACHINES` times that for a quota; a non-finite or larger figure is refused
with `QuantityOutOfRange`, whose message says the bound.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping

TYPE_CHECKING = False
if TYPE_CHECKING:  # typing is imported by type checkers only: it costs the fast path's start
    from typing import Any

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
_BINARY_UNITS = (("TiB", 1024**4), ("GiB", 1024**3), ("MiB", 1024**2), ("KiB", 1024))

# A non-negative decimal number ('2', '0.5', '.5', '5.', '+2', '1e3'), then a unit. The job
# file read CPU strings with float(), so the forms float() takes stay accepted; a sign other
# than '+' does not (a negative quantity is never meant).
QUANTITY_PATTERN = r"^\s*\+?((?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?)\s*([a-zA-Z]*)\s*$"
_NUMBER_UNIT = re.compile(QUANTITY_PATTERN)

# Resources whose values are byte counts; everything else but CPU is a plain count.
BYTE_RESOURCES = frozenset({"ram", "disk"})

# The borglet reports usage under unit-suffixed names; they read as the resource they measure.
USAGE_NAMES = {"cpu_milli": "cpu", "ram_bytes": "ram", "disk_bytes": "disk"}


# --- bounds ----------------------------------------------------------------------------------

# The most one machine holds, and so the most one task can ask for: above any server built
# today (hundreds of cores, tens of TiB of RAM), so no real request is refused, and far below
# where a figure stops being exact or a job can only wait forever.
MAX_PER_MACHINE: dict[str, int] = {"cpu": 1024 * 1000, "ram": 64 * 1024**4, "disk": 1024**5}
MAX_COUNT = 65_536  # GPUs, ports or any other counted resource
# A quota spans the cell: at most this many machines' worth of each resource.
CELL_MACHINES = 100_000


class QuantityOutOfRange(ValueError):
    """A quantity that is not finite or is above its resource's bound; the message says the bound."""


def upper_bound(name: str, machines: int = 1) -> int:
    """The largest figure of resource `name` (canonical unit) that `machines` machines hold."""
    return MAX_PER_MACHINE.get(name, MAX_COUNT) * machines


def bound_rule(name: str, machines: int = 1) -> str:
    """What a figure of `name` must be, as an error says it: 'must be a finite number of cores, at most 1024'."""
    limit = upper_bound(name, machines)
    if name == "cpu":
        return f"must be a finite number of cores, at most {limit // 1000}"
    if name in BYTE_RESOURCES:
        return f"must be a finite byte quantity, at most {format_bytes(limit)}"
    return f"must be a whole number, at most {limit}"


def check_bound(name: str, value: int, machines: int = 1) -> int:
    """`value` (canonical unit) unchanged when within the bound of `machines` machines."""
    if value > upper_bound(name, machines):
        raise QuantityOutOfRange(bound_rule(name, machines))
    return value


# --- reading ---------------------------------------------------------------------------------


def parse_cpu(value: str | int | float) -> int:
    """Milli-CPU from cores ('4', 4, 0.5, '0.5') or milli-CPU with an 'm' suffix ('250m')."""
    if isinstance(value, bool):
        raise ValueError(f"invalid CPU quantity {value!r}")
    if isinstance(value, int | float) and value < 0:
        raise ValueError(f"invalid CPU quantity {value!r}: must not be negative")
    if isinstance(value, int):
        return value * 1000
    if isinstance(value, float):
        milli = value * 1000
    else:
        match = _NUMBER_UNIT.match(value) if isinstance(value, str) else None
        if not match or match.group(2) not in ("", "m"):
            raise ValueError(
                f"invalid CPU quantity {value!r}: use cores like '4' or milli-CPU like '4000m'"
            )
        milli = float(match.group(1)) * (1 if match.group(2) == "m" else 1000)
    if not math.isfinite(milli):  # NaN, or beyond what a float holds
        raise QuantityOutOfRange(bound_rule("cpu"))
    return round(milli)


def cpu_from_milli(value: int) -> int:
    """An integer that already is milli-CPU (a borglet's report), checked and kept as it is."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"invalid milli-CPU figure {value!r}: expected an integer")
    return value


def parse_bytes(text: str | int) -> int:
    """Bytes from '8GiB', '512MiB', '1G', '100k' or a plain number of bytes."""
    if isinstance(text, bool):
        raise ValueError(f"invalid byte quantity {text!r}")
    if isinstance(text, int):
        return text
    if isinstance(text, float) and not math.isfinite(text):
        raise QuantityOutOfRange(bound_rule("ram"))
    match = _NUMBER_UNIT.match(text) if isinstance(text, str) else None
    unit = match.group(2).lower() if match else None
    if not match or unit not in _BYTE_UNITS:
        raise ValueError(
            f"invalid byte quantity {text!r}: use a number with an optional unit such as 512MiB or 8GiB"
        )
    number = float(match.group(1)) * _BYTE_UNITS[unit]
    if not math.isfinite(number):
        raise QuantityOutOfRange(bound_rule("ram"))
    return round(number)


def parse_count(text: str | int) -> int:
    """A non-negative integer count such as a number of GPUs or ports."""
    try:
        value = int(text)
    except OverflowError:  # an infinite float
        raise QuantityOutOfRange(bound_rule("")) from None
    except (TypeError, ValueError):
        raise ValueError(f"invalid count {text!r}: use a whole number") from None
    if value < 0:
        raise ValueError(f"invalid count {text!r}: must not be negative")
    return value


def parse_resource(name: str, value: Any, machines: int = 1) -> int:
    """One named resource in its canonical unit (milli-CPU, bytes, or a count), within the
    bound of `machines` machines (1 for a machine or a task's request)."""
    read = parse_cpu if name == "cpu" else parse_bytes if name in BYTE_RESOURCES else parse_count
    try:
        return check_bound(name, read(value), machines)
    except QuantityOutOfRange:  # say this resource's bound, at this scale
        raise QuantityOutOfRange(bound_rule(name, machines)) from None


def _named(name: str, value: Any, read: Callable[[str, Any], int] = parse_resource) -> int:
    """`read(name, value)`, a bound's error naming the resource: 'cpu: must be ... at most 1024'."""
    try:
        return read(name, value)
    except QuantityOutOfRange as err:
        raise QuantityOutOfRange(f"{name}: {err}") from None


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
    """'cpu=4000m,ram=8GiB,gpu=1' -> {'cpu': 4000, 'ram': 8589934592, 'gpu': 1}; cpu=4 is 4 cores."""
    capacity = {name: _named(name, value) for name, value in parse_pairs(text).items()}
    for required in ("cpu", "ram"):
        if required not in capacity:
            raise ValueError(f"capacity {text!r} lacks {required}=...: cpu and ram are required")
    return capacity


def capacity_from_mapping(values: Mapping[str, Any]) -> dict[str, int]:
    """A capacity given as a mapping (a machine registered through the API), whose numbers are
    in canonical units: a number for CPU is milli-CPU, as a borglet reports its capacity, and
    every number is whole and not negative (4000.0 is 4000; 0.5 is refused); a string is read
    as written ('4000m' or '4' cores, '8GiB'). Each error begins with the resource's name,
    'cpu: ...', and a bound's is a `QuantityOutOfRange`."""
    out: dict[str, int] = {}
    for name, value in values.items():
        try:
            out[str(name)] = _named(str(name), value, read=_mapped_figure)
        except QuantityOutOfRange:
            raise  # named by _named
        except ValueError as err:
            raise ValueError(f"{name}: {err}") from None
    for required in ("cpu", "ram"):
        if required not in out:
            raise ValueError(f"capacity lacks {required}: cpu and ram are required")
    return out


_UNIT_OF_NUMBER = {"cpu": "milli-CPU", "ram": "bytes", "disk": "bytes"}


def _mapped_figure(name: str, value: Any) -> int:
    """One figure of a capacity mapping in its canonical unit; a number there already is in it."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return parse_resource(name, value)  # a string, read as written; anything else refused
    if not math.isfinite(value):
        raise QuantityOutOfRange(bound_rule(name))
    if value < 0:
        raise ValueError(f"must not be negative, not {value!r}")
    if value != int(value):
        unit = _UNIT_OF_NUMBER.get(name, "a count")
        hint = (f'; write {value:g} cores as the string "{value:g}" or "{round(value * 1000)}m"' if name == "cpu"
                else '; write a fraction of a unit as a string, like "1.5GiB"' if name in BYTE_RESOURCES else "")  # fmt: skip
        raise ValueError(f"a number here is {unit} and must be whole, not {value!r}{hint}")
    if name == "cpu":
        return check_bound(name, cpu_from_milli(int(value)))
    return parse_resource(name, int(value))


# --- writing ---------------------------------------------------------------------------------


def format_cpu(milli: int | float) -> str:
    """Milli-CPU with its 'm' suffix, the form every parser here reads back: 250 -> '250m'."""
    return f"{int(milli)}m"


def format_bytes(value: int) -> str:
    """Bytes in the largest binary unit that fits, one decimal when not exact: 8GiB, 1.5KiB."""
    for unit, size in _BINARY_UNITS:
        if value >= size:
            return f"{value // size}{unit}" if value % size == 0 else f"{value / size:.1f}{unit}"
    return str(value)


def format_quantity(name: str, value: Any) -> str:
    """One resource as a person reads it: milli-CPU with 'm', bytes with a binary unit."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return str(value)
    if name == "cpu":
        return format_cpu(value)
    if name in BYTE_RESOURCES:
        return format_bytes(int(value))
    return str(value)


def format_resources(values: Mapping[str, Any] | None) -> str:
    """{'cpu': 4000, 'ram': 8589934592} -> 'cpu=4000m ram=8GiB'; a borglet's usage names
    (cpu_milli, ram_bytes) read as the resource they measure; nothing at all is '-'."""
    if not values:
        return "-"
    if not isinstance(values, Mapping):
        return str(values)
    named = {USAGE_NAMES.get(k, k): v for k, v in values.items()}
    return " ".join(f"{k}={format_quantity(k, v)}" for k, v in sorted(named.items()))
