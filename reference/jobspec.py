"""The job file (Borg's BCL, written in YAML): a strict pydantic model, its loader and its errors.

A job file names a job, its user, priority, task count, per-task request and the command its
tasks run. Quantities are read by `reference.resources`: CPU as cores (`0.25`, `2`) or milli-CPU
(`"250m"`), RAM and disk as bytes with an optional unit (`"128MiB"`), other resources as
counts. A number for CPU means cores, as in Kubernetes, so `cpu: 1` asks for a whole core.
Unknown fields are refused, so a typo is an error rather than a silently ignored line.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    WithJsonSchema,
    field_validator,
    model_validator,
)

from reference import jobtext
from reference.resources import (
    BYTE_RESOURCES,
    QuantityOutOfRange,
    bound_rule,
    format_cpu,
    parse_resource,
    upper_bound,
)
from spec.model import (
    BAND_FLOOR,
    MAX_PRIORITY,
    AppClass,
    Band,
    Constraint,
    ConstraintOp,
    Job,
    Resources,
    RestartPolicy,
)

# Names become parts of etcd keys and BNS names (<index>.<job>.<user>.<cell>.minborg), so
# they may hold neither '/' nor '.'.
NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_-]{0,62}$"
_NAME_RE = re.compile(NAME_PATTERN)
NAME_RULE = "must be 1-63 letters, digits, '-' or '_', starting with a letter or digit"
RESOURCE_NAME_PATTERN = r"^[a-z][a-z0-9_]*$"

# A task's command, arguments, environment and working directory reach execve(2) and chdir(2)
# as C strings: a NUL byte would end one early (Python refuses it with "embedded null byte"),
# and an environment entry is NAME=VALUE, so a name holds no '=' and is not empty. Accepted,
# such a string failed the borglet's start of a whole batch of tasks; they are refused here,
# in the API, the dry run and the CLI's own check alike, with the field named.
NUL_FREE_PATTERN = r"^[^\x00]*$"
ENV_NAME_PATTERN = r"^[^=\x00]+$"
NUL_ERROR = "contains a NUL byte; remove it"


def kernel_string(value: str) -> str:
    """`value` if the kernel can take it as a C string (no NUL byte), else ValueError."""
    if "\x00" in value:
        raise ValueError(NUL_ERROR)
    return value


def env_name(value: str) -> str:
    """`value` if it can name an environment variable (not empty, no '=', no NUL), else ValueError."""
    if not value:
        raise ValueError("a variable's name must not be empty")
    if "\x00" in value:
        raise ValueError(f"the variable's name {NUL_ERROR}")
    if "=" in value:
        raise ValueError("a variable's name cannot contain '=' (the kernel reads NAME=VALUE); rename it")
    return value


KERNEL_STRING_SCHEMA: dict[str, Any] = {"type": "string", "pattern": NUL_FREE_PATTERN}
KernelString = Annotated[str, AfterValidator(kernel_string), WithJsonSchema(KERNEL_STRING_SCHEMA)]
EnvName = Annotated[str, AfterValidator(env_name)]
ENV_SCHEMA: dict[str, Any] = {
    "type": "object",
    "propertyNames": {"pattern": ENV_NAME_PATTERN},
    "additionalProperties": KERNEL_STRING_SCHEMA,
}


class JobFileError(ValueError):
    """A job file that cannot be read or is invalid; `errors` holds one {field, error} each."""

    def __init__(self, message: str, errors: list[dict[str, str]] | None = None) -> None:
        self.errors = errors or [{"field": "", "error": message}]
        detail = "; ".join(f"{e['field'] or '(file)'}: {e['error']}" for e in self.errors)
        super().__init__(f"{message}: {detail}" if errors else message)

    def body(self) -> dict[str, Any]:
        """The API's error body for this error."""
        return {"detail": self.errors}


# What `ConstraintSpec._one_value_form` checks, as JSON Schema states it: a string `value` or a
# non-empty `values` list (the other absent or null), and one value only for eq and ne.
_ONE_VALUE_FORM: dict[str, Any] = {
    "anyOf": [
        {"required": ["value"], "properties": {"value": {"type": "string"}, "values": {"type": "null"}}},
        {"required": ["values"], "properties": {"value": {"type": "null"}, "values": {"type": "array", "minItems": 1}},
         "anyOf": [{"properties": {"values": {"maxItems": 1}}},
                   {"required": ["op"], "properties": {"op": {"enum": [ConstraintOp.IN.value, ConstraintOp.NOT_IN.value]}}}]},
    ]
}  # fmt: skip


