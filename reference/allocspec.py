"""An alloc set file: its schema (the body of `POST /v1/allocs`), its validation, and the spec allocs it asks for.

An alloc set reserves `resources` on each of `count` distinct machines (Borg's alloc set);
a job that names the set (`alloc: <name>` in its job file) runs its task i in alloc i.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, WithJsonSchema, field_validator

from reference.jobspec import (
    NAME_PATTERN,
    PRIORITY_SCHEMA,
    ConstraintSpec,
    JobFileError,
    parse_priority,
    parse_resource_mapping,
    request_schema,
    validation_errors,
)
from reference.resources import format_cpu
from spec.model import Alloc, Constraint, Resources

MAX_ALLOCS = 1000  # allocs in one set at most: each is one machine


class AllocSetSpec(BaseModel):
    """An alloc set file. After validation `priority` is an int and `resources` holds canonical units."""

    model_config = ConfigDict(extra="forbid")
    name: str = Field(pattern=NAME_PATTERN)
    user: str = Field(pattern=NAME_PATTERN)
    priority: Annotated[int, WithJsonSchema(PRIORITY_SCHEMA)] = 0
    count: int = Field(default=1, ge=1, le=MAX_ALLOCS)
    resources: Annotated[dict[str, int], WithJsonSchema(request_schema())] = Field(default_factory=dict)
    constraints: list[ConstraintSpec] = Field(default_factory=list)

    @field_validator("priority", mode="before")
    @classmethod
    def _priority(cls, value: Any) -> int:
        return parse_priority(value)

    @field_validator("resources", mode="before")
    @classmethod
    def _resources(cls, value: Any) -> dict[str, int]:
        # Read as a job's request is: "250m", "128MiB", plain counts.
        return parse_resource_mapping(value)

    @property
    def key(self) -> str:
        """The set's key, which jobs' `alloc` resolves to: "user/name"."""
        return f"{self.user}/{self.name}"

    def canonical(self) -> dict[str, Any]:
        """The set as JSON that parses back to it: CPU written "NNNm" (a bare number is cores)."""
        doc = self.model_dump(mode="json")
        doc["resources"] = {k: (format_cpu(v) if k == "cpu" else v) for k, v in sorted(self.resources.items())}
        doc["constraints"] = [{k: v for k, v in c.items() if v is not None} for c in doc["constraints"]]
        return doc

    def spec_constraints(self) -> tuple[Constraint, ...]:
        return tuple(c.to_spec() for c in self.constraints)

    def alloc(self, index: int, machine: str) -> Alloc:
        """The spec's alloc `index` of this set, on `machine`."""
        return Alloc(self.key, index, machine, Resources.of(self.resources), self.priority, self.user)


def parse_alloc_set(document: Any) -> AllocSetSpec:
    """Validate a parsed alloc set file (a mapping); JobFileError names every bad field."""
    if not isinstance(document, dict):
        raise JobFileError(
            "invalid alloc set file",
            [{"field": "", "error": "an alloc set file must be a mapping of fields (name, user, count, resources)"}],
        )
    try:
        return AllocSetSpec.model_validate(document)
    except ValidationError as exc:
        raise JobFileError("invalid alloc set file", validation_errors(exc)) from None


def load_alloc_file(path: str | Path) -> AllocSetSpec:
    """Read and validate a YAML (or JSON) alloc set file."""
    p = Path(path)
    try:
        document = yaml.safe_load(p.read_text(encoding="utf-8"))
    except OSError as err:
        raise JobFileError(f"cannot read alloc set file {p}: {err.strerror or err}") from None
    except yaml.YAMLError as err:
        raise JobFileError(f"{p} is not valid YAML: {err}") from None
    try:
        return parse_alloc_set(document)
    except JobFileError as err:
        raise JobFileError(f"invalid alloc set file {p}", err.errors) from None
