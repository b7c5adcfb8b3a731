"""The section-5 experiments pack as the Fauxmaster schedules: the same placements, machine for machine.

`bench.section5.compaction.pack` calls the scheduler's `plan_pass` on a snapshot of the
workload; `reference.fauxmaster.pack` submits the workload's jobs to a cell in memory and runs
the leader's pass on it (`plan_for`, `commit_plan`). Equal answers mean the experiments'
compaction figures are the Fauxmaster's, without its per-pass cost in every trial.
"""

from __future__ import annotations

import pytest

from bench.section5 import compaction, workload
from reference.fauxmaster import pack as fauxmaster_pack


@pytest.mark.parametrize("machines", [8, 16, 40])  # tight (most tasks left out), loose, all placed
@pytest.mark.parametrize("seed", [0, 1])
def test_synthetic_workload_packs_as_the_fauxmaster_places_it(machines: int, seed: int) -> None:
    work = workload.synthetic_workload(600, seed)
    cell = workload.machines_for(work, seed)[:machines]
    ours = compaction.pack(cell, work, seed).placed
    assert ours, "nothing placed: the comparison would be empty"
    assert ours == fauxmaster_pack(cell, workload.jobs_of(work), seed)


@pytest.mark.parametrize("machines", [150, 300])  # the trace's first machines: 67 of 200 pods fit, then all
def test_openb_workload_packs_as_the_fauxmaster_places_it(machines: int) -> None:
    cell, work = workload.openb_workload(200, 0)
    ours = compaction.pack(cell[:machines], work, 0).placed
    assert ours, "nothing placed: the comparison would be empty"
    assert ours == fauxmaster_pack(cell[:machines], workload.jobs_of(work), 0)