class ConstraintSpec(BaseModel):
    """A hard constraint on a machine attribute: `{attr, op, value}` or `{attr, op, values}`."""

    model_config = ConfigDict(extra="forbid", json_schema_extra=_ONE_VALUE_FORM)
    attr: str = Field(min_length=1)
    op: ConstraintOp = ConstraintOp.EQ
    value: str | None = None
    values: list[str] | None = None

    @model_validator(mode="after")
    def _one_value_form(self) -> ConstraintSpec:
        if (self.value is None) == (self.values is None):
            raise ValueError("give exactly one of value (a string) or values (a list)")
        vals = self.all_values()
        if not vals:
            raise ValueError("values must not be empty")
        if self.op in (ConstraintOp.EQ, ConstraintOp.NE) and len(vals) != 1:
            raise ValueError(f"op {self.op.value} takes exactly one value")
        return self

    def all_values(self) -> tuple[str, ...]:
        return (self.value,) if self.value is not None else tuple(self.values or ())

    def to_spec(self) -> Constraint:
        return Constraint(self.attr, self.op, self.all_values())


class AutoscaleMetric(StrEnum):
    """What the job autoscaler reads: CPU in percent of the request, or requests/s per task."""

    CPU = "cpu"
    REQUESTS_PER_TASK = "requests_per_task"


class AutoscaleSpec(BaseModel):
    """Horizontal autoscaling: keep `metric` per task near `target` with between min and max tasks.

    `target` is a CPU utilization in percent of the request for `cpu` (70 means 0.7 of the
    request), requests per second per task for `requests_per_task`. Cooldowns are seconds since
    the job's last resize; a scale-down goes only as low as the highest recommendation of the
    last `stabilization_s` seconds; `drain_s` is how long a task leaving is kept out of the
    endpoints and BNS before it is stopped (longer than clients' endpoint refresh).
    """

    # A cpu target is at most 1000 percent, as `_bounds` checks; `max` at least `min` is a rule
    # between two figures that JSON Schema cannot state, so the document says it in words.
    model_config = ConfigDict(extra="forbid", json_schema_extra={"anyOf": [
        {"properties": {"metric": {"const": "requests_per_task"}}},
        {"properties": {"target": {"maximum": 1000}}},
    ]})  # fmt: skip
    min: int = Field(ge=1, le=10000)
    max: int = Field(ge=1, le=10000, description="at least `min` (a request with `max` below `min` is refused, 422)")
    metric: AutoscaleMetric
    target: float = Field(gt=0)
    scale_up_cooldown: float = Field(default=5.0, ge=0, le=3600)
    scale_down_cooldown: float = Field(default=30.0, ge=0, le=3600)
    stabilization_s: float = Field(default=10.0, ge=0, le=3600)
    drain_s: float = Field(default=6.0, ge=0, le=600)

    @model_validator(mode="after")
    def _bounds(self) -> AutoscaleSpec:
        if self.max < self.min:
            raise ValueError(f"max ({self.max}) must be at least min ({self.min})")
        if self.metric is AutoscaleMetric.CPU and self.target > 1000:
            raise ValueError("a cpu target is percent of the request: 1..1000, e.g. 70")
        return self


class HealthCheckSpec(BaseModel):
    """An HTTP probe of each task: GET http://127.0.0.1:<port><path> every interval_s."""

    model_config = ConfigDict(extra="forbid")
    path: str = Field(default="/healthz", pattern=r"^/")
    interval_s: float = Field(default=1.0, gt=0, le=3600)


def parse_priority(value: Any) -> int:
    """0..399, or a band name meaning that band's floor (production -> 200)."""
    if isinstance(value, bool):
        raise ValueError("must be an integer 0..399 or a band name")
    if isinstance(value, str) and not value.strip().isdigit():
        try:
            return BAND_FLOOR[Band(value.strip().lower())]
        except ValueError:
            bands = ", ".join(b.value for b in Band)
            raise ValueError(f"unknown band {value!r}: use 0..399 or one of {bands}") from None
    try:
        number = int(value)
    except (TypeError, ValueError):
        raise ValueError("must be an integer 0..399 or a band name") from None
    if isinstance(value, float) and value != number:
        raise ValueError("must be a whole number")
    if not 0 <= number <= MAX_PRIORITY:
        raise ValueError(f"must be between 0 and {MAX_PRIORITY}, got {number}")
    return number


