"""The etcd key layout of a cell and the JSON records of its machines, jobs, tasks, quotas and allocs (schema 1).

Under `/minborg/<cell>/`:

    leader                                  the election key: "name=url" of the leader, on its lease
    replicas/<name>                         {"name","url"} of each live replica, on its own lease
    state/machines/<name>                   a machine: spec fields + address, isolation, usage
    state/jobs/<user>/<name>                a job: spec fields + the job file + submitted_at
    state/tasks/<user>/<name>/<index>/<inc> a task incarnation: spec fields + runtime facts + history
    state/quotas/<user>/<band>              a quota: resource -> amount
    state/allocs/<user>/<set>/<index>       alloc <index> of alloc set <user>/<set>: spec fields
    users/<name>                            a user: the SHA-256 of its token, whether it is the admin

Every record carries "schema": 1; a record of another schema is refused loudly rather than
misread. Keys are written only by the leader's fenced transactions (replicas/ and users/
excepted: a user is not cell state, and any replica adds or revokes one in etcd directly).
"""

from __future__ import annotations

import functools
import json
from typing import Any

from reference import fastjson
from reference.jobspec import JobSpec
from reference.master.access import UserRecord
from reference.master.cell import JobInfo, MachineInfo, TaskInfo, task_info_of
from spec.model import (
    Alloc,
    AppClass,
    Band,
    Constraint,
    ConstraintOp,
    DeathCause,
    Job,
    Machine,
    QuotaKey,
    Resources,
    RestartPolicy,
    Task,
    TaskId,
    TaskState,
)

SCHEMA = 1


class SchemaError(ValueError):
    """A stored record this master cannot read (another schema version, or corrupt)."""


class Keys:
    """The key names of one cell."""

    def __init__(self, cell: str) -> None:
        self.root = f"/minborg/{cell}/"
        self.leader = self.root + "leader"
        self.replicas = self.root + "replicas/"
        self.scheduler = self.root + "scheduler"  # the active scheduler process's lease
        self.state = self.root + "state/"
        self.machines = self.state + "machines/"
        self.jobs = self.state + "jobs/"
        self.tasks = self.state + "tasks/"
        self.quotas = self.state + "quotas/"
        self.allocs = self.state + "allocs/"
        self.users = self.root + "users/"
        # Markers of the writer's txns whose answer was lost (Writer._commit_batch): outside
        # the root, so no watch of the cell sees them; each lives on its term's lease.
        self.txns = f"/minborg-txns/{cell}/"

    def machine(self, name: str) -> str:
        return self.machines + name

    def job(self, job_key: str) -> str:
        return self.jobs + job_key

    def task(self, tid: TaskId) -> str:
        return f"{self.tasks}{tid.job}/{tid.index}/{tid.incarnation}"

    def quota(self, key: QuotaKey) -> str:
        return f"{self.quotas}{key.user}/{key.band.value}"

    def alloc(self, name: str) -> str:
        """The key of an alloc by its spec name, "user/set/index"."""
        return self.allocs + name

    def replica(self, name: str) -> str:
        return self.replicas + name

    def user(self, name: str) -> str:
        return self.users + name


def dumps(doc: dict[str, Any]) -> bytes:
    """A record's JSON, its keys sorted, compact: `fastjson.dumps` (orjson's, a tenth of the
    standard library's time; the standard library's for an integer beyond 64 bits). orjson
    writes NaN and Infinity as null, where the standard library writes what `loads` reads back
    as it was: a record whose JSON holds a null (a value of None, or one of those) is written
    by the standard library, as before."""
    out = fastjson.dumps(doc, sort_keys=True)
    if b"null" in out:
        return json.dumps(doc, sort_keys=True, separators=(",", ":")).encode("utf-8")
    return out


def loads(raw: bytes) -> dict[str, Any]:
    try:
        doc = fastjson.loads(raw)
    except ValueError as err:
        raise SchemaError(f"not JSON: {err}") from err
    if not isinstance(doc, dict) or doc.get("schema") != SCHEMA:
        raise SchemaError(f"record of schema {doc.get('schema') if isinstance(doc, dict) else '?'}, want {SCHEMA}")
    return doc


# --- users ---------------------------------------------------------------------------------


def encode_user(u: UserRecord) -> bytes:
    return dumps(
        {"schema": SCHEMA, "name": u.name, "token_sha256": u.token_sha256, "admin": u.admin, "created_at": u.created_at}
    )


def decode_user(raw: bytes) -> UserRecord:
    d = loads(raw)
    return UserRecord(
        name=str(d["name"]),
        token_sha256=str(d["token_sha256"]),
        admin=bool(d.get("admin", False)),
        created_at=float(d.get("created_at", 0.0)),
    )


# --- machines ------------------------------------------------------------------------------


