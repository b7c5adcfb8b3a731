"""Runs chaos experiments 1 and 2 on a real cell behind Toxiproxy and asserts their judged result; checks the judge."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

import pytest

from chaos import campaign
from chaos.checker import final_reads_check
from chaos.history import Op
from reference.launcher import find_toxiproxy_server

# Test runs write their journals and reports outside the tree (set MINBORG_CHAOS_OUT to keep
# them); the campaign reports under reports/chaos/ come from `minborg campaign chaos`.
OUT = Path(os.environ.get("MINBORG_CHAOS_OUT") or tempfile.mkdtemp(prefix="minborg-chaos-ci-"))


def _journal(before: bool, after: bool | None, status: str = "completed") -> dict:
    return {
        "status": status, "deviated": after is False,
        "steady_states": {"before": {"steady_state_met": before},
                          "after": None if after is None else {"steady_state_met": after}},
        "run": [{"activity": {"name": "fault"}, "status": "succeeded"}], "rollbacks": [],
    }  # fmt: skip


def test_judge_fails_a_hypothesis_that_failed_before_the_method() -> None:
    # Chaos Toolkit exits 0 here: the method never ran, so this must not pass.
    passed, reasons = campaign.judge(_journal(before=False, after=None, status="failed"))
    assert not passed and any("before" in r for r in reasons)


def test_judge_needs_every_activity_to_succeed() -> None:
    journal = _journal(before=True, after=True)
    assert campaign.judge(journal) == (True, [])
    journal["run"][0]["status"] = "failed"
    assert not campaign.judge(journal)[0]


def test_final_reads_check_finds_an_overwritten_acknowledged_write() -> None:
    ops = [
        Op(1, "submit", "chaos/k", {"cpu": 1}, 0.0, 1.0, "ok"),
        Op(2, "update", "chaos/k", {"cpu": 2}, 2.0, 3.0, "ok"),
        Op(3, "read", "chaos/k", None, 10.0, 10.1, "ok", {"cpu": 1}),
    ]
    verdict = final_reads_check(ops, final_t=10.0)
    assert not verdict.ok and verdict.lost_writes[0]["value"] == {"cpu": 2}
    ops[2].result = {"cpu": 2}
    assert final_reads_check(ops, final_t=10.0).ok


@pytest.mark.integration
@pytest.mark.slow
@pytest.mark.parametrize("number", [1, 2])
def test_experiment_holds(number: int) -> None:
    find_toxiproxy_server()  # fails with the install hint when the server is missing
    (path,) = campaign.experiment_files({number})
    result = campaign.run_experiment(path, OUT)
    summary = json.dumps({k: result[k] for k in ("passed", "reasons", "seconds")})
    assert result["passed"], summary
    assert result["seconds"] < 120, summary
    assert not (result["check"] or {}).get("lost_writes"), summary
