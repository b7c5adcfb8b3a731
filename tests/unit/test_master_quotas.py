"""Quotas the admin manages: the path and body checks, the writer's changes, and Borg's rule that lowering a quota kills nothing already admitted."""

from __future__ import annotations

import base64
from typing import Any

import pytest

from reference.master import codec, quotas
from reference.master.cell import Cell, Draft
from reference.master.mutations import ApiError, submit_job
from reference.master.writer import diff_ops
from reference.resources import CELL_MACHINES, bound_rule
from reference.scheduler import admit, plan_for
from spec import actions
from spec.fmap import FMap
from spec.model import Band, CellState, Job, Machine, QuotaKey, Resources, Task, TaskId, TaskState

GiB = 1024**3


# --- the path ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("user", "band", "key"),
    [("alice", "batch", QuotaKey("alice", Band.BATCH)), ("*", "production", QuotaKey("*", Band.PRODUCTION)),
     ("a-1_b", "monitoring", QuotaKey("a-1_b", Band.MONITORING))],
)  # fmt: skip
def test_a_path_names_a_user_or_star_and_a_band_with_a_quota(user: str, band: str, key: QuotaKey) -> None:
    assert quotas.quota_key(user, band) == key


@pytest.mark.parametrize(
    ("user", "band", "field", "words"),
    [("al!ce", "batch", "user", "user name"), ("**", "batch", "user", '"*"'), ("-a", "batch", "user", "user name"),
     ("alice", "best_effort", "band", "never limited"), ("alice", "prod", "band", "unknown band"),
     ("alice", "Batch", "band", "batch, production, monitoring")],
)  # fmt: skip
def test_a_path_without_a_quota_entry_is_422_naming_the_part(user: str, band: str, field: str, words: str) -> None:
    with pytest.raises(ApiError) as err:
        quotas.quota_key(user, band)
    assert (err.value.status, err.value.field) == (422, field)
    assert words in err.value.error


# --- the body: a job request's rules, at the scale of the cell ----------------------------------


@pytest.mark.parametrize(
    ("body", "amount"),
    [
        ({"cpu": "100", "ram": "512GiB"}, Resources.of(cpu=100_000, ram=512 * GiB)),
        ({"cpu": 2.5}, Resources.of(cpu=2500)),  # a bare number of CPU is cores, as in a job file
        ({"cpu": "250m", "gpu": 4}, Resources.of(cpu=250, gpu=4)),
        ({"ram": 1024.0}, Resources.of(ram=1024)),  # a whole float is JSON's integer
        ({"cpu": 0}, Resources()),  # zero: nothing is admitted in the band
        ({}, Resources()),  # a resource left out is zero too
        ({"cpu": "1024000"}, Resources.of(cpu=1_024_000_000)),  # a thousand machines' worth: within a quota's bound
    ],
)
def test_a_quota_body_reads_as_a_job_request_does(body: dict[str, Any], amount: Resources) -> None:
    assert quotas.parse_quota_body(body) == amount


@pytest.mark.parametrize(
    ("body", "field", "words"),
    [
        ({"cpu": "lots"}, "cpu", "quantity like 500m"),
        ({"cpu": True}, "cpu", "quantity like 500m"),
        ({"cpu": None}, "cpu", "quantity like 500m"),
        ({"cpu": -1}, "cpu", "negative"),
        ({"ram": "8 apples"}, "ram", "byte quantity"),
        ({"gpu": 1.5}, "gpu", "whole number"),
        ({"cpu": 1e12}, "cpu", bound_rule("cpu", CELL_MACHINES)),
        ({"ram": "Infinity"}, "ram", "byte quantity"),
        ({"Cpu": 1}, "Cpu", "resource name"),
        ({"cpu": 1, "ram": "x"}, "ram", "byte quantity"),
    ],
)
def test_a_quota_figure_refused_is_422_naming_its_resource(body: dict[str, Any], field: str, words: str) -> None:
    with pytest.raises(ApiError) as err:
        quotas.parse_quota_body(body)
    assert (err.value.status, err.value.field) == (422, field)
    assert words in err.value.error


@pytest.mark.parametrize("body", [None, [], "cpu=1", 3])
def test_a_quota_body_that_is_no_object_is_422(body: Any) -> None:
    with pytest.raises(ApiError) as err:
        quotas.parse_quota_body(body)
    assert (err.value.status, err.value.field) == (422, "")


# --- the writer's changes ----------------------------------------------------------------------

KEYS = codec.Keys("c")
ALICE_BATCH = QuotaKey("alice", Band.BATCH)
STAR_BATCH = QuotaKey("*", Band.BATCH)


def _ops(draft: Draft) -> list[tuple[str, str]]:
    """(kind, key) of each etcd op the writer would commit."""
    out = []
    for op in diff_ops(draft.base, draft, KEYS):
        kind, body = next(iter(op.items()))
        out.append((kind, base64.b64decode(body["key"]).decode()))
    return out


