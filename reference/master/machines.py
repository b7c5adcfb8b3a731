"""The body of `POST /v1/machines` and the spec Machine it makes."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, WithJsonSchema

from reference import resources
from reference.jobspec import NAME_PATTERN, RESOURCE_NAME_PATTERN, WRITTEN_QUANTITY, quantity_schema
from reference.master.cell import MachineInfo
from spec.model import Machine, Resources

# "cpu=4000m,ram=8GiB[,gpu=1...]" or a mapping with cpu and ram; the string form as the
# document states it lists cpu, then ram, then counts (the parser takes any order).
_WRITTEN = {k: v.strip("^$").replace("\\s*", "") for k, v in WRITTEN_QUANTITY.items()}
CAPACITY_SCHEMA: dict[str, Any] = {
    "anyOf": [
        {"type": "string",
         "pattern": f"^cpu=(?:{_WRITTEN['cpu']}),ram=(?:{_WRITTEN['bytes']})(?:,[a-z][a-z0-9_]{{0,15}}=[0-9]{{1,3}})*$",
         "examples": ["cpu=4000m,ram=8GiB"]},
        {"type": "object", "required": ["cpu", "ram"], "propertyNames": {"pattern": RESOURCE_NAME_PATTERN},
         "properties": {n: quantity_schema(n, number="milli") for n in ("cpu", "ram", "disk")},
         "additionalProperties": quantity_schema("")},
    ],
}  # fmt: skip


# A borglet's URL: a host name, an IPv4 address or a bracketed IPv6 one (each form RFC 4291
# writes, without an embedded IPv4), then an optional port (1-65535). A path is allowed:
# hollow machines (scale tests) share one server, each under its own. Exact, so that every
# address the document allows is one `urlsplit` and the borglet's client can read.
_PORT = r"(?:6553[0-5]|655[0-2][0-9]|65[0-4][0-9]{2}|6[0-4][0-9]{3}|[1-5][0-9]{4}|[1-9][0-9]{0,3})"
_H = "[0-9A-Fa-f]{1,4}"
_IPV6 = "(?:" + "|".join([
    f"(?:{_H}:){{7}}{_H}", f"(?:{_H}:){{1,7}}:", f"(?:{_H}:){{1,6}}:{_H}", f"(?:{_H}:){{1,5}}(?::{_H}){{1,2}}",
    f"(?:{_H}:){{1,4}}(?::{_H}){{1,3}}", f"(?:{_H}:){{1,3}}(?::{_H}){{1,4}}", f"(?:{_H}:){{1,2}}(?::{_H}){{1,5}}",
    f"{_H}:(?::{_H}){{1,6}}", f":(?:(?::{_H}){{1,7}}|:)",
]) + ")"  # fmt: skip
_HOST = rf"(?:[A-Za-z0-9](?:[A-Za-z0-9.-]*[A-Za-z0-9])?|\[{_IPV6}\])"
ADDRESS_PATTERN = rf"^https?://{_HOST}(?::{_PORT})?(?:/[A-Za-z0-9._~-]+)*/?$"


class MachineBody(BaseModel):
    """A machine joining the cell. `capacity` is "cpu=4000m,ram=8GiB" or a mapping; in a
    mapping a number is in the canonical unit and whole (CPU in milli-CPU, as the borglet
    reports it: 4000 or 4000.0, never 0.5), and a string is read as written ("4", "500m")."""

    model_config = ConfigDict(extra="forbid")
    name: str = Field(pattern=NAME_PATTERN)
    address: str = Field(pattern=ADDRESS_PATTERN)
    capacity: Annotated[str | dict[str, Any], WithJsonSchema(CAPACITY_SCHEMA)]
    attrs: dict[str, str] = Field(default_factory=dict)
    failure_domain: str = ""


MAX_DRAIN_DEADLINE_S = 7 * 24 * 3600.0  # a week: a longer maintenance is a removal


class DrainBody(BaseModel):
    """`POST /v1/machines/{name}/drain` (master/drain.py): optionally, seconds after which the
    tasks still on the machine are evicted whatever their jobs' budgets; without it, the drain
    waits for them. An empty body is a drain without a deadline."""

    model_config = ConfigDict(extra="forbid")
    deadline_s: float | None = Field(default=None, gt=0, le=MAX_DRAIN_DEADLINE_S)


def parse_capacity(capacity: str | dict[str, Any]) -> dict[str, int]:
    """The body's capacity in canonical units (milli-CPU, bytes, counts)."""
    if isinstance(capacity, str):
        return resources.parse_capacity(capacity)
    return resources.capacity_from_mapping(capacity)


def capacity_error(capacity: str | dict[str, Any], error: ValueError) -> dict[str, str]:
    """The field error of a capacity refused: a mapping's figure is named by its path
    (`capacity.cpu`), the whole string or a missing resource by `capacity`."""
    name, sep, rest = str(error).partition(": ")
    if sep and isinstance(capacity, dict) and name in capacity:
        return {"field": f"capacity.{name}", "error": rest}
    return {"field": "capacity", "error": str(error)}


def machine_from_body(body: MachineBody) -> tuple[Machine, MachineInfo]:
    capacity = parse_capacity(body.capacity)
    machine = Machine(
        name=body.name,
        capacity=Resources.of(capacity),
        attrs=tuple(sorted(body.attrs.items())),
        failure_domain=body.failure_domain,
    )
    return machine, MachineInfo(address=body.address.rstrip("/"))
