"""A job's pids_max reaches its tasks' borglet: job file -> the store (codec) -> the desired
entry of each task (reports) -> the sync's TaskSpec; a job that names none gets 1,024."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from reference.borglet.protocol import TaskSpec
from reference.jobspec import JobSpec
from reference.master import codec, reports
from reference.master.cell import JobInfo

FILE = {"name": "web", "user": "alice", "command": ["/bin/sleep", "60"]}


def entry_of(file: dict) -> TaskSpec:
    spec = JobSpec.model_validate(file)
    job, info = codec.decode_job(codec.encode_job(spec.to_spec_job(), JobInfo(spec, 1.0)))
    part = reports._job_part(info)
    return TaskSpec.model_validate({"task_id": "alice/web/0#0@1", **part})


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
