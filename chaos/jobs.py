"""The job documents the chaos load writes: task-less jobs whose CPU request is a register."""

from __future__ import annotations

from typing import Any

USER = "chaos"


def register_job(name: str, value: int) -> dict[str, Any]:
    # No tasks: the register lives in the job's request, so writing it starts no process.
    return {
        "name": name, "user": USER, "task_count": 0, "priority": "batch",
        "request": {"cpu": f"{value}m", "ram": "1MiB"}, "command": ["true"],
    }  # fmt: skip


def register_patch(value: int) -> dict[str, Any]:
    return {"request": {"cpu": f"{value}m", "ram": "1MiB"}}


def register_value(job: dict[str, Any]) -> int:
    return int(str(job["request"]["cpu"]).removesuffix("m"))
