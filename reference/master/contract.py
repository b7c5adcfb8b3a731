"""The master's OpenAPI document made exact: typed request bodies, every status with its real body, the text answers as text.

The handlers read their bodies themselves (`Body(None)`, then `parse_job`, `parse_update`,
`MachineBody`, the users' and the quotas' own checks), so their error wording stays theirs; this module only says, in the
document, what they take and what they answer.
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import FastAPI, Path, Query
from fastapi.openapi.utils import get_openapi
from fastapi.responses import Response
from pydantic import BaseModel, ConfigDict, Field, RootModel, WithJsonSchema

from reference import execspec
from reference.allocspec import AllocSetSpec
from reference.jobspec import JobSpec, request_schema
from reference.master import access, logs, watch
from reference.master.machines import DrainBody, MachineBody
from reference.resources import CELL_MACHINES
from spec.model import Band

# --- the bodies of the errors ----------------------------------------------------------------


class FieldError(BaseModel):
    """One problem: the dotted path of what is wrong (empty for the whole request) and what to change."""

    field: str
    error: str


class ErrorBody(BaseModel):
    """Every error the API answers: `{"detail": [{"field", "error"}]}`."""

    detail: list[FieldError]


def detail(field: str, error: str) -> dict[str, Any]:
    """An `ErrorBody` of one problem."""
    return {"detail": [{"field": field, "error": error}]}


class GoneError(FieldError):
    floor: int = Field(description="the oldest revision this replica can replay")


class GoneBody(BaseModel):
    """A watch's `since` older than the replica can replay: list again, then watch from the list's revision."""

    detail: list[GoneError]
    floor: int


class Readiness(BaseModel):
    """`/readyz`: whether this replica would answer reads."""

    name: str
    ready: bool
    revision: int
    cache_age_s: float | None
    max_staleness_s: float
    reason: str | None = None


class JobUpdate(BaseModel):
    """`PATCH /v1/jobs/{user}/{name}`: a new task count, new request figures, or both (a rolling update)."""

    model_config = ConfigDict(extra="forbid")
    task_count: int | None = Field(default=None, ge=0, le=10000)
    request: Annotated[dict[str, Any], WithJsonSchema(request_schema())] | None = None


class UserBody(BaseModel):
    """`POST /v1/users`: the new user's name (its token is made by the master)."""

    model_config = ConfigDict(extra="forbid")
    name: str = Field(pattern=access.USER_NAME.pattern)


QUOTA_SCHEMA = {**request_schema(CELL_MACHINES), "examples": [{"cpu": "100", "ram": "512GiB"}]}


class QuotaBody(RootModel[Annotated[dict[str, Any], WithJsonSchema(QUOTA_SCHEMA)]]):
    """`PUT /v1/quotas/{user}/{band}`: the quota's figures as a job's request writes them, each at most
    what `CELL_MACHINES` machines hold; a resource left out is zero (`{}` admits nothing in the band)."""


class ExecBody(BaseModel):
    """`POST /v1/jobs/{user}/{name}/tasks/{index}/exec`: the command to run in the task, and its time limit."""

    model_config = ConfigDict(extra="forbid")
    command: list[str] = Field(
        min_length=1, max_length=execspec.MAX_ARGS,
        # The program (the first item) is not empty; no item holds a NUL byte.
        json_schema_extra={"prefixItems": [{"type": "string", "minLength": 1, "pattern": "^[^\\x00]*$"}], "items": {"type": "string", "pattern": "^[^\\x00]*$"}},
        description=f"the program and its arguments, no NUL byte, at most {execspec.MAX_ARGV_BYTES} bytes together; "
        "the program is looked up on the task's PATH",
    )  # fmt: skip
    timeout_s: float = Field(
        default=execspec.DEFAULT_TIMEOUT_S, gt=0, le=execspec.MAX_TIMEOUT_S,
        description="seconds the command may run; then it and its session are killed (SIGKILL)",
    )  # fmt: skip


class ExecResult(BaseModel):
    """What the command did: its exit code (128+N when killed by signal N, as a shell says it), its output as UTF-8 text (other bytes replaced), each cut at the cap."""

    task: str
    machine: str
    exit_code: int
    signal: int | None = None
    timed_out: bool = False
    stdout: str
    stderr: str
    stdout_truncated: bool = False
    stderr_truncated: bool = False
    duration_s: float


