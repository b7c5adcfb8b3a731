"""StepLoadShape driven by a fake runner and clock: steps advance, the trip stops the test and is recorded."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest

from loadtests import shape as shape_module
from loadtests.shape import StepLoadShape


class Entry:
    def __init__(self) -> None:
        self.response_times: dict[int, int] = {}
        self.num_requests = 0
        self.num_failures = 0

    def add(self, ms: int, n: int, failures: int = 0) -> None:
        self.response_times[ms] = self.response_times.get(ms, 0) + n
        self.num_requests += n + failures
        self.num_failures += failures


def make_shape(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[StepLoadShape, dict, list[float]]:
    clock = [1000.0]
    monkeypatch.setattr(shape_module.time, "monotonic", lambda: clock[0])
    entries = {("read: x", "GET"): Entry(), ("write: y", "POST"): Entry()}
    opts = SimpleNamespace(step_start=2, step_users=2, max_users=6, step_seconds=10.0,
                           slo_p95_ms=100.0, max_error_rate=0.01, shape_out=str(tmp_path / "s.json"))
    shape = StepLoadShape()
    shape.runner = SimpleNamespace(environment=SimpleNamespace(parsed_options=opts),
                                   stats=SimpleNamespace(entries=entries))
    return shape, entries, clock


def advance(shape: StepLoadShape, clock: list[float], seconds: float):
    out = None
    for _ in range(int(seconds)):
        clock[0] += 1.0
        out = shape.tick()
    return out


def test_steps_rise_then_the_slo_trips(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    shape, entries, clock = make_shape(tmp_path, monkeypatch)
    assert shape.tick()[0] == 2
    advance(shape, clock, 2)
    entries[("read: x", "GET")].add(5, 500)  # first step: fast
    assert advance(shape, clock, 8)[0] == 4  # the second step starts
    advance(shape, clock, 2)
    entries[("read: x", "GET")].add(5, 100)
    entries[("write: y", "POST")].add(400, 400)  # second step: p95 400 ms
    assert advance(shape, clock, 8) is None  # tripped: the test stops
    doc = json.loads((tmp_path / "s.json").read_text())
    assert [s["users"] for s in doc["steps"]] == [2, 4]
    assert doc["steps"][0]["requests"] == 500 and doc["steps"][1]["requests"] == 500
    assert doc["steps"][1]["groups"]["write"]["p95_ms"] == 400.0
    assert doc["verdict"]["reason"] == "p95_slo" and doc["verdict"]["users"] == 4


def test_errors_trip_and_the_maximum_ends(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    shape, entries, clock = make_shape(tmp_path, monkeypatch)
    shape.tick()
    for _users in (2, 4):
        advance(shape, clock, 2)
        entries[("read: x", "GET")].add(5, 1000)
        advance(shape, clock, 8)
    advance(shape, clock, 2)
    entries[("read: x", "GET")].add(5, 1000)
    assert advance(shape, clock, 8) is None  # 6 users was the maximum
    assert json.loads((tmp_path / "s.json").read_text())["verdict"]["reason"] == "max_users"

    shape, entries, clock = make_shape(tmp_path, monkeypatch)
    shape.tick()
    advance(shape, clock, 2)
    entries[("read: x", "GET")].add(5, 900, failures=100)
    assert advance(shape, clock, 8) is None
    assert json.loads((tmp_path / "s.json").read_text())["verdict"]["reason"] == "error_rate"