def test_setting_a_quota_puts_its_entry_and_nothing_else() -> None:
    d = Draft(Cell(), 0.0)
    assert quotas.set_quota(d, ALICE_BATCH, Resources.of(cpu=2000)) == ALICE_BATCH
    assert d.changed
    assert _ops(d) == [("request_put", "/minborg/c/state/quotas/alice/batch")]


def test_deleting_a_quota_deletes_its_entry_and_the_user_falls_back_to_star() -> None:
    state = CellState(quotas=FMap({ALICE_BATCH: Resources.of(cpu=2000), STAR_BATCH: Resources.of(cpu=9000)}))
    d = Draft(Cell(state=state), 0.0)
    quotas.delete_quota(d, ALICE_BATCH)
    assert _ops(d) == [("request_delete_range", "/minborg/c/state/quotas/alice/batch")]
    after = state.with_(quotas=FMap({STAR_BATCH: Resources.of(cpu=9000)}))
    assert quotas.quota_view(Cell(state=after), "alice", Band.BATCH) == {
        "user": "alice", "band": "batch", "applies": "*", "limit": {"cpu": 9000}, "used": {},
    }  # fmt: skip


def test_deleting_a_quota_the_user_does_not_have_is_404() -> None:
    d = Draft(Cell(state=CellState(quotas=FMap({STAR_BATCH: Resources.of(cpu=9000)}))), 0.0)
    with pytest.raises(ApiError) as err:
        quotas.delete_quota(d, ALICE_BATCH)  # "*"'s entry is not alice's own
    assert (err.value.status, err.value.field) == (404, "user")
    assert not d.changed


def test_no_entry_for_the_user_nor_star_is_no_quota_view() -> None:
    assert quotas.quota_view(Cell(), "alice", Band.BATCH) is None


# --- lowering a quota kills nothing (Borg: only new admissions are affected) -------------------


def _running_cell() -> CellState:
    """alice's batch job of 2 tasks x 1 core, both RUNNING, within a 2-core quota."""
    job = Job("alice", "web", 100, 2, Resources.of(cpu=1000))
    tasks = {TaskId(job.key, i): Task(TaskId(job.key, i), TaskState.RUNNING, "m0", 100, job.request) for i in range(2)}
    return CellState(
        machines=FMap({"m0": Machine("m0", Resources.of(cpu=8000, ram=8 * GiB))}),
        jobs=FMap({job.key: job}),
        tasks=FMap(tasks),
        quotas=FMap({ALICE_BATCH: Resources.of(cpu=2000)}),
    )


def test_lowering_a_quota_below_running_use_kills_nothing_and_refuses_new_work() -> None:
    state = _running_cell()
    # The change itself steps no spec action: only the quota entry is written.
    d = Draft(Cell(state=state), 0.0)
    quotas.set_quota(d, ALICE_BATCH, Resources.of(cpu=500))
    assert d.state is state and not d.touched and d.steps == []
    assert _ops(d) == [("request_put", "/minborg/c/state/quotas/alice/batch")]

    # The cell as the watch cache reads it back: alice uses 2000m of a 500m quota.
    lowered = state.with_(quotas=FMap({ALICE_BATCH: Resources.of(cpu=500)}))
    assert lowered.quota_used("alice", Band.BATCH) == Resources.of(cpu=2000)
    # A scheduling pass preempts and places nothing: both tasks keep running.
    plan = plan_for(lowered)
    assert (plan.placements, plan.preemptions) == ([], [])
    assert all(t.state is TaskState.RUNNING for t in lowered.tasks.values())
    # A task of the admitted job that dies is restarted: admission is not checked again.
    failed = actions.fail(lowered, TaskId("alice/web", 0))
    assert failed is not None and actions.restart(failed, TaskId("alice/web", 0)) is not None
    # A new job is refused, naming the quota: 2000m used + 100m asked > 500m.
    new = Job("alice", "more", 100, 1, Resources.of(cpu=100))
    admission = admit(lowered, new)
    assert not admission and "alice's batch quota is exceeded: cpu 2100 > 500" in admission.reason
    with pytest.raises(ApiError) as err:
        submit_job(Draft(Cell(state=lowered), 0.0), {"name": "more", "user": "alice", "priority": 100,
                                                       "command": ["true"], "request": {"cpu": "100m"}})  # fmt: skip
    assert (err.value.status, err.value.field) == (403, "request") and "quota" in err.value.error


def test_admission_reads_the_users_own_quota_then_stars() -> None:
    job = Job("alice", "web", 100, 1, Resources.of(cpu=3000))
    star_only = CellState(quotas=FMap({STAR_BATCH: Resources.of(cpu=4000)}))
    assert admit(star_only, job)  # 3000m within "*"'s 4000m
    own = star_only.with_(quotas=FMap({STAR_BATCH: Resources.of(cpu=4000), ALICE_BATCH: Resources.of(cpu=2000)}))
    assert not admit(own, job)  # alice's own 2000m applies, not "*"'s
    assert admit(own, Job("bob", "web", 100, 1, Resources.of(cpu=3000)))  # bob has none: "*"'s