# Parameters whose bounds the handlers check themselves (with their own wording): the
# document states the bounds, FastAPI does not enforce them.
Index = Annotated[int, Path(json_schema_extra={"minimum": 0})]
Since = Annotated[int | None, Query(json_schema_extra={"minimum": 0})]
WatchTimeout = Annotated[float, Query(json_schema_extra={"exclusiveMinimum": 0, "maximum": watch.MAX_TIMEOUT_S})]
LogStream = Annotated[str, Query(json_schema_extra={"enum": ["stdout", "stderr"]})]
Tail = Annotated[int, Query(json_schema_extra={"minimum": 0, "maximum": logs.MAX_TAIL_LINES})]
EventTail = Annotated[int, Query(json_schema_extra={"minimum": 0, "maximum": watch.MAX_EVENT_TAIL})]
FollowFor = Annotated[float, Query(json_schema_extra={"exclusiveMinimum": 0, "maximum": logs.MAX_FOLLOW_S})]
QuotaUser = Annotated[str, Path(json_schema_extra={"pattern": f"^(?:\\*|{access.USER_NAME.pattern.strip('^$')})$"})]
QuotaBand = Annotated[str, Path(json_schema_extra={"enum": [b.value for b in Band if b is not Band.BEST_EFFORT]})]

RETRY_AFTER = {"Retry-After": {"description": "seconds to wait before retrying", "schema": {"type": "integer"}}}
CHALLENGE = {"WWW-Authenticate": {"description": '`Bearer realm="minborg"`', "schema": {"type": "string"}}}
BEARER = {"type": "http", "scheme": "bearer", "description": "a user's token (`minborg user add`) or the cell's admin token"}

_MEANING = {
    401: "no valid token: send `Authorization: Bearer <token>` (WWW-Authenticate says so)",
    403: "the job would exceed its user's quota in its priority band, or the caller may not do this: "
    "another user's job, or machines, quotas or users (the admin's)",
    404: "no such job, task, machine, BNS name or alloc (the one a job names)",
    409: "the request conflicts with the cell: a job or machine of that name exists, a task is already dead or (exec) not running, a machine still holds allocs",
    429: "the caller's user is over its rate limit on this replica (or, exec, the task's machine runs as many execs as it takes); retry after Retry-After seconds",
    410: "`since` is older than the oldest change this replica can replay",
    413: "the body is larger than the server takes (1 MiB by default: reference/wirelimits.py)",
    422: "invalid input: a body field, path or query parameter (an undeclared one included), named in `field`",
    502: "the task's machine did not answer or refused",
    503: "no leader, or this replica's cache is too old or below the revision floor asked for; retry (Retry-After)",
}


def answers(*statuses: int) -> dict[int | str, dict[str, Any]]:
    """The `responses` of an operation: 422 always (any operation refuses an undeclared query
    parameter), and each status given, with the body it really has."""
    out: dict[int | str, dict[str, Any]] = {}
    for status in (422, *statuses):
        out[status] = {"model": GoneBody if status == 410 else ErrorBody, "description": _MEANING[status]}
        if status == 503:
            out[status]["headers"] = RETRY_AFTER
    return out


# One server-sent event as a reader of the stream parses it; `data` is a JSON document.
SERVER_SENT_EVENT = {
    "type": "object",
    "properties": {"id": {"type": "string"}, "event": {"type": "string"}, "data": {"type": "string"}},
    "required": ["data"],
}


def text(media_type: str, description: str, status: int = 200) -> dict[int | str, dict[str, Any]]:
    """An answer that is text, not JSON: a stream of server-sent events, logs, Prometheus metrics."""
    schema = SERVER_SENT_EVENT if media_type == "text/event-stream" else {"type": "string"}
    return {status: {"description": description, "content": {media_type: {"schema": schema}}}}


class EventStream(Response):
    """What `GET /v1/events` answers, as the document names it (the stream itself is `watch.stream`'s)."""

    media_type = "text/event-stream"


