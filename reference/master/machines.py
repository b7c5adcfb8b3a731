"""The body of `POST /v1/machines` and the spec Machine it makes."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from reference import resources
from reference.jobspec import NAME_PATTERN
from reference.master.cell import MachineInfo
from spec.model import Machine, Resources


class MachineBody(BaseModel):
    """A machine joining the cell. `capacity` is "cpu=4000m,ram=8GiB" or a mapping; in a
    mapping an integer CPU is milli-CPU, as the borglet reports it."""

    model_config = ConfigDict(extra="forbid")
    name: str = Field(pattern=NAME_PATTERN)
    address: str = Field(pattern=r"^https?://[^/\s]+/?$")
    capacity: str | dict[str, Any]
    attrs: dict[str, str] = Field(default_factory=dict)
    failure_domain: str = ""


def parse_capacity(capacity: str | dict[str, Any]) -> dict[str, int]:
    """The body's capacity in canonical units (milli-CPU, bytes, counts)."""
    if isinstance(capacity, str):
        return resources.parse_capacity(capacity)
    return resources.capacity_from_mapping(capacity)


def machine_from_body(body: MachineBody) -> tuple[Machine, MachineInfo]:
    capacity = parse_capacity(body.capacity)
    machine = Machine(
        name=body.name,
        capacity=Resources.of(capacity),
        attrs=tuple(sorted(body.attrs.items())),
        failure_domain=body.failure_domain,
    )
    return machine, MachineInfo(address=body.address.rstrip("/"))
