"""Reads the Alibaba openb GPU trace family (machine lists and pod lists) into scheduler inputs.

Any pod list of the family loads by path. Required columns: `cpu_milli`, `memory_mib`,
`num_gpu`, `gpu_milli` (pods) and `cpu_milli`, `memory_mib` (machines). Optional columns
and their defaults when the column is absent or the cell empty:

- `name` / `sn`: `pod-<line>` / `node-<line>`;
- `gpu_spec`: any GPU model;
- `qos`: `DEFAULT_QOS` (Burstable, the batch band: neither production nor best effort);
- `creation_time`: arrival in file order (the row's position);
- `deletion_time`: the pod never departs;
- `gpu` (machines): no GPU; `model`: no GPU model attribute.

A value that is present but not what its column holds is a `TraceError` naming the file,
the line and the column.
"""

from __future__ import annotations

import csv
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from reference.scheduler import PendingTask
from spec.model import Constraint, ConstraintOp, Machine, Resources, TaskId

MiB = 2**20
# QoS to priority: latency-sensitive and guaranteed pods are production, burstable is batch.
QOS_PRIORITY = {"LS": 200, "Guaranteed": 200, "Burstable": 100, "BE": 0}
DEFAULT_QOS = "Burstable"
POD_COLUMNS = ("cpu_milli", "memory_mib", "num_gpu", "gpu_milli")
MACHINE_COLUMNS = ("cpu_milli", "memory_mib")
# The file names of the published trace, for `read_trace(folder)`.
DEFAULT_PODS = "openb_pod_list_default.csv"
ALL_MACHINES = "openb_node_list_all_node.csv"
GPU_MACHINES = "openb_node_list_gpu_node.csv"


class TraceError(ValueError):
    """A trace file that cannot be read as one of this family; the message says where and why."""


@dataclass(frozen=True, slots=True)
class TracePod:
    task: PendingTask
    created: int
    deleted: int | None


class _Row:
    """One CSV row with its file and line, so every error can say where it is."""

    def __init__(self, path: Path, line: int, row: dict[str, str | None]) -> None:
        self.path, self.line, self.row = path, line, row

    def text(self, column: str, default: str = "") -> str:
        value = self.row.get(column)
        return default if value is None or value.strip() == "" else value.strip()

    def integer(self, column: str, default: int | None = None) -> int | None:
        value = self.text(column)
        if value == "":
            return default
        try:
            number = int(value)
        except ValueError:
            try:
                as_float = float(value)  # some exports write 12000.0
            except ValueError:
                raise self.error(column, f"{value!r} is not a number") from None
            if not as_float.is_integer():
                raise self.error(column, f"{value!r} is not a whole number") from None
            number = int(as_float)
        if number < 0:
            raise self.error(column, f"{value!r} is negative")
        return number

    def required(self, column: str) -> int:
        number = self.integer(column)
        if number is None:
            raise self.error(column, "is empty; this column is required")
        return number

    def error(self, column: str, why: str) -> TraceError:
        return TraceError(f"{self.path}, line {self.line}, column {column!r}: {why}")


def _rows(path: Path, required: tuple[str, ...]) -> Iterator[_Row]:
    try:
        f = open(path, newline="")
    except OSError as e:
        raise TraceError(f"{path}: cannot read it ({e.strerror or e})") from None
    with f:
        reader = csv.DictReader(f)
        header = reader.fieldnames or []
        missing = [c for c in required if c not in header]
        if missing:
            raise TraceError(
                f"{path}, line 1: the header lacks required column(s) {', '.join(missing)}"
                f" (it has {', '.join(header) or 'nothing'})"
            )
        for row in reader:
            if None in row:  # more cells than the header names
                raise TraceError(f"{path}, line {reader.line_num}: {len(header) + len(row[None])} cells for {len(header)} columns")
            yield _Row(path, reader.line_num, row)


def read_machines(path: Path) -> list[Machine]:
    out = []
    for i, r in enumerate(_rows(Path(path), MACHINE_COLUMNS)):
        gpus = r.integer("gpu", 0) or 0
        cap = Resources.of(cpu=r.required("cpu_milli"), ram=r.required("memory_mib") * MiB, gpu=gpus * 1000)
        model = r.text("model")
        attrs = (("gpu_model", model),) if model else ()
        out.append(Machine(r.text("sn", f"node-{i:05d}"), cap, attrs))
    return out


def pod_gpu_milli(num_gpu: int, gpu_milli: int) -> int:
    """A GPU-sharing pod (one GPU, gpu_milli < 1000) asks a share; others ask whole GPUs."""
    if num_gpu == 1 and 0 < gpu_milli < 1000:
        return gpu_milli
    return num_gpu * 1000


def read_pods(path: Path) -> list[TracePod]:
    """The pods in arrival order (creation time, file order among equal times)."""
    out = []
    for i, r in enumerate(_rows(Path(path), POD_COLUMNS)):
        gpu = pod_gpu_milli(r.required("num_gpu"), r.required("gpu_milli"))
        req = Resources.of(cpu=r.required("cpu_milli"), ram=r.required("memory_mib") * MiB, gpu=gpu)
        spec = tuple(s for s in r.text("gpu_spec").split("|") if s)
        cons = (Constraint("gpu_model", ConstraintOp.IN, spec),) if spec else ()
        qos = r.text("qos", DEFAULT_QOS)
        if qos not in QOS_PRIORITY:
            raise r.error("qos", f"{qos!r} is not one of {', '.join(QOS_PRIORITY)}")
        name = r.text("name", f"pod-{i:05d}")
        task = PendingTask(TaskId(f"{qos}/{name}", 0), qos, QOS_PRIORITY[qos], req, cons)
        created = r.integer("creation_time", i)
        out.append(TracePod(task, i if created is None else created, r.integer("deletion_time", None)))
    out.sort(key=lambda p: p.created)  # stable: file order among equal creation times
    return out


def read_trace(
    folder: Path, pods: str | Path = DEFAULT_PODS, machines: str | Path = ALL_MACHINES
) -> tuple[list[Machine], list[TracePod]]:
    """Machines and pods of the trace; `pods` and `machines` are file names in `folder` or paths."""
    folder = Path(folder)
    return read_machines(folder / machines), read_pods(folder / pods)
