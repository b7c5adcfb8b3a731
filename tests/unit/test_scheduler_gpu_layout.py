"""GPU layout: a machine's GPUs are whole GPUs of 1000 milli and a smaller last one; a share
goes to the fullest GPU it fits, whole GPUs take untouched ones, and an overcommitted GPU
reads as full.

Each table row states its inputs and the expected outcome, with the arithmetic in a comment.
"""

import pytest

from reference.scheduler import Snapshot
from reference.scheduler.cellview import CellView, gpu_layout, gpu_take, split_gpu
from tests.unit.scheduler_cells import machine, running


@pytest.mark.parametrize(
    ("milli", "layout"),
    [
        (0, []),  # no GPU at all: not a GPU of 0 (nor of 1) milli
        (-500, []),  # a negative capacity is clamped to 0
        (1, [1]),  # 1 // 1000 = 0 whole, 1 left over
        (1000, [1000]),  # exactly one whole GPU, no remainder
        (2500, [1000, 1000, 500]),  # 2500 = 2 * 1000 + 500
    ],
)
def test_gpu_layout(milli, layout):
    assert gpu_layout(milli) == layout


@pytest.mark.parametrize(("milli", "split"), [(0, (0, 0)), (460, (0, 460)), (2300, (2, 300))])
def test_split_gpu(milli, split):
    assert split_gpu(milli) == split


@pytest.mark.parametrize(
    ("gfree", "whole", "share", "picks"),
    [
        # Two whole GPUs of 1000 each; `gfree` is what each has free.
        ([300, 1000], 0, 200, [(0, 200)]),  # fullest that fits: GPU 0 (300 >= 200)
        ([1000, 300], 0, 200, [(1, 200)]),  # the same, GPU 1 this time
        ([100, 1000], 0, 200, [(1, 200)]),  # GPU 0 has only 100 < 200
        ([400, 300], 0, 350, [(0, 350)]),  # only GPU 0 has 350 free
        ([1000, 1000], 1, 0, [(0, 1000)]),  # one whole, untouched GPU
        ([1000, 1000], 1, 500, [(0, 1000), (1, 500)]),  # the share may not reuse the whole one
        ([999, 1000], 2, 0, None),  # GPU 0 is touched, so only one whole GPU is left
        ([100, 100], 0, 200, None),  # no GPU has 200 free
    ],
)
def test_gpu_take(gfree, whole, share, picks):
    assert gpu_take(gfree, [1000, 1000], whole, share) == picks


def test_cellview_machine_without_gpus_has_no_gpu_rows():
    # The cell has a GPU dimension (b has one GPU), so a's capacity vector reads gpu = 0:
    # a gets no GPUs at all, b one whole GPU.
    cell = CellView(Snapshot((machine("a"), machine("b", gpu=1000))), seed=0)
    assert cell.gcap == [[], [1000]]
    assert cell.gfree == [[], [1000]]


def test_overcommitted_gpu_reads_as_full():
    # One GPU of 1000 milli; two running tasks of 600 milli each (the spec's scalar accounting
    # is per machine, not per GPU, so the second one is overcommitted):
    #   first:  a share of 600 on GPU 0            -> free 1000 - 600 = 400
    #   second: no GPU has 600 free; take 400 from GPU 0, the remaining 200 goes to the GPU
    #           that had the most free (GPU 0)     -> free 400 - 400 - 200 = -200
    snap = Snapshot(
        (machine("a", gpu=1000),),
        (running("be/x", 0, 100, "a", 0, gpu=600), running("be/x", 0, 100, "a", 1, gpu=600)),
    )
    cell = CellView(snap, seed=0)
    assert cell.gfree == [[-200]]
    first, second = cell.victims[0]
    assert first.gpu_shares == [(0, 600)]
    assert second.gpu_shares == [(0, 400), (0, 200)]


def test_overcommit_remainder_goes_to_the_gpu_with_most_free():
    # Two GPUs. Running: 700 milli (GPU 0, free 300), 800 milli (GPU 1, free 200), then 900:
    #   no GPU has 900 free; order by free: GPU 0 (300), GPU 1 (200)
    #   take 300 from GPU 0 and 200 from GPU 1, 900 - 500 = 400 left -> onto GPU 0
    #   free: GPU 0 = 300 - 300 - 400 = -400, GPU 1 = 200 - 200 = 0
    snap = Snapshot(
        (machine("a", gpu=2000),),
        (
            running("be/x", 0, 100, "a", 0, gpu=700),
            running("be/x", 0, 100, "a", 1, gpu=800),
            running("be/x", 0, 100, "a", 2, gpu=900),
        ),
    )
    cell = CellView(snap, seed=0)
    assert cell.gfree == [[-400, 0]]
    assert cell.victims[0][2].gpu_shares == [(0, 300), (1, 200), (0, 400)]
