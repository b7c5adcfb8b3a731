"""Equivalence classes: what makes two pending tasks interchangeable for feasibility and scoring."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from spec.model import Constraint, ConstraintOp

from .cellview import CellView, split_gpu
from .snapshot import PendingTask

# A constraint compiled for the hot path: (attribute, whether it must be among the values, values).
Compiled = tuple[str, bool, frozenset[str]]


@dataclass(slots=True)
class TaskClass:
    """Requirements shared by the tasks of one class: request, constraints, priority.

    Job-specific score terms (failure-domain spreading, package locality) are not part of
    the class: they are added when a machine is picked, so tasks of different jobs with the
    same needs share one set of feasibility verdicts and scores.
    """

    key: tuple
    req: tuple[int, ...]
    nz: tuple[tuple[int, int], ...]  # (dimension, amount) for the non-zero parts of req
    gpu_whole: int
    gpu_share: int
    gpu: bool  # asks for any GPU: the per-GPU check applies
    priority: int
    constraints: tuple[Constraint, ...]
    compiled: tuple[Compiled, ...]
    need: Any = None  # req as a numpy vector, made on first use by the prefilter


def class_key(task: PendingTask) -> tuple:
    return (task.request, task.constraints, task.priority)


def make_class(task: PendingTask, cell: CellView, key: tuple) -> TaskClass:
    req = cell.vec(task.request.as_dict())
    g = cell.gpu_dim
    whole, share = split_gpu(req[g]) if g is not None else (0, 0)
    return TaskClass(
        key=key,
        req=req,
        nz=tuple((i, a) for i, a in enumerate(req) if a),
        gpu_whole=whole,
        gpu_share=share,
        gpu=bool(whole or share),
        priority=task.priority,
        constraints=task.constraints,
        compiled=tuple(
            (c.attr, c.op in (ConstraintOp.EQ, ConstraintOp.IN), frozenset(c.values))
            for c in task.constraints
        ),
    )