def encode_machine(m: Machine, info: MachineInfo) -> bytes:
    return dumps(
        {
            "schema": SCHEMA,
            "name": m.name,
            "capacity": m.capacity.as_dict(),
            "attrs": dict(m.attrs),
            "failure_domain": m.failure_domain,
            "up": m.up,
            **({} if m.schedulable else {"schedulable": False}),
            "address": info.address,
            "isolation": info.isolation,
            "usage": dict(info.usage),
            **({"images": list(info.images)} if info.images else {}),
            **({"reason": info.reason} if info.reason else {}),
            **({"drain": {"since": info.drain_since, "deadline": info.drain_deadline}} if info.drain_since else {}),
        }
    )


def decode_machine(raw: bytes) -> tuple[Machine, MachineInfo]:
    d = loads(raw)
    m = Machine(
        name=d["name"],
        capacity=Resources.of(d["capacity"]),
        attrs=tuple(sorted(d.get("attrs", {}).items())),
        failure_domain=d.get("failure_domain", ""),
        up=bool(d.get("up", True)),
        schedulable=bool(d.get("schedulable", True)),
    )
    drained = d.get("drain") or {}
    info = MachineInfo(
        address=d.get("address", ""),
        isolation=d.get("isolation", ""),
        usage=tuple(sorted(d.get("usage", {}).items())),
        images=tuple(d.get("images", ())),
        reason=str(d.get("reason", "")),
        drain_since=float(drained.get("since", 0.0)),
        drain_deadline=float(drained.get("deadline", 0.0)),
    )
    return m, info


# --- jobs ------------------------------------------------------------------------------------


def encode_job(job: Job, info: JobInfo) -> bytes:
    return dumps(
        {
            "schema": SCHEMA,
            "job": {
                "user": job.user,
                "name": job.name,
                "priority": job.priority,
                "task_count": job.task_count,
                "request": job.request.as_dict(),
                "constraints": [
                    {"attr": c.attr, "op": c.op.value, "values": list(c.values)}
                    for c in job.constraints
                ],
                "restart_policy": job.restart_policy.value,
                "appclass": job.appclass.value,
                "alloc": job.alloc,
                "package": job.package,
                "version": job.version,
                "max_unavailable": job.max_unavailable,
                "template": job.template,
            },
            "file": info.spec.canonical(),
            "submitted_at": info.submitted_at,
            "versions": [[v, at, f, list(ch)] for v, at, f, ch in info.versions],
            "declared_count": info.declared_count,
        }
    )


def decode_job(raw: bytes) -> tuple[Job, JobInfo]:
    d = loads(raw)
    j = d["job"]
    job = Job(
        user=j["user"],
        name=j["name"],
        priority=int(j["priority"]),
        task_count=int(j["task_count"]),
        request=Resources.of(j["request"]),
        constraints=tuple(
            Constraint(c["attr"], ConstraintOp(c["op"]), tuple(c["values"]))
            for c in j.get("constraints", [])
        ),
        restart_policy=RestartPolicy(j["restart_policy"]),
        appclass=AppClass(j["appclass"]),
        alloc=j.get("alloc"),
        package=j.get("package", ""),
        version=int(j.get("version", 0)),
        max_unavailable=int(j.get("max_unavailable", 1)),
        template=str(j.get("template", "")),
    )
    versions = tuple((int(v), float(at), str(f), tuple(ch)) for v, at, f, ch in d.get("versions", ()))
    declared = d.get("declared_count")
    info = JobInfo(JobSpec.model_validate(d["file"]), float(d.get("submitted_at", 0.0)), versions,
                   None if declared is None else int(declared))  # fmt: skip
    return job, info


# --- tasks -----------------------------------------------------------------------------------


# What a task record's field holds where it is absent: encode_task leaves out a field that
# holds it, and decode_task reads it from here. A dead task's record is a third smaller, and
# every task record is written, watched and decoded by each replica (a 10,000-task job's
# kill writes 10,000 of them at once).
TASK_DEFAULTS: dict[str, Any] = {
    "machine": None, "priority": 0, "request": {}, "cause": None, "reservation": None, "port": 0,
    "healthy": None, "restarts": 0, "borglet_state": "", "started_at": 0.0, "seen": False,
    "placement": 0, "reason": "", "usage": {}, "history": [], "draining_since": 0.0, "pid": 0,
    "last_machine": "", "events": [], "pending": "", "failures": 0, "retry_at": 0.0, "last_exit": "",
    "template": "", "down_for": "",
}  # fmt: skip


# (field, its default, the default's type): a field holding its default is left out of the record.
_DEFAULTS = tuple((k, d, type(d)) for k, d in TASK_DEFAULTS.items())


