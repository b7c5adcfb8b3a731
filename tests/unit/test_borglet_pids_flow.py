"""A job's pids_max reaches its tasks' borglet: job file -> the store (codec) -> the desired
entry of each task (reports) -> the sync's TaskSpec; a job that names none gets 1,024."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from reference.borglet.protocol import TaskSpec
from reference.jobspec import JobSpec
from reference.master import codec
from reference.master.cell import Cell, JobInfo, MachineInfo
from reference.master.reports import desired_set
from spec.actions import machine_add, schedule, submit
from spec.model import CellState, Machine, Resources, TaskId

FILE = {"name": "web", "user": "alice", "command": ["/bin/sleep", "60"]}


def entry_of(file: dict) -> TaskSpec:
    """The sync entry of the job's task 0, placed on m1, its job read back from the store's encoding."""
    spec = JobSpec.model_validate(file)
    job, info = codec.decode_job(codec.encode_job(spec.to_spec_job(), JobInfo(spec, 1.0)))
    state = machine_add(CellState(), Machine("m1", Resources.of(cpu=4000, ram=2**30)))
    assert state is not None
    state = schedule(submit(state, job), TaskId("alice/web", 0, 0), "m1")
    assert state is not None
    cell = Cell(state, {"m1": MachineInfo("http://127.0.0.1:1")}, {"alice/web": info}, {})
    desired, _ = desired_set(cell, "m1", "c1")
    return TaskSpec.model_validate(desired[0])


def test_pids_max_flows_from_the_job_file_to_the_sync():
    assert entry_of({**FILE, "pids_max": 16}).pids_max == 16


def test_a_job_that_names_no_pids_max_gets_a_containers_limit():
    assert JobSpec.model_validate(FILE).pids_max == 1024
    assert entry_of(FILE).pids_max == 1024
    # A job stored before the field existed reads back with the default.
    stored = JobSpec.model_validate(FILE).canonical()
    del stored["pids_max"]
    assert JobSpec.model_validate(stored).pids_max == 1024


@pytest.mark.parametrize("bad", [0, -1, 1_000_001, "many"])
def test_pids_max_is_a_count_within_bounds(bad):
    with pytest.raises(ValidationError) as err:
        JobSpec.model_validate({**FILE, "pids_max": bad})
    assert err.value.errors()[0]["loc"] == ("pids_max",)
