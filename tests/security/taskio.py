"""What the attack suites read back from a task: its record once it ended, its one JSON line of findings."""

from __future__ import annotations

import json
from typing import Any

from reference.client import CellClient
from tests.integration.cellkit import LocalCell, wait_for


def ended(api: CellClient, key: str) -> dict[str, Any]:
    """The task's record once it is DEAD."""
    return wait_for(lambda: (t := api.task(key, 0))["state"] == "DEAD" and t, 60, f"{key} to end")


def output(cell: LocalCell, api: CellClient, spec: dict[str, Any]) -> dict[str, Any]:
    """Submit a job whose one task (process or container) prints one JSON line, wait for it to
    end, return the line."""
    assert cell.submit(spec).status_code == 201
    key = f"{spec['user']}/{spec['name']}"
    task = ended(api, key)
    out = api.logs(key, 0).decode()
    assert out.strip(), (task, api.logs(key, 0, stream="stderr"))
    return json.loads(out.strip().splitlines()[-1])