def encode_task(t: Task, info: TaskInfo) -> bytes:
    doc = _task_doc(t, info)
    for field, default, kind in _DEFAULTS:
        value = doc[field]
        if (value is None) if default is None else (value.__class__ is kind and value == default):
            del doc[field]
    return dumps(doc)


def _task_doc(t: Task, info: TaskInfo) -> dict[str, Any]:
    return {
        "schema": SCHEMA,
        "job": t.id.job,
        "index": t.id.index,
        "incarnation": t.id.incarnation,
        "state": t.state.value,
        "machine": t.machine,
        "priority": t.priority,
        "request": t.request.as_dict(),
        "cause": t.cause.value if t.cause is not None else None,
        "reservation": t.reservation.as_dict() if t.reservation is not None else None,
        "port": info.port,
        "healthy": info.healthy,
        "restarts": info.restarts,
        "borglet_state": info.borglet_state,
        "started_at": info.started_at,
        "seen": info.seen,
        "placement": info.placement,
        "reason": info.reason,
        "usage": dict(info.usage),
        "history": [list(h) for h in info.history],
        "draining_since": info.draining_since,
        "pid": info.pid,
        "last_machine": info.machine,
        "events": [list(e) for e in info.events],
        "pending": info.pending,
        "failures": info.failures,
        "retry_at": info.retry_at,
        "last_exit": info.last_exit,
        "template": t.template,
        "down_for": t.down_for,
    }


@functools.lru_cache(maxsize=4096)
def _resources(items: tuple[tuple[str, Any], ...]) -> Resources:
    return Resources.of(dict(items))


def _decode_resources(mapping: dict[str, Any]) -> Resources:
    """Resources.of, shared between records that ask the same (Resources is frozen): every
    replica decodes each task record at each write, and the tasks of one job ask alike."""
    if not isinstance(mapping, dict):
        return Resources.of(mapping)  # not a record this codec wrote: Resources.of says what is wrong
    try:
        return _resources(tuple(mapping.items()))
    except TypeError:  # a value that cannot be hashed: Resources.of says what is wrong
        return Resources.of(mapping)


_TASK_STATES = {s.value: s for s in TaskState}


def decode_task(raw: bytes) -> tuple[Task, TaskInfo]:
    d = {**TASK_DEFAULTS, **loads(raw)}  # a field left out holds its default
    tid = TaskId(d["job"], int(d["index"]), int(d["incarnation"]))
    state = d["state"]
    task = Task(
        id=tid,
        state=_TASK_STATES[state] if state in _TASK_STATES else TaskState(state),
        machine=d["machine"],
        priority=int(d["priority"]),
        request=_decode_resources(d["request"]),
        cause=DeathCause(d["cause"]) if d["cause"] else None,
        reservation=_decode_resources(d["reservation"]) if d["reservation"] is not None else None,
        template=str(d["template"]),
        down_for=str(d["down_for"]),
    )
    info = task_info_of({
        "port": int(d["port"]),
        "healthy": d["healthy"],
        "restarts": int(d["restarts"]),
        "borglet_state": d["borglet_state"],
        "started_at": float(d["started_at"]),
        "seen": bool(d["seen"]),
        "placement": int(d["placement"]),
        "reason": d["reason"],
        "usage": tuple(sorted(d["usage"].items())),
        "history": tuple((h[0], float(h[1]), h[2]) for h in d["history"]),
        "draining_since": float(d["draining_since"]),
        "pid": int(d["pid"] or 0),
        "machine": d["last_machine"] or "",
        "events": tuple((int(e[0]), float(e[1]), str(e[2]), str(e[3])) for e in d["events"]),
        "pending": d["pending"],
        "failures": int(d["failures"] or 0),
        "retry_at": float(d["retry_at"] or 0.0),
        "last_exit": str(d["last_exit"] or ""),
    })  # fmt: skip
    return task, info


# --- quotas ----------------------------------------------------------------------------------


def encode_quota(key: QuotaKey, amount: Resources) -> bytes:
    return dumps(
        {"schema": SCHEMA, "user": key.user, "band": key.band.value, "resources": amount.as_dict()}
    )


def decode_quota(raw: bytes) -> tuple[QuotaKey, Resources]:
    d = loads(raw)
    return QuotaKey(d["user"], Band(d["band"])), Resources.of(d["resources"])


# --- allocs ----------------------------------------------------------------------------------


def encode_alloc(a: Alloc) -> bytes:
    return dumps(
        {
            "schema": SCHEMA,
            "set": a.set,
            "index": a.index,
            "machine": a.machine,
            "resources": a.resources.as_dict(),
            "priority": a.priority,
            "user": a.user,
        }
    )


def decode_alloc(raw: bytes) -> Alloc:
    d = loads(raw)
    return Alloc(
        str(d["set"]), int(d["index"]), str(d["machine"]), Resources.of(d["resources"]), int(d["priority"]),
        str(d.get("user", "")),
    )
