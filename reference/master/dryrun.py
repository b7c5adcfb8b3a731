"""Would it fit? A job submitted with `dry_run=true`, and a machine's removal asked `GET /v1/whatif`, answered by one leader pass on a draft of the watch cache's cell: nothing is written.

The draft runs the leader's own code: the submit's validation and quota admission, then one
scheduling pass over every pending task (`one_pass`: the new job's tasks compete with those
already waiting, as they would in the cell). The Fauxmaster (reference/fauxmaster/, a layer
above the master) runs the same `one_pass` for each of its passes. The pass uses
seed 0; the leader's seed is its pass count, so on a cell of more machines than relaxed
randomization samples (`SchedulerConfig.sample_size`) the machine named may differ from the
one the cell picks, while whether a task fits, and its reasons when it does not, do not.
"""

from __future__ import annotations

from typing import Any, Literal, NamedTuple

from pydantic import BaseModel, Field

from reference.master import answers
from reference.master.cell import Cell, Draft
from reference.master.leader import (
    commit_plan,
    pass_work,
    record_pending_reasons,
    restart_dead,
    roll_stale,
)
from reference.master.mutations import remove_machine as drain_and_remove
from reference.master.mutations import submit_job
from reference.scheduler import Plan, SchedulerConfig, plan_for
from spec.model import TaskState

SEED = 0


class Pass(NamedTuple):
    """One scheduling pass on a draft: its plan, what it committed, and the restarts and rolls before it."""

    plan: Plan
    placed: int
    conflicts: int
    restarted: int
    rolled: int


def _all(wanted: int) -> int:
    """No rate limit: a pass on a copy has no burst to protect."""
    return wanted


def one_pass(d: Draft, config: SchedulerConfig, seed: int = SEED) -> Pass:
    """The leader's pass on draft `d`, unlimited: restart what its job's policy restarts, roll
    stale tasks, plan every PENDING task with `seed`, commit the plan and record why the rest
    found no place."""
    candidates = pass_work(d.state)
    restarted = restart_dead(d, candidates, _all)
    rolled = roll_stale(d, candidates, _all)
    plan = plan_for(d.state, config, seed=seed)
    placed, conflicts = commit_plan(d, plan)
    record_pending_reasons(d, plan)
    return Pass(plan, placed, conflicts, restarted, rolled)


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
    d = Draft(cell, 0.0)
    key = submit_job(d, payload)
    result = one_pass(d, SchedulerConfig(), seed)
    state = d.state
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


def remove_machine(cell: Cell, name: str, seed: int = SEED, config: SchedulerConfig | None = None) -> dict[str, Any]:
    """Remove machine `name` as `DELETE /v1/machines/{name}` does (its tasks evicted for
    maintenance), run one scheduling pass, and say where each of its tasks went or why it
    stays pending, and what the moves preempt. Raises `mutations.ApiError` (404) for an
    unknown machine. `cell` is not changed."""
    d = Draft(cell, 0.0)
    on = [t.id for t in d.state.running_on(name)]
    drain_and_remove(d, name)
    result = one_pass(d, config or SchedulerConfig(), seed)
    state = d.state
    moves = [
        {"task": str(tid), "from": name, "to": state.tasks[tid].machine}
        for tid in on
        if state.tasks[tid].state is TaskState.RUNNING
    ]
    return WhatIf.model_validate({
        "remove_machine": name, "moves": moves, "pending": answers.pending(state, result.plan, on),
        "preempted": answers.preempted(state, [result.plan]), "revision": cell.revision, "seed": seed,
    }).model_dump(mode="json", by_alias=True)  # fmt: skip