def parse_request_value(name: str, value: Any, machines: int = 1) -> int:
    """One resource of a task's request in its canonical unit (milli-CPU, bytes, count), at
    most what `machines` machines hold (1 for a request; a quota spans the cell)."""
    if isinstance(value, bool) or value is None:
        raise ValueError("must be a quantity like 500m or 2")
    if isinstance(value, float) and not math.isfinite(value):
        raise QuantityOutOfRange(bound_rule(name, machines))
    if name == "cpu":
        if isinstance(value, int | float) and value < 0:
            raise ValueError("must not be negative")
        try:
            return parse_resource(name, value, machines)  # a number is cores; "250m" is milli-CPU
        except QuantityOutOfRange:
            raise
        except ValueError:
            raise ValueError("must be a quantity like 500m or 2") from None
    if isinstance(value, float):
        if value != int(value):
            raise ValueError("must be a whole number or a quantity like 128MiB")
        value = int(value)
    if isinstance(value, int) and value < 0:
        raise ValueError("must not be negative")
    try:
        return parse_resource(name, value, machines)
    except QuantityOutOfRange:
        raise
    except ValueError as err:
        if name in BYTE_RESOURCES:
            raise ValueError("must be a byte quantity like 128MiB or 2GiB") from err
        raise ValueError("must be a whole number") from err


def parse_resource_mapping(value: Any) -> dict[str, int]:
    """A mapping of resources as a job's request is written ("250m", "128MiB", plain counts),
    in canonical units; ValueError naming every resource at fault. None is the empty mapping."""
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise ValueError("must be a mapping such as {cpu: 250m, ram: 128MiB}")
    out: dict[str, int] = {}
    errors = []
    for name, amount in value.items():
        if not isinstance(name, str) or not re.fullmatch(RESOURCE_NAME_PATTERN, name):
            errors.append(f"resource name {name!r} must be lower-case letters, digits, '_'")
            continue
        try:
            out[name] = parse_request_value(name, amount)
        except ValueError as err:
            errors.append(f"{name}: {err}")
    if errors:
        raise ValueError("; ".join(errors))
    return out


# Quantities as written, within their bounds: a subset of what `reference.resources` reads
# (it also takes exponents and larger units), small enough that a generator of valid
# examples stays within the bounds.
WRITTEN_QUANTITY = {
    "cpu": r"^\s*\+?(?:(?:[0-9]{1,3}(?:\.[0-9]*)?|\.[0-9]+)|[0-9]{1,6}(?:\.[0-9]*)?m)\s*$",  # cores, or milli-CPU
    "bytes": r"^\s*\+?[0-9]{1,4}(?:\.[0-9]*)?\s*(?:[bB]|[kKmMgG][iI]?[bB]?)?\s*$",  # at most 9999 GiB
    "count": r"^\s*\+?[0-9]{1,4}\s*$",
}


