"""Non-finite and absurd quantities are refused, with the field and the bound named, on every path that reads one."""

from __future__ import annotations

import math
from typing import Any

import pytest

from reference.jobspec import JobFileError, parse_job
from reference.master.cli import parse_quota
from reference.master.machines import MachineBody, machine_from_body
from reference.master.mutations import ApiError, parse_update
from reference.resources import (
    CELL_MACHINES,
    QuantityOutOfRange,
    bound_rule,
    capacity_from_mapping,
    parse_capacity,
    upper_bound,
)

# JSON's `Infinity` and `NaN` and a literal like 1e400 all reach the parsers as these floats.
NON_FINITE: list[Any] = [math.inf, -math.inf, math.nan]
# Each far above the bound (1,024 cores, 64 TiB, 65,536) but finite.
HUGE: dict[str, list[Any]] = {
    "cpu": [1e12, "1e12", "1e400", 10**30, "2000000m", 1025],
    "ram": [1e30, "1e30", "1e400", 10**30, "65TiB", "1e999GiB"],
    "disk": [1e30, "1e400", 10**30, "1025TiB"],
    "gpu": [1e30, 10**30, 65_537],
}
CPU_RULE = "must be a finite number of cores, at most 1024"


def job(request: dict[str, Any]) -> dict[str, Any]:
    return {"name": "web", "user": "alice", "command": ["sleep", "1"], "request": request}


def job_errors(request: dict[str, Any]) -> list[dict[str, str]]:
    with pytest.raises(JobFileError) as caught:
        parse_job(job(request))
    return caught.value.errors


def test_the_bounds_are_one_machine_and_a_quota_the_whole_cell() -> None:
    assert upper_bound("cpu") == 1_024_000  # milli-CPU: 1,024 cores
    assert upper_bound("ram") == 64 * 1024**4
    assert upper_bound("disk") == 1024**5
    assert upper_bound("gpu") == upper_bound("ports") == 65_536
    assert upper_bound("cpu", CELL_MACHINES) == 1_024_000 * CELL_MACHINES
    assert bound_rule("cpu") == CPU_RULE
    assert bound_rule("ram") == "must be a finite byte quantity, at most 64TiB"
    assert bound_rule("gpu") == "must be a whole number, at most 65536"


@pytest.mark.parametrize("value", [*NON_FINITE, *HUGE["cpu"]])
def test_job_file_cpu(value: Any) -> None:
    assert job_errors({"cpu": value}) == [{"field": "request.cpu", "error": CPU_RULE}]


@pytest.mark.parametrize(("name", "value"), [(n, v) for n in ("ram", "disk", "gpu") for v in (*NON_FINITE, *HUGE[n])])
def test_job_file_other_resources(name: str, value: Any) -> None:
    (error,) = job_errors({name: value})
    assert error == {"field": f"request.{name}", "error": bound_rule(name)}


def test_the_largest_request_is_accepted() -> None:
    spec = parse_job(job({"cpu": 1024, "ram": "64TiB", "disk": "1024TiB", "gpu": 65_536}))
    assert spec.request == {"cpu": 1_024_000, "ram": 64 * 1024**4, "disk": 1024**5, "gpu": 65_536}


@pytest.mark.parametrize(("name", "value"), [(n, v) for n in HUGE for v in (*NON_FINITE, *HUGE[n])])
def test_update_body(name: str, value: Any) -> None:
    with pytest.raises(ApiError) as caught:
        parse_update({"request": {name: value}})
    assert caught.value.status == 422
    assert caught.value.errors == [{"field": f"request.{name}", "error": bound_rule(name)}]


@pytest.mark.parametrize(
    "capacity",
    [
        "cpu=1e12,ram=8GiB", "cpu=1e400,ram=8GiB", "cpu=4,ram=1e30", "cpu=4,ram=8GiB,gpu=70000",
        {"cpu": math.inf, "ram": "8GiB"}, {"cpu": 10**30, "ram": "8GiB"}, {"cpu": "1e12", "ram": "8GiB"},
        {"cpu": 4000, "ram": math.inf}, {"cpu": 4000, "ram": 10**30}, {"cpu": 4000, "ram": 1, "gpu": math.inf},
        {"cpu": math.nan, "ram": 1},
    ],
)  # fmt: skip
def test_machine_body(capacity: str | dict[str, Any]) -> None:
    body = MachineBody(name="m1", address="http://127.0.0.1:1", capacity=capacity)
    with pytest.raises(ValueError, match=r"^(cpu|ram|gpu): must be a (finite|whole)"):
        machine_from_body(body)


def test_borglet_capacity_and_machine_mapping_name_the_resource() -> None:
    with pytest.raises(QuantityOutOfRange, match=f"^cpu: {CPU_RULE}$"):
        parse_capacity("cpu=2000,ram=8GiB")
    with pytest.raises(QuantityOutOfRange, match="^ram: must be a finite byte quantity, at most 64TiB$"):
        capacity_from_mapping({"cpu": 4000, "ram": 2**50})
    assert capacity_from_mapping({"cpu": 1_024_000, "ram": 64 * 1024**4}) == {"cpu": 1_024_000, "ram": 64 * 1024**4}


@pytest.mark.parametrize("text", ["cpu=inf", "cpu=1e400", "cpu=1e12", "ram=1e30", "gpu=1e30", "ram=1e999TiB"])
def test_quota(text: str) -> None:
    name = text.partition("=")[0]
    with pytest.raises(ValueError, match=f"^--default-quota {name}: must be a"):
        parse_quota(text)


def test_a_quota_may_hold_many_machines_worth() -> None:
    # 100 machines' worth of the largest: above one machine's bound, within the cell's.
    assert parse_quota("cpu=102400,ram=6400TiB").as_dict() == {"cpu": 102_400_000, "ram": 6400 * 1024**4}
