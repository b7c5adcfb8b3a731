"""Reads the Alibaba openb GPU trace (machines and pods) into scheduler snapshots."""

from __future__ import annotations

import csv
from dataclasses import dataclass
from pathlib import Path

from spec.model import Constraint, ConstraintOp, Machine, Resources, TaskId

from .snapshot import PendingTask

MiB = 2**20
# QoS to priority: latency-sensitive and guaranteed pods are production, burstable is batch.
QOS_PRIORITY = {"LS": 200, "Guaranteed": 200, "Burstable": 100, "BE": 0}


@dataclass(frozen=True, slots=True)
class TracePod:
    task: PendingTask
    created: int
    deleted: int | None


def read_machines(path: Path) -> list[Machine]:
    out = []
    with open(path, newline="") as f:
        for row in csv.DictReader(f):
            gpus = int(row["gpu"] or 0)
            cap = Resources.of(
                cpu=int(row["cpu_milli"]), ram=int(row["memory_mib"]) * MiB, gpu=gpus * 1000
            )
            attrs = (("gpu_model", row["model"]),) if row["model"] else ()
            out.append(Machine(row["sn"], cap, attrs))
    return out


def pod_gpu_milli(num_gpu: int, gpu_milli: int) -> int:
    """A GPU-sharing pod (one GPU, gpu_milli < 1000) asks a share; others ask whole GPUs."""
    if num_gpu == 1 and 0 < gpu_milli < 1000:
        return gpu_milli
    return num_gpu * 1000


def read_pods(path: Path) -> list[TracePod]:
    out = []
    with open(path, newline="") as f:
        for row in csv.DictReader(f):
            gpu = pod_gpu_milli(int(row["num_gpu"] or 0), int(row["gpu_milli"] or 0))
            req = Resources.of(cpu=int(row["cpu_milli"]), ram=int(row["memory_mib"]) * MiB, gpu=gpu)
            spec = tuple(s for s in row["gpu_spec"].split("|") if s)
            cons = (Constraint("gpu_model", ConstraintOp.IN, spec),) if spec else ()
            qos = row["qos"]
            task = PendingTask(
                TaskId(f"{qos}/{row['name']}", 0), qos, QOS_PRIORITY.get(qos, 0), req, cons
            )
            deleted = int(row["deletion_time"]) if row["deletion_time"] else None
            out.append(TracePod(task, int(row["creation_time"]), deleted))
    out.sort(key=lambda p: p.created)
    return out


def read_trace(folder: Path) -> tuple[list[Machine], list[TracePod]]:
    return (
        read_machines(folder / "openb_node_list_all_node.csv"),
        read_pods(folder / "openb_pod_list_default.csv"),
    )