def quantity_schema(name: str, machines: int = 1, number: str = "cores") -> dict[str, Any]:
    """The JSON Schema of one resource's figure as written: a number (CPU in cores, or in
    milli-CPU where `number` is "milli", as in a machine's capacity) or a string with its unit."""
    limit = upper_bound(name, machines)
    if name == "cpu":
        figure = ({"type": "number", "minimum": 0, "maximum": limit // 1000} if number == "cores"
                  else {"type": "integer", "minimum": 0, "maximum": limit})  # fmt: skip
        return {"anyOf": [figure, {"type": "string", "pattern": WRITTEN_QUANTITY["cpu"]}]}
    kind = "bytes" if name in BYTE_RESOURCES else "count"
    return {"anyOf": [{"type": "integer", "minimum": 0, "maximum": limit}, {"type": "string", "pattern": WRITTEN_QUANTITY[kind]}]}


def request_schema(machines: int = 1, nullable: bool = False) -> dict[str, Any]:
    """The JSON Schema of a request as written (before it is read into canonical units), each
    figure at most what `machines` machines hold; `nullable` for a job file's, where null (a
    YAML `request:` left empty) is the empty request."""
    return {
        "type": ["object", "null"] if nullable else "object",
        "propertyNames": {"pattern": RESOURCE_NAME_PATTERN},
        "properties": {name: quantity_schema(name, machines) for name in ("cpu", *sorted(BYTE_RESOURCES))},
        "additionalProperties": quantity_schema("", machines),
        "examples": [{"cpu": "250m", "ram": "128MiB"}],
    }


PRIORITY_SCHEMA: dict[str, Any] = {
    "anyOf": [
        {"type": "integer", "minimum": 0, "maximum": MAX_PRIORITY},
        {"type": "string", "enum": [b.value for b in Band]},
    ],
    "default": 0,
}


# The job file's fields the spec knows only through `Job.template`: a change to any of them
# replaces the job's tasks by a rolling update.
RESTART_FIELDS = ("command", "env", "cwd", "image", "health_check", "pids_max")


class JobSpec(BaseModel):
    """A job file. After validation `priority` is an int and `request` holds canonical units."""

    model_config = ConfigDict(extra="forbid")
    name: str = Field(pattern=NAME_PATTERN)
    user: str = Field(pattern=NAME_PATTERN)
    priority: Annotated[int, WithJsonSchema(PRIORITY_SCHEMA)] = 0
    task_count: int = Field(default=1, ge=0, le=10000)
    request: Annotated[dict[str, int], WithJsonSchema(request_schema(nullable=True))] = Field(default_factory=dict)
    # The program (first item) must hold a non-space: `prefixItems` states it, with the NUL rule
    # that `items` states for the arguments after it.
    command: list[KernelString] = Field(min_length=1, json_schema_extra={
        "prefixItems": [{"type": "string", "pattern": r"\S", "allOf": [{"pattern": NUL_FREE_PATTERN}]}],
    })  # fmt: skip
    env: Annotated[dict[EnvName, KernelString], WithJsonSchema(ENV_SCHEMA)] = Field(default_factory=dict)
    cwd: KernelString | None = None
    constraints: list[ConstraintSpec] = Field(default_factory=list)
    restart_policy: RestartPolicy = Field(default=RestartPolicy.ON_FAILURE, description=(
        "never; on_failure: after a non-zero exit, a signal, an OOM kill, a spawn failure or a loss; always: after a"
        " finish as well. Restarts back off: the borglet restarts a process in place after 0.1 s doubling to 10 s"
        " (reset after a 10 s run); the master makes a new incarnation at once after a first failure, then after 1 s"
        " doubling to 60 s (reset after a 60 s run); meanwhile the task shows BACKOFF with its last exit and when it"
        " is tried next"
    ))  # fmt: skip
    appclass: AppClass = AppClass.BATCH
    health_check: HealthCheckSpec | None = None
    package: str = ""
    # A container image the tasks run in on a borglet of the docker runtime (borglet/containers.py).
    image: str = Field(default="", pattern=r"^([a-z0-9][a-z0-9._/-]*(:[A-Za-z0-9._-]+)?)?$", max_length=255)
    # The name of one of the user's alloc sets: task i runs in alloc i of the set.
    alloc: str | None = Field(default=None, pattern=NAME_PATTERN)
    autoscale: AutoscaleSpec | None = None
    # How many processes and threads each task may have at once (its pids cgroup, a container's
    # pids limit): a fork bomb stops there. The default is a container's (borglet/containers.py).
    pids_max: int = Field(default=1024, ge=1, le=1_000_000)
    max_unavailable: int = Field(default=1, ge=1, le=10000, description=(
        "how many of the job's tasks a rolling update (`job run` of a changed file) or a machine drain may take"
        " down at once; 1 by default: one task is replaced, and confirmed running (and healthy, with a health"
        " check), before the next"
    ))  # fmt: skip

    @field_validator("priority", mode="before")
    @classmethod
    def _priority(cls, value: Any) -> int:
        return parse_priority(value)

    @field_validator("task_count", "pids_max", "max_unavailable", mode="before")
    @classmethod
    def _whole(cls, value: Any) -> Any:
        # A count is a JSON integer (3 or 3.0), never true/false nor a string.
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise ValueError("must be a whole number, e.g. 3")
        return value

    @field_validator("request", mode="before")
    @classmethod
    def _request(cls, value: Any) -> dict[str, int]:
        return parse_resource_mapping(value)

    @field_validator("command")
    @classmethod
    def _command(cls, value: list[str]) -> list[str]:
        if not value[0].strip():
            raise ValueError("the program (first item) must not be empty")
        return value

    @property
    def key(self) -> str:
        return f"{self.user}/{self.name}"

    def resources(self) -> Resources:
        return Resources.of(self.request)

    def to_spec_job(self, version: int = 0) -> Job:
        """The spec's view of this job: what admission, scheduling and invariants look at."""
        return Job(
            user=self.user,
            name=self.name,
            priority=self.priority,
            task_count=self.task_count,
            request=self.resources(),
            constraints=tuple(c.to_spec() for c in self.constraints),
            restart_policy=self.restart_policy,
            appclass=self.appclass,
            alloc=None if self.alloc is None else f"{self.user}/{self.alloc}",  # the set's key
            # A job's image is its package where it names no other: a machine holding the image
            # is preferred (scheduler/terms.py, package_holders).
            package=self.package or self.image,
            version=version,
            max_unavailable=self.max_unavailable,
            template=self.template(),
        )

    def template(self) -> str:
        """A digest of what the spec does not model and a task must restart to take (its
        command, environment, directory, image, health check, pids limit)."""
        fields = {k: v for k, v in self.canonical().items() if k in RESTART_FIELDS}
        return hashlib.sha256(json.dumps(fields, sort_keys=True).encode()).hexdigest()[:12]

    def canonical(self) -> dict[str, Any]:
        """The job as JSON with canonical quantities: CPU as "NNNm", bytes and counts as ints.

        Parsing this again gives the same JobSpec (CPU is written as a string so it is not
        mistaken for cores)."""
        doc = self.model_dump(mode="json", exclude_none=False)
        doc["request"] = {
            k: (format_cpu(v) if k == "cpu" else v) for k, v in sorted(self.request.items())
        }
        doc["constraints"] = [
            {k: v for k, v in c.items() if v is not None} for c in doc["constraints"]
        ]
        return doc


# --- errors in the API's shape -------------------------------------------------------------


def field_path(loc: tuple[Any, ...]) -> str:
    """('request', 'cpu') -> 'request.cpu'; ('constraints', 0, 'op') -> 'constraints.0.op';
    ('env', 'A=B', '[key]') -> 'env.A=B'. A part that is not printable is escaped ('\\x00')."""
    return ".".join(_printable(str(part)) for part in loc if part not in ("body", "[key]", ""))


def _printable(text: str) -> str:
    return text if text.isprintable() else text.encode("unicode_escape").decode("ascii")


def validation_errors(exc: ValidationError) -> list[dict[str, str]]:
    """One {field, error} per problem, with the field as a dotted path into the job file."""
    out = []
    for err in exc.errors(include_url=False):
        loc = tuple(err.get("loc", ()))
        message = str(err.get("msg", "invalid"))
        message = message.removeprefix("Value error, ")
        if err.get("type") == "extra_forbidden":
            message = "unknown field (check the spelling; extra fields are not allowed)"
        elif err.get("type") == "missing":
            message = "required field is missing"
        elif err.get("type") == "string_pattern_mismatch" and loc and loc[-1] in ("name", "user"):
            message = NAME_RULE
        # A request error names the resource in its message; point the path at it.
        if loc and loc[-1] == "request" and ":" in message:
            resource, _, rest = message.partition(":")
            if "; " not in message and re.match(r"^[a-z][a-z0-9_]*$", resource):
                loc, message = (*loc, resource), rest.strip()
        out.append({"field": field_path(loc), "error": message})
    return out


def error_body(exc: ValidationError) -> dict[str, Any]:
    """The `{"detail": [{"field", "error"}]}` body of docs/api.md for a validation error."""
    return {"detail": validation_errors(exc)}


def parse_job(document: Any) -> JobSpec:
    """Validate a parsed job file (a mapping); JobFileError names every bad field."""
    if not isinstance(document, dict):
        raise JobFileError(
            "invalid job file",
            [{"field": "", "error": "a job file must be a mapping of fields (name, user, ...)"}],
        )
    try:
        return JobSpec.model_validate(document)
    except ValidationError as exc:
        raise JobFileError("invalid job file", validation_errors(exc)) from None


def load_job_file(path: str | Path) -> JobSpec:
    """Read and validate a YAML (or JSON) job file."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except OSError as err:
        raise JobFileError(f"cannot read job file {p}: {err.strerror or err}") from None
    try:
        document = jobtext.parse(text)
    except jobtext.NotParsed as err:
        raise JobFileError(f"{p} is not valid YAML: {err}") from None
    try:
        return parse_job(document)
    except JobFileError as err:
        raise JobFileError(f"invalid job file {p}", err.errors) from None


def json_schema() -> dict[str, Any]:
    """The JSON Schema of a job file (for editors and the CLI's `job schema`), with `$schema`,
    `$id` and a description of every field (reference/jobschema.py)."""
    from reference.jobschema import document

    return document(JobSpec.model_json_schema())


def is_valid_name(text: str) -> bool:
    return bool(_NAME_RE.fullmatch(text))


def dumps(spec: JobSpec) -> str:
    return json.dumps(spec.canonical(), sort_keys=True)


__all__ = [
    "AutoscaleMetric",
    "AutoscaleSpec",
    "ConstraintSpec",
    "HealthCheckSpec",
    "JobFileError",
    "JobSpec",
    "error_body",
    "json_schema",
    "load_job_file",
    "parse_job",
    "validation_errors",
]
