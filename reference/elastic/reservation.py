"""Borg's reservation estimate as a pure function: a task's reservation decays from its limit toward usage plus a margin.

Borg reclaims what a task requests but does not use: every few seconds the master sets
each task's reservation from its measured usage, and non-prod work may be placed into the
difference between requests and reservations. A reservation rises at once when usage
does (the margin must keep covering it) and falls only slowly, by exponential decay, so a
brief lull does not hand a task's resources to batch work that it will want back.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

from spec.model import CPU, RAM, Resources

# Borg's "medium" safety margin; the usage the borglet reports is a one-second CPU rate,
# so the margin also absorbs per-second noise.
DEFAULT_MARGIN = 0.25
DEFAULT_HALF_LIFE_S = 30.0
# The borglet's usage names for the resources a reservation is estimated for.
USAGE_KEYS = {CPU: "cpu_milli", RAM: "ram_bytes"}


def decay_factor(dt: float, half_life: float) -> float:
    """How much of the gap to the target remains after dt seconds (1.0: none decays)."""
    if half_life <= 0:
        return 0.0
    return math.pow(0.5, max(0.0, dt) / half_life)


def next_reservation(previous: int, usage: int, request: int, margin: float, factor: float) -> int:
    """One resource's next reservation.

    The target is usage * (1 + margin). Above the previous reservation it is taken at once;
    below, the reservation moves toward it by `factor` of the gap (exponential decay). The
    result is never below usage and never above the request; when usage exceeds the
    request, the request wins (a task cannot reserve more than it asked for).
    """
    usage, request = max(0, usage), max(0, request)
    target = math.ceil(usage * (1.0 + margin))
    if target >= previous:
        nxt = target
    else:
        # The gap shrinks in whole units, so repeated estimates reach the target exactly.
        nxt = target + math.floor((previous - target) * factor)
    return min(request, max(usage, nxt))


def estimate(
    previous: Resources,
    usage: Mapping[str, int],
    request: Resources,
    dt: float,
    *,
    margin: float = DEFAULT_MARGIN,
    half_life: float = DEFAULT_HALF_LIFE_S,
) -> Resources:
    """A task's next reservation from the previous one and the borglet's usage report.

    Only CPU and RAM are measured; every other resource (disk, ports, GPUs) stays reserved
    in full. A resource without a usage figure keeps its previous reservation.
    """
    factor = decay_factor(dt, half_life)
    out: dict[str, int] = {}
    for name, asked in request.items:
        key = USAGE_KEYS.get(name)
        if key is None or key not in usage:
            out[name] = min(asked, previous.get(name)) if name in previous.names() else asked
            continue
        out[name] = next_reservation(previous.get(name), int(usage[key]), asked, margin, factor)
    # In the request's order, which is by name: the normal form once zeros are left out.
    return Resources(tuple((name, amount) for name, amount in out.items() if amount))


def worth_writing(old: Resources, new: Resources, request: Resources, threshold: float = 0.02) -> bool:
    """Only a change of more than `threshold` of the request (in any resource) is written."""
    for name, asked in request.items:
        if abs(new.get(name) - old.get(name)) > threshold * asked:
            return True
    return False
