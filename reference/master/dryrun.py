"""Would it fit? A job submitted with `dry_run=true`, and a machine's removal asked `GET /v1/whatif`, answered by a Fauxmaster on a copy of the watch cache's cell: nothing is written.

The Fauxmaster (reference/fauxmaster/) runs the leader's own code on the copy: the submit's
validation and quota admission, then one scheduling pass over every pending task (the new
job's tasks compete with those already waiting, as they would in the cell). The pass uses
seed 0; the leader's seed is its pass count, so on a cell of more machines than relaxed
randomization samples (`SchedulerConfig.sample_size`) the machine named may differ from the
one the cell picks, while whether a task fits, and its reasons when it does not, do not.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field

from reference.fauxmaster import Fauxmaster, answers, whatif
from reference.master.cell import Cell
from reference.scheduler import Plan

SEED = 0


class WouldPlace(BaseModel):
    task: str = Field(description="the task id, user/job/index#incarnation")
    machine: str
    preempts: list[str] = Field(description="the tasks evicted to make room, if any")


class WouldPend(BaseModel):
    task: str
    reason: str = Field(description="why no machine fits: the scheduler's reasons")


class WouldPreempt(BaseModel):
    job: str
    priority: int
    tasks: int = Field(description="how many of its tasks would be preempted")


class QuotaUse(BaseModel):
    user: str
    band: str
    quota: dict[str, int] | None = Field(description="the quota that applies; null: unlimited")
    used_by_others: dict[str, int] = Field(description="what the user's other jobs in the band hold")
    job: dict[str, int] = Field(description="this job's total request (task count x request)")


class DryRun(BaseModel):
    """`POST /v1/jobs?dry_run=true`: where the job's tasks would go, what they would preempt,
    which quota they would use, and why the others would wait. Nothing is written."""

    dry_run: Literal[True] = True
    job: str
    placed: list[WouldPlace]
    pending: list[WouldPend]
    preempted: list[WouldPreempt]
    quota: QuotaUse
    seed: int
    revision: int = Field(description="the revision of the cell the answer was computed on")


class Move(BaseModel):
    task: str
    from_: str = Field(alias="from")
    to: str


class WhatIf(BaseModel):
    """`GET /v1/whatif?remove_machine=M`: where the machine's tasks would go, or why they would wait."""

    remove_machine: str
    moves: list[Move]
    pending: list[WouldPend]
    preempted: list[WouldPreempt]
    seed: int
    revision: int


def submit(cell: Cell, payload: Any, seed: int = SEED) -> dict[str, Any]:
    """The dry run of submitting `payload` on `cell`; raises ApiError as the submit would."""
    fm = Fauxmaster(cell)
    key = fm.apply_job(payload)
    result = fm.schedule_all_pending(seed)
    state = fm.state
    mine = state.task_ids_of(key)
    job = state.jobs[key]
    quota = state.quota_for(job.user, job.band)
    own = Plan(placements=[p for p in result.plan.placements if p.task in mine])
    return DryRun(
        job=key,
        placed=answers.placed([own]),
        pending=answers.pending(state, result.plan, mine),
        preempted=answers.preempted(state, [own]),
        quota=QuotaUse(
            user=job.user, band=job.band.value, quota=quota.as_dict() if quota is not None else None,
            used_by_others=state.quota_used(job.user, job.band, excluding=key).as_dict(),
            job=job.total_request().as_dict(),
        ),  # fmt: skip
        seed=seed,
        revision=cell.revision,
    ).model_dump(mode="json")


def remove_machine(cell: Cell, name: str, seed: int = SEED) -> dict[str, Any]:
    """`whatif.remove_machine` in the answer's declared shape; ApiError 404 for an unknown machine."""
    return WhatIf.model_validate(whatif.remove_machine(cell, name, seed)).model_dump(mode="json", by_alias=True)
