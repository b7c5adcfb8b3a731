"""Table tests of Borg's reservation estimate: decay from the limit toward usage plus a margin."""

from __future__ import annotations

import math

import pytest

from reference.elastic.reservation import decay_factor, estimate, next_reservation, worth_writing
from spec.model import Resources


@pytest.mark.parametrize(
    ("previous", "usage", "limit", "margin", "factor", "want"),
    [
        (1000, 100, 1000, 0.25, 0.5, 562),  # halfway from 1000 to 125, in whole units
        (1000, 100, 1000, 0.25, 0.0, 125),  # no memory: usage + margin at once
        (1000, 100, 1000, 0.25, 1.0, 1000),  # no decay: stays
        (125, 100, 1000, 0.25, 0.5, 125),  # at the target: stays
        (200, 400, 1000, 0.25, 0.5, 500),  # usage rose: up at once to usage + margin
        (900, 900, 1000, 0.25, 0.5, 1000),  # target above the request: the request
        (500, 1500, 1000, 0.25, 0.5, 1000),  # usage above the request: never above it
        (1000, 0, 1000, 0.25, 0.5, 500),  # idle task decays toward zero
        (10, 0, 1000, 0.25, 0.0, 0),
        (1000, 300, 1000, 0.0, 0.0, 300),  # no margin: never below usage
    ],
)
def test_next_reservation(previous: int, usage: int, limit: int, margin: float, factor: float, want: int) -> None:
    assert next_reservation(previous, usage, limit, margin, factor) == want


@pytest.mark.parametrize(("dt", "half_life", "want"), [(0, 30, 1.0), (30, 30, 0.5), (60, 30, 0.25), (5, 0, 0.0)])
def test_decay_factor(dt: float, half_life: float, want: float) -> None:
    assert math.isclose(decay_factor(dt, half_life), want)


def test_estimate_per_resource() -> None:
    request = Resources.of(cpu=1000, ram=512 * 2**20, disk=10**9)
    usage = {"cpu_milli": 100, "ram_bytes": 100 * 2**20}
    got = estimate(request, usage, request, dt=30.0, margin=0.25, half_life=30.0)
    assert got.get("cpu") == 562
    assert got.get("ram") == math.ceil((125 * 2**20 + 512 * 2**20) / 2)
    assert got.get("disk") == 10**9  # not measured: reserved in full
    # repeated estimates converge on usage * (1 + margin) and never go under usage
    r = request
    for _ in range(40):
        r = estimate(r, usage, request, dt=30.0, margin=0.25, half_life=30.0)
    assert r.get("cpu") == 125 and r.get("ram") >= 100 * 2**20


def test_estimate_keeps_previous_without_usage() -> None:
    request = Resources.of(cpu=1000, ram=1000)
    assert estimate(Resources.of(cpu=600, ram=1000), {}, request, dt=5.0) == Resources.of(cpu=600, ram=1000)


def test_worth_writing() -> None:
    req = Resources.of(cpu=1000, ram=1000)
    assert not worth_writing(Resources.of(cpu=1000, ram=1000), Resources.of(cpu=990, ram=1000), req)
    assert worth_writing(Resources.of(cpu=1000, ram=1000), Resources.of(cpu=900, ram=1000), req)
