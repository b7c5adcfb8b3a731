"""Checkpoints: the cell's state at one etcd revision as one versioned JSON document (docs/checkpoint.md).

A checkpoint holds each machine, job, task and quota as the very record the master stores
for it in etcd (`reference/master/codec.py`, schema 1), plus the cell's allocs and the
revision it reflects. It is read from etcd in one range read, so every record is of the same
revision (docs/decisions.md says why etcd and not a replica's cache).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from reference.master import codec
from reference.master.cell import Cell, JobInfo, MachineInfo, TaskInfo
from reference.store.client import StoreClient
from spec.fmap import FMap
from spec.model import Alloc, CellState, Job, Machine, QuotaKey, Resources, Task, TaskId

from .simulator import job_file_of

FORMAT = 1


class CheckpointError(ValueError):
    """A file that is not a checkpoint this code can read: another format, or a bad record."""


def _record(raw: bytes) -> dict[str, Any]:
    return json.loads(raw)


def from_cell(cell: Cell, cell_name: str = "") -> dict[str, Any]:
    """The checkpoint document of a cell view: each record as codec encodes it."""
    s = cell.state
    return {
        "format": FORMAT,
        "cell": cell_name,
        "revision": cell.revision,
        "machines": [_record(codec.encode_machine(s.machines[n], cell.machines.get(n) or MachineInfo()))
                     for n in sorted(s.machines)],
        "jobs": [_record(codec.encode_job(s.jobs[k], cell.jobs.get(k) or JobInfo(job_file_of(s.jobs[k]))))
                 for k in sorted(s.jobs)],
        "tasks": [_record(codec.encode_task(s.tasks[t], cell.task_info(t))) for t in sorted(s.tasks)],
        "quotas": [_record(codec.encode_quota(q, a)) for q, a in sorted(s.quotas.items(), key=lambda i: (i[0].user, i[0].band))],
        "allocs": [_record(codec.encode_alloc(s.allocs[n])) for n in sorted(s.allocs)],
    }  # fmt: skip


def read_etcd(client: StoreClient, cell_name: str, revision: int | None = None) -> dict[str, Any]:
    """The checkpoint of cell `cell_name` as etcd holds it now, or at a past `revision`: one
    range read of the cell's state prefix, each record kept as stored."""
    keys = codec.Keys(cell_name)
    kvs, now = client.get_prefix(keys.state, revision=revision)
    doc: dict[str, Any] = {"format": FORMAT, "cell": cell_name, "revision": revision if revision is not None else now}
    sections = (("machines", keys.machines), ("jobs", keys.jobs), ("tasks", keys.tasks), ("quotas", keys.quotas),
                ("allocs", keys.allocs))  # fmt: skip
    for name, _ in sections:
        doc[name] = []
    for key, value, _ in kvs:
        k = key.decode()
        for name, prefix in sections:
            if k.startswith(prefix):
                try:
                    doc[name].append(codec.loads(value))
                except codec.SchemaError as err:
                    raise CheckpointError(f"{k}: {err}") from None
                break
    return doc


def to_cell(doc: Any) -> Cell:
    """The cell view a checkpoint document describes; CheckpointError if it cannot be read."""
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        found = doc.get("format") if isinstance(doc, dict) else type(doc).__name__
        raise CheckpointError(f"not a checkpoint of format {FORMAT} (format: {found})")
    machines: dict[str, Machine] = {}
    machine_infos: dict[str, MachineInfo] = {}
    jobs: dict[str, Job] = {}
    job_infos: dict[str, JobInfo] = {}
    tasks: dict[TaskId, Task] = {}
    task_infos: dict[TaskId, TaskInfo] = {}
    quotas: dict[QuotaKey, Resources] = {}
    allocs: dict[str, Alloc] = {}
    section = ""
    try:
        for section, decode in (("machines", codec.decode_machine), ("jobs", codec.decode_job),
                                ("tasks", codec.decode_task), ("quotas", codec.decode_quota)):  # fmt: skip
            for record in doc.get(section, []):
                spec, info = decode(codec.dumps(record))
                if section == "machines":
                    machines[spec.name], machine_infos[spec.name] = spec, info
                elif section == "jobs":
                    jobs[spec.key], job_infos[spec.key] = spec, info
                elif section == "tasks":
                    tasks[spec.id], task_infos[spec.id] = spec, info
                else:
                    quotas[spec] = info
        section = "allocs"
        for record in doc.get("allocs", []):
            a = codec.decode_alloc(codec.dumps(record))
            allocs[a.name] = a
        revision = int(doc.get("revision", 0))
    except (codec.SchemaError, KeyError, ValueError, TypeError, AttributeError) as err:
        raise CheckpointError(f"{section}: {err}") from None
    state = CellState(
        machines=FMap(machines), jobs=FMap(jobs), tasks=FMap(tasks), allocs=FMap(allocs), quotas=FMap(quotas)
    )
    return Cell(state=state, machines=machine_infos, jobs=job_infos, tasks=task_infos, revision=revision)


def save(doc: dict[str, Any], path: str | Path) -> None:
    Path(path).write_text(json.dumps(doc, indent=1, sort_keys=True) + "\n")


def load(path: str | Path) -> Cell:
    """The cell of a checkpoint file; CheckpointError if it is not one."""
    try:
        doc = json.loads(Path(path).read_text())
    except (OSError, ValueError) as err:
        raise CheckpointError(f"{path}: {err}") from None
    return to_cell(doc)
