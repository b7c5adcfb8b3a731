"""The scheduler's view of the cell: resource vectors, free capacity with prod's reclaimed
slack, which running tasks count against a machine, and when a machine's score version moves."""

import pytest

from reference.scheduler import Snapshot
from reference.scheduler.cellview import CellView
from reference.scheduler.snapshot import RunningTask
from spec.model import Resources, TaskId
from tests.unit.scheduler_cells import machine, running


def test_cellview_vec_reads_missing_dimensions_as_zero():
    cell = CellView(Snapshot((machine("a", gpu=1000),)), seed=0)
    assert cell.dims == ("cpu", "ram", "gpu")
    assert cell.vec({"cpu": 1000}) == (1000, 0, 0)
    assert cell.vec({}) == (0, 0, 0)


def test_reclaimed_slack_is_what_prod_requested_beyond_its_reservation():
    # a: cpu 4000. A prod task requests 2000 and reserves 500 (Borg's estimate):
    #   free for prod     = 4000 - 2000         = 2000 (prod counts at its request)
    #   slack             = 2000 - 500          = 1500
    #   free for non-prod = 2000 + 1500         = 3500
    t = RunningTask(TaskId("p/web", 0), "a", 200, Resources.of(cpu=2000), reservation=Resources.of(cpu=500))
    cell = CellView(Snapshot((machine("a"),), (t,)), seed=0)
    assert cell.reclaimed == [True]
    assert cell.slack[0][0] == 1500
    assert cell.free_for(0, True)[0] == 2000
    assert cell.free_for(0, False)[0] == 3500


def test_running_tasks_in_allocs_or_off_the_cell_are_not_counted_twice():
    # In an alloc: counted through the alloc, not as a victim. Unknown machine: ignored.
    in_alloc = RunningTask(TaskId("be/x", 0), "a", 0, Resources.of(cpu=1000), in_alloc=True)
    elsewhere = running("be/y", 0, 1000, "zz")
    cell = CellView(Snapshot((machine("a"),), (in_alloc, elsewhere)), seed=0)
    assert cell.free[0][0] == 4000
    assert cell.victims == [[]]


@pytest.mark.parametrize(
    ("used_cpu", "bumped"),
    [
        # threshold 0.02 of cpu 4000 = 80 milli-cores of drift since the last bump
        (0, False),  # |4000 - 4000| = 0
        (80, False),  # |3920 - 4000| = 80, not more than 80
        (81, True),  # |3919 - 4000| = 81 > 80
        (-100, True),  # freed: |4100 - 4000| = 100 > 80
    ],
)
def test_touch_bumps_the_version_past_the_drift_threshold(used_cpu, bumped):
    cell = CellView(Snapshot((machine("a"),)), seed=0)
    cell.free[0][0] -= used_cpu
    assert cell.touch(0, 0.02) is bumped
    assert cell.version[0] == (1 if bumped else 0)
    assert cell.touch(0, 0.02) is False  # measured from the new reference now
