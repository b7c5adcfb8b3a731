"""Locust load of the nemesis campaign (loadtests/nemesis.py): submits, updates, kills and reads of per-key registers, and task kills.

The register clients are chaos/locustfile.py's `KVUser` (every operation's invocation and
completion go to $CHAOS_RUN_DIR/history.jsonl, every read recorded as it answered, stale ones
included); here each also kills one of its jobs now and then (`DELETE`, the key absent after
it, so its next write is a submit again). `TaskKillUser` cycles short-lived jobs of two running
tasks: submit, kill a task index (`DELETE .../tasks/{index}`, recorded as `kill_task`, a 404 on
an absent job modelled by the checker), kill the job. Run only through loadtests.nemesis, which bounds the run time.
"""

from __future__ import annotations

import random
import sys
from typing import Any

from locust import constant, task

import chaos.locustfile as base  # as a module: Locust runs only the users defined here
from chaos.history import Outcome


class RegisterUser(base.KVUser):
    """chaos/locustfile.py's register client, with a kill of one of its jobs one time in five."""

    weight = 3

    @task(1)
    def kill(self) -> None:
        if random.random() > 0.4 or not self.created:
            return
        name = random.choice(sorted(self.created))
        op = base.HISTORY.invoke("kill", f"chaos/{name}", None)
        outcome, status = self._call(op, "DELETE", f"/v1/jobs/chaos/{name}", None)
        if outcome == Outcome.OK or status == 404:
            # Gone now (or already): the next write of the key submits it again.
            self.created.discard(name)
            self.acked.discard(name)
        elif outcome == Outcome.UNKNOWN:
            # Perhaps gone: a submit would be refused with 409 if not, an update with 404;
            # keep it as created (an update), whose 404 is recorded as failed.
            self.acked.discard(name)


class TaskKillUser(base.KVUser):
    """A short-lived job of two tasks, cycled every few seconds: submitted, one task index
    killed (`kill_task`), the job killed; then the next one. Its task processes must end with
    it (the campaign looks for orphans in /proc)."""

    weight = 1
    fixed_count = 1
    wait_time = constant(3.0)
    step = 0

    def cycle(self) -> None:
        key = f"nemesis/victim-{base.RUN_ID}-{self.step // 3}"
        move = self.step % 3
        self.step += 1
        if move == 0:
            op = base.HISTORY.invoke("submit", key, {"cpu": VICTIM_CPU})
            self._call(op, "POST", "/v1/jobs", victim_job(key.split("/", 1)[1]))
        elif move == 1:
            op = base.HISTORY.invoke("kill_task", key, 0)
            self._call(op, "DELETE", f"/v1/jobs/{key}/tasks/0", None)
        else:
            op = base.HISTORY.invoke("kill", key, None)
            self._call(op, "DELETE", f"/v1/jobs/{key}", None)


# Locust adds a base class's tasks to a subclass's: this user runs its cycle alone.
TaskKillUser.tasks = [TaskKillUser.cycle]
VICTIM_CPU = 10


def victim_job(name: str) -> dict[str, Any]:
    return {
        "name": name, "user": "nemesis", "priority": 100, "task_count": 2,
        "request": {"cpu": f"{VICTIM_CPU}m", "ram": "16MiB"},
        "command": [sys.executable, "-c", "import time; time.sleep(36000)"],
    }  # fmt: skip
