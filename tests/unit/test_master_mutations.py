"""The writes' refusals in reference/master/mutations.py: what a request names that the cell lacks is a 404, like any missing object."""

from __future__ import annotations

import pytest

from reference.master.cell import Draft
from reference.master.mutations import ApiError, submit_job
from tests.unit.master_cells import placed_cell

JOB = {"name": "batch", "user": "alice", "command": ["true"]}


def test_a_job_in_an_alloc_the_cell_lacks_is_not_found() -> None:
    # The body is valid; what it names is missing, as a job or a machine of a path can be.
    with pytest.raises(ApiError) as caught:
        submit_job(Draft(placed_cell(), 1.0), {**JOB, "alloc": "no-such-alloc"})
    assert caught.value.status == 404
    assert caught.value.errors == [{"field": "alloc", "error": "no alloc named no-such-alloc"}]


def test_a_job_without_an_alloc_is_submitted() -> None:
    draft = Draft(placed_cell(), 1.0)
    assert submit_job(draft, JOB) == "alice/batch"