# The request body of each operation that takes one, by the model that describes it.
BODIES: dict[tuple[str, str], type[BaseModel]] = {
    ("post", "/v1/jobs"): JobSpec,
    ("patch", "/v1/jobs/{user}/{name}"): JobUpdate,
    ("post", "/v1/machines"): MachineBody,
    ("post", "/v1/users"): UserBody,
    ("put", "/v1/quotas/{user}/{band}"): QuotaBody,
    ("post", "/v1/allocs"): AllocSetSpec,
    ("post", "/v1/machines/{name}/drain"): DrainBody,
    ("post", "/v1/jobs/{user}/{name}/tasks/{index}/exec"): ExecBody,
}

# Bodies that may be left out (an empty request body): a drain without a deadline.
OPTIONAL_BODIES = {("post", "/v1/machines/{name}/drain")}


def _component(model: type[BaseModel], schemas: dict[str, Any]) -> dict[str, str]:
    schema = model.model_json_schema(ref_template="#/components/schemas/{model}")
    schemas.update(schema.pop("$defs", {}))
    schemas[model.__name__] = schema
    return {"$ref": f"#/components/schemas/{model.__name__}"}


def document(app: FastAPI) -> dict[str, Any]:
    """The app's OpenAPI document with the typed bodies in, and FastAPI's own validation
    error schema out (this API never answers it)."""
    doc = get_openapi(title=app.title, version=app.version, routes=app.routes)
    schemas = doc.setdefault("components", {}).setdefault("schemas", {})
    for (method, path), model in BODIES.items():
        operation = doc["paths"][path][method]
        operation["requestBody"] = {
            "required": (method, path) not in OPTIONAL_BODIES,
            "content": {"application/json": {"schema": _component(model, schemas)}},
        }
        # Refused on the wire, before any handler runs (reference/wirelimits.py).
        operation["responses"]["413"] = {"description": _MEANING[413], "content": {
            "application/json": {"schema": {"$ref": f"#/components/schemas/{ErrorBody.__name__}"}}}}  # fmt: skip
    errors = {f"#/components/schemas/{model.__name__}" for model in (ErrorBody, GoneBody)}
    doc["components"].setdefault("securitySchemes", {})["bearer"] = BEARER
    error_ref = {"application/json": {"schema": {"$ref": f"#/components/schemas/{ErrorBody.__name__}"}}}
    for path, ops in doc["paths"].items():
        if not access.needs_token(path):
            continue
        for method, operation in ops.items():
            # The guard (master/guard.py) answers these before any handler runs. A dashboard
            # page without a token is its shell (200), not a 401: it declares no scheme.
            if not access.is_ui(path):
                operation["security"] = [{"bearer": []}]
            responses = operation["responses"]
            responses["401"] = {"description": _MEANING[401], "headers": CHALLENGE, "content": error_ref}
            responses["429"] = {"description": _MEANING[429], "headers": RETRY_AFTER, "content": error_ref}
            if access.may_be_refused(method, path):
                responses.setdefault("403", {"description": _MEANING[403], "content": error_ref})
    for operation in (op for ops in doc["paths"].values() for op in ops.values()):
        responses = operation["responses"]
        # Every operation refuses an undeclared query parameter, those of other modules too,
        # and none answers FastAPI's own validation error body.
        if "HTTPValidationError" in str(responses.get("422", "HTTPValidationError")):
            responses["422"] = {
                "description": _MEANING[422],
                "content": {"application/json": {"schema": {"$ref": f"#/components/schemas/{ErrorBody.__name__}"}}},
            }
        for answer in responses.values():
            # An error is JSON even where the operation's own answer is text (logs, events, metrics).
            content = answer.get("content", {})
            schema = next((c.get("schema") for c in content.values() if c.get("schema", {}).get("$ref") in errors), None)
            if schema is not None:
                answer["content"] = {"application/json": {"schema": schema}}
            elif "text/event-stream" in content:  # the events' own answer (its response class says only the type)
                content["text/event-stream"] = {"schema": SERVER_SENT_EVENT}
    for name in ("HTTPValidationError", "ValidationError"):
        schemas.pop(name, None)
    return doc


def install(app: FastAPI) -> None:
    """Serve `document(app)` at /openapi.json, built once on its first request."""

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            app.openapi_schema = document(app)
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]
