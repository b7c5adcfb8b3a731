"""The writes' refusals in reference/master/mutations.py: what a request names that the cell lacks is a 404, like any missing object."""

from __future__ import annotations

import pytest

from reference.master.cell import Draft
from reference.master.mutations import ApiError, submit_job, update_job
from spec.model import Alloc, Resources
from tests.unit.master_cells import placed_cell

JOB = {"name": "batch", "user": "alice", "command": ["true"]}


def test_a_job_in_an_alloc_the_cell_lacks_is_not_found() -> None:
    # The body is valid; what it names is missing, as a job or a machine of a path can be.
    with pytest.raises(ApiError) as caught:
        submit_job(Draft(placed_cell(), 1.0), {**JOB, "alloc": "no-such-alloc"})
    assert caught.value.status == 404
    assert caught.value.errors == [{"field": "alloc", "error": "no alloc set named alice/no-such-alloc"}]


def test_a_job_with_more_tasks_than_its_alloc_set_has_allocs_is_refused_naming_alloc() -> None:
    cell = placed_cell()
    draft = Draft(cell, 1.0)
    machine = sorted(cell.state.machines)[0]
    assert draft.step("alloc_create", Alloc("alice/logs", 0, machine, Resources.of(cpu=100), 100, "alice"))
    with pytest.raises(ApiError) as caught:
        submit_job(draft, {**JOB, "alloc": "logs", "task_count": 2})
    assert caught.value.status == 422
    assert caught.value.field == "alloc"
    assert submit_job(draft, {**JOB, "alloc": "logs", "task_count": 1}) == "alice/batch"
    assert draft.state.jobs["alice/batch"].alloc == "alice/logs"
    with pytest.raises(ApiError) as caught:
        update_job(draft, "alice/batch", {"task_count": 2})
    assert (caught.value.status, caught.value.field) == (422, "alloc")


def test_a_job_without_an_alloc_is_submitted() -> None:
    draft = Draft(placed_cell(), 1.0)
    assert submit_job(draft, JOB) == "alice/batch"
