"""A load campaign's run folders read back: one Run per replica count (r1/, r3/, ...) with its
ladders' shape JSON, process samples and failures."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from loadtests.history import FailureKind, read_failures
from loadtests.sampler import Sample, read_csv


@dataclass
class Run:
    replicas: int
    record: dict[str, Any]
    ladder: dict[str, Any]
    reads: dict[str, Any] | None  # the reads-only ladder; None in runs from before it existed
    submit: dict[str, Any] | None
    submit0: dict[str, Any] | None
    samples: list[Sample]
    failures: list[FailureKind]
    submit_failures: list[FailureKind]
    reads_failures: list[FailureKind] = field(default_factory=list)

    @property
    def steps(self) -> list[dict[str, Any]]:
        return self.ladder.get("steps", [])

    @property
    def verdict(self) -> dict[str, Any] | None:
        return self.ladder.get("verdict")

    @property
    def reads_steps(self) -> list[dict[str, Any]]:
        return (self.reads or {}).get("steps", [])

    @property
    def cores(self) -> int:
        return int(self.record["machine"]["logical_cores"])


def _json(path: Path) -> dict[str, Any]:
    return json.loads(path.read_text()) if path.exists() else {}


def load_runs(root: Path) -> list[Run]:
    runs = []
    for run_json in sorted(root.glob("r*/run.json"), key=lambda p: int(p.parent.name[1:])):
        d = run_json.parent
        record = json.loads(run_json.read_text())
        runs.append(
            Run(
                replicas=record["replicas"],
                record=record,
                ladder=_json(d / "ladder_shape.json"),
                reads=_json(d / "reads_shape.json") or None,
                submit=_json(d / "submit_shape.json") or None,
                submit0=_json(d / "submit0_shape.json") or None,
                samples=read_csv(d / "samples.csv") if (d / "samples.csv").exists() else [],
                failures=read_failures(d / "ladder_failures.csv"),
                submit_failures=read_failures(d / "submit_failures.csv"),
                reads_failures=read_failures(d / "reads_failures.csv"),
            )
        )
    return runs


def group(step: dict[str, Any], name: str) -> dict[str, Any]:
    """A ladder step's figures for one request group (read, write); empty where it has none."""
    return step.get("groups", {}).get(name, {})
