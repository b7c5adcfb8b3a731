"""The job file's JSON Schema as editors read it: the model's schema (reference/jobspec.py) with `$schema`, an `$id`, and a description of every field, which an editor shows on hover and in completion.

`minborg job schema` prints it; docs/job.schema.json is a copy that the example job files
name on their first line (`# yaml-language-server: $schema=../docs/job.schema.json`), and a
unit test holds the copy to what the command prints and every field to a description.
"""

from __future__ import annotations

from typing import Any

SCHEMA_DIALECT = "https://json-schema.org/draft/2020-12/schema"
SCHEMA_ID = "urn:minborg:job-file"  # a name, not a place: the file travels with the repository
REPO_PATH = "docs/job.schema.json"

# Each field's description, by its path in the job file; a field whose model states one
# (restart_policy, max_unavailable, autoscale.max) keeps the model's.
DESCRIPTIONS: dict[str, str] = {
    "name": "The job's name, unique among its user's jobs; part of its BNS names (<index>.<name>.<user>.<cell>.minborg). "
            "1-63 letters, digits, '-' or '_'.",
    "user": "The user the job belongs to (its quota is charged, only its token or the admin's may change it); "
            "same rule as name.",
    "priority": "0-399, or a band's name meaning its floor: best_effort (0), batch (100), production (200), "
                "monitoring (300). A task may preempt tasks of a lower priority when no machine has room; production "
                "and monitoring tasks never preempt one another.",
    "task_count": "How many identical tasks (0-10000); task i is reachable as <i>.<name>.<user>.<cell>.minborg.",
    "request": "What each task needs on its machine: cpu in cores (0.25, 2) or milli-CPU ('250m'), ram and disk in "
               "bytes with a unit ('128MiB', '1GiB'), any other resource (gpu) as a count. A task is placed only "
               "where it fits and is held to it (cgroup limits).",
    "command": "The program and its arguments, run without a shell (write [sh, -c, '...'] for one); $PORT holds the "
               "port the borglet gives the task.",
    "env": "Environment variables for each task, beside those the borglet sets: PORT, TASK_INDEX, TASK_ID, BNS_NAME, "
           "MINBORG_MACHINE.",
    "cwd": "The working directory of each task's process; default: the task's own directory where the borglet runs "
           "tasks as their own users, else the borglet's.",
    "constraints": "Hard constraints on machine attributes: a task goes only to a machine that meets every one.",
    "constraints.attr": "The machine attribute to test (machine list -o wide shows them: rack, os, zone...).",
    "constraints.op": "eq and ne compare with one value; in and not_in with a list of values.",
    "constraints.value": "The one value eq and ne compare with (give value or values, not both).",
    "constraints.values": "The values in and not_in look for (at least one).",
    "appclass": "Borg's application class: latency_sensitive (a serving job) or batch. Recorded with the job and "
                "shown by `minborg job show`; the scheduler does not read it yet.",
    "health_check": "An HTTP probe of each task on its $PORT; BNS and the job's endpoints list only the tasks that "
                    "pass it.",
    "health_check.path": "The path probed with GET http://127.0.0.1:$PORT<path>; a 2xx answer is healthy.",
    "health_check.interval_s": "Seconds between two probes (above 0, at most 3600).",
    "package": "A package the tasks need: machines that already hold it are preferred (less to fetch).",
    "image": "A container image (name[:tag]) that each task runs in, on borglets of the docker runtime; "
             "empty: a plain process in a cgroup.",
    "alloc": "The name of one of the user's alloc sets: task i runs inside alloc i of the set, on its machine and "
             "within its reservation.",
    "autoscale": "Horizontal autoscaling: the master changes task_count between min and max to keep the metric per "
                 "task near target.",
    "autoscale.min": "The fewest tasks the autoscaler leaves (1-10000).",
    "autoscale.metric": "cpu: CPU use in percent of the request; requests_per_task: requests per second per task.",
    "autoscale.target": "The metric's target per task: a percent of the CPU request (70 means 0.7 of it, at most "
                        "1000) or requests per second.",
    "autoscale.scale_up_cooldown": "Seconds after the job's last resize before it grows again.",
    "autoscale.scale_down_cooldown": "Seconds after the job's last resize before it shrinks again.",
    "autoscale.stabilization_s": "A shrink goes only as low as the highest recommendation of this many seconds.",
    "autoscale.drain_s": "Seconds a leaving task is kept out of BNS and the endpoints before it is stopped.",
    "pids_max": "How many processes and threads each task may have at once (its pids cgroup); a fork bomb stops "
                "there.",
}  # fmt: skip

# The model's name of the definition each nested field's path starts with.
NESTED = {"constraints": "ConstraintSpec", "health_check": "HealthCheckSpec", "autoscale": "AutoscaleSpec"}


def fields(schema: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Every field of a job file by its path ('name', 'autoscale.min'), as the schema describes it."""
    out = dict(schema["properties"])
    for prefix, definition in NESTED.items():
        for name, prop in schema.get("$defs", {}).get(definition, {}).get("properties", {}).items():
            out[f"{prefix}.{name}"] = prop
    return out


def document(schema: dict[str, Any]) -> dict[str, Any]:
    """`schema` (JobSpec.model_json_schema()) with `$schema`, `$id` and each field's description."""
    for path, prop in fields(schema).items():
        if "description" not in prop and path in DESCRIPTIONS:
            prop["description"] = DESCRIPTIONS[path]
    schema["description"] = (
        "A minborg job file: a job's name, user, priority, task count, per-task request and command. "
        "Submit it with `minborg job submit FILE`."
    )
    return {"$schema": SCHEMA_DIALECT, "$id": SCHEMA_ID, **schema}
