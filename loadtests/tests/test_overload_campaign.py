"""A short `minborg bench overload` campaign on real cells: its runs' directories outlive the
runs (only their etcd data goes at once) and are deleted after the last one."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

from loadtests import overload


def test_a_campaign_deletes_its_cells_after_its_last_run(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # where mkdtemp makes the cells
    seen: list[tuple[bool, bool, int]] = []
    real = overload.run

    def run(spec, start_timeout_s, kill_timeout_s, leftovers=None):
        result = real(spec, start_timeout_s, kill_timeout_s, leftovers)
        assert leftovers is not None
        root = leftovers[-1]
        seen.append(((root / "machines").is_dir(), (root / "etcd").exists(), len(leftovers)))
        return result

    monkeypatch.setattr(overload, "run", run)
    out = tmp_path / "overload.md"
    overload.main(["--runs", "40x2x1,40x2x1", "--out", str(out), "--start-timeout", "90", "--kill-timeout", "60"])
    # After each run its directory is still there, its etcd data gone; after the last, none is.
    assert seen == [(True, False, 1), (True, False, 2)]
    assert not list(tmp_path.glob("minborg-overload-*"))
    text = out.read_text()
    assert "deleted after the last run" in text
    runs = json.loads(text.split("```json", 1)[1].split("```", 1)[0])
    assert [r["doubles"] for r in runs] == [0, 0] and [r["orphans"] for r in runs] == [0, 0]
    assert all(r["all_started_s"] is not None for r in runs)
