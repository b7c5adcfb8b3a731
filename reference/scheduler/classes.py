"""Equivalence classes: what makes two pending tasks interchangeable for feasibility and scoring."""

from __future__ import annotations

from dataclasses import dataclass

from spec.model import Constraint, ConstraintOp

from .cellview import CellView, split_gpu
from .snapshot import PendingTask

# A constraint compiled for the hot path: (attribute, op, values as a frozenset).
Compiled = tuple[str, ConstraintOp, frozenset[str]]


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
    priority: int
    constraints: tuple[Constraint, ...]
    compiled: tuple[Compiled, ...]


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
        priority=task.priority,
        constraints=task.constraints,
        compiled=tuple((c.attr, c.op, frozenset(c.values)) for c in task.constraints),
    )


def constraint_holds(c: Compiled, attrs: dict[str, str]) -> bool:
    attr, op, values = c
    v = attrs.get(attr)
    if op is ConstraintOp.EQ or op is ConstraintOp.IN:
        return v in values
    return v not in values  # NE, NOT_IN: an absent attribute differs from every value
