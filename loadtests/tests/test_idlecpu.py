"""`python -m loadtests.idlecpu` on a small real cell: it counts the polls the link shards made
in its window and prices them, and every role it names used CPU it measured."""

from __future__ import annotations

from pathlib import Path

from loadtests import idlecpu


def test_an_idle_cells_cost_per_poll_is_measured(tmp_path: Path) -> None:
    got = idlecpu.run(40, 3, tmp_path, settle_s=4.0, window_s=6.0)
    # 40 machines polled every 2 s by the followers' shards: about 20 polls a second.
    assert 60 <= got["polls"] <= 400, got
    assert got["masters_ms_per_poll"] > 0
    assert set(got["cores"]) == {"leader", "followers", "scheduler", "etcd", "hollow"}
    assert got["cores"]["followers"] > 0 and got["cores"]["hollow"] > 0, got
