"""The nemesis campaign, short: about 2 minutes of random faults of a real network on a netns cell under Locust load, judged as the 30-minute one is.

`minborg campaign nemesis --minutes 2` is run as a user runs it; it must exit 0 (no lost write,
no non-linearizable or undecided key, no index twice outside a partition window + 10 s, no
orphan, nothing undecided), and what it wrote must show that it did what it says: fault windows
of the listed kinds, every kind of operation recorded with its invocation and completion, /proc
sampled every 0.5 s, a report and its plot. The judgement of /proc samples against the windows
is checked on its own first, with an index twice outside every window, so it can fail.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from loadtests import nemesis
from reference.launcher import netns
from tests.integration.cellkit import REPO

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(netns.usable() is not None, reason=f"no netns hosts here: {netns.usable()}"),
]

MINUTES = 2.0
SEED = int(os.environ.get("MINBORG_NEMESIS_SEED", "7"))


def test_an_index_twice_is_allowed_only_in_a_partition_window_of_a_machine_and_10_s_after() -> None:
    windows = [
        {"kind": "isolate", "targets": ["machine1"], "start": 100.0, "end": 110.0},
        {"kind": "isolate", "targets": ["master0"], "start": 200.0, "end": 210.0},  # no machine cut
        {"kind": "disk_full", "targets": ["etcd1"], "start": 300.0, "end": 310.0},  # not a partition
    ]
    samples = [
        {"t": 105.0, "twice": ["nemesis/steady/1"]},
        {"t": 119.9, "twice": ["nemesis/steady/1"]},  # within the 10 s after
        {"t": 120.5, "twice": ["nemesis/steady/1"]},  # past it
        {"t": 205.0, "twice": ["nemesis/steady/2"]},
        {"t": 305.0, "twice": ["nemesis/steady/3"]},
        {"t": 400.0, "twice": []},
    ]
    judged = nemesis.judge_doubles(samples, windows)
    assert judged["samples_twice_inside_windows"] == 2
    assert judged["violating_samples"] == 3
    assert [v["t"] for v in judged["violations"]] == [120.5, 205.0, 305.0]


def test_a_short_nemesis_campaign_passes_and_records_what_it_judged(tmp_path: Path) -> None:
    run_dir, report = tmp_path / "run", tmp_path / "report" / "nemesis.md"
    done = subprocess.run(
        [sys.executable, "-m", "reference.cli", "campaign", "nemesis", "--minutes", str(MINUTES), "--seed", str(SEED),
         "--run-dir", str(run_dir), "--report", str(report)],
        capture_output=True, text=True, timeout=900, cwd=REPO,
    )  # fmt: skip
    print(done.stdout[-3000:], done.stderr[-3000:])
    result = json.loads((run_dir / "result.json").read_text())
    assert done.returncode == 0, (result["verdicts"], result["undecided"], result["notes"])
    assert result["passed"] and not result["undecided"]

    windows = [json.loads(line) for line in (run_dir / "faults.jsonl").read_text().splitlines()]
    assert len(windows) >= 4, windows
    assert all(w["kind"] in nemesis.KINDS and w["targets"] and w["start"] < w["end"] for w in windows)
    assert all("error" not in w and "heal_error" not in w for w in windows), windows
    assert all(a["end"] <= b["start"] for a, b in zip(windows, windows[1:], strict=False)), "faults overlapped"

    ops = [json.loads(line) for line in (run_dir / "history.jsonl").read_text().splitlines()]
    kinds = {o["op"] for o in ops}
    assert {"submit", "update", "kill", "kill_task", "read"} <= kinds, kinds
    assert all(o["invoke_t"] <= o["complete_t"] for o in ops)
    assert sum(o["outcome"] == "ok" and o["op"] == "update" for o in ops) >= 50

    samples = result["doubles"]["samples"]
    assert samples >= MINUTES * 60 / nemesis.SAMPLE_S * 0.5, samples
    assert not result["orphans_after_down"] and not result["orphans_settled"]
    text = report.read_text()
    assert "**Verdict: PASS**" in text and "minborg campaign nemesis --minutes" in text
    assert report.with_suffix(".png").stat().st_size > 10_000
    print(f"FIGURES nemesis seed {SEED}: {len(windows)} faults ({sorted({w['kind'] for w in windows})}), "
          f"{len(ops)} ops, {samples} /proc samples, verdicts {result['verdicts']}")  # fmt: skip
