"""The small jobs the load campaigns submit: plain dicts, no Locust import (the campaign process
imports this too, and Locust would monkey-patch its threads)."""

from __future__ import annotations

from typing import Any

# Owner of the jobs the campaign submits before the reads-only ladder, for its users to read.
READ_JOBS_USER = "loadread"


def small_job(user: str, name: str, tasks: int = 1) -> dict[str, Any]:
    """A small batch job whose tasks stay PENDING: its constraint names a rack no machine has."""
    return {
        "name": name,
        "user": user,
        "priority": 100,
        "task_count": tasks,
        "request": {"cpu": "10m", "ram": "1MiB"},
        "command": ["sleep", "60"],
        "constraints": [{"attr": "rack", "op": "eq", "value": "none-loadtest"}],
    }


def read_job_keys(count: int) -> list[str]:
    """The keys of the `count` jobs submitted before the reads-only ladder."""
    return [f"{READ_JOBS_USER}/r{i}" for i in range(count)]
