"""The user's rules of the stateful test: API operations on jobs (submit, update, kill a job or a task, bursts, squeeze, reads), each applied to the spec model and judged by its answer."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from hypothesis import strategies as st
from hypothesis.stateful import initialize, precondition, rule

from harness.context import KINDS, RAM, ConformanceViolation, ExampleState
from harness.history import Outcome
from harness.observe import allocs_of, job_of, quotas_of
from reference.jobspec import parse_job
from spec import actions as spec_actions
from spec.fmap import FMap
from spec.model import CellState, Job, Resources, TaskState, is_stale

PRIORITIES = (0, 100, 200)
CPUS = (250, 500, 1000, 1500)
USERS = ("alice", "bob")
BURST_OPS = ("submit", "resize", "update_request", "update_field", "kill_job", "kill_task", "kill_task", "read")
CHANGE_OPS = ("resize", "update_request", "update_request", "update_field", "update_field", "kill_task", "kill_task")
# What `update_field` changes in a job's file (PUT of the whole file): its environment or its
# command (rolled out), its priority within its band or its budget (in place).
FIELD_CHANGES = ("env", "command", "priority", "max_unavailable", "env")
# The fields of a job file a task must restart to take (its template; reference/jobspec.py).
RESTART_FIELDS = ("command", "env", "cwd", "image", "health_check", "pids_max")
# What the user's releases change, one every RELEASE_EVERY steps in turn (`each_step`): a new
# environment or a new command, both rolled (the rules change priorities and budgets in place).
RELEASES = ("env", "command")
RELEASE_EVERY = 1


class UserRules(ExampleState):
    """What a user does to the cell over the API, with the spec model kept beside it: an
    answer the spec cannot explain (an admission it refuses, a refusal it allows) is a violation."""

    # --- helpers ----------------------------------------------------------------------------------

    def _pick(self, i: int) -> str:
        live = self._live()
        return live[i % len(live)]

    def _apply_model(self, action: str, *args: Any) -> bool:
        nxt = spec_actions.ACTIONS[action](self.model, *args)
        if nxt is None:
            return False
        self.model = nxt
        self.c.coverage.actions_model[action] += 1
        return True

    def _resync(self, key: str) -> None:
        """After an unknown outcome, adopt what the cell shows for the job (either is legal)."""
        answered, value = self.api.read_job(key)
        if not answered:
            return
        if value is None and key in self.model.jobs:
            self._apply_model("kill_job", key)
        elif value is not None and key in self.model.jobs:
            self._apply_model("update", key, value["task_count"], Resources.of(cpu=value["cpu"], ram=RAM))
            self._file_follows(key, value["task_count"], value["cpu"])

    def _file_follows(self, key: str, count: int | None, cpu: int | None) -> None:
        """The job's file as `update_field` sends it again: with the count and CPU a PATCH set."""
        doc = self.files.get(key)
        if doc is None:
            return
        if count is not None:
            doc = {**doc, "task_count": count}
        if cpu is not None:
            doc = {**doc, "request": {**doc["request"], "cpu": f"{cpu}m"}}
        self.files[key] = doc

    def _judge_refusal(self, what: str, status: int, legal: bool) -> None:
        """A 404/409 must match a false spec guard; 403 (quota) and 422 (input) are the cell's to give."""
        if status in (404, 409) and legal:
            raise ConformanceViolation(f"[api_guard] the cell refused {what} with {status}, but the spec allows it")

    def each_step(self) -> None:
        """The user's releases: every RELEASE_EVERY steps, a new version of one of the
        example's jobs last seen running a task (only running tasks roll) and rolling none,
        the jobs and the changes in turn.
        Like the rolling maintenance (harness/drain_rules.py), this runs whichever rules an
        example draws, so CI's short run reaches 100 updates and rolls. A release waits for
        a poll after the last one: a failover's gap in the polls would otherwise pile up
        versions no poll saw, each a roll more between two polls."""
        super().each_step()
        self.steps += 1
        if self.steps % RELEASE_EVERY or not self.model.jobs:
            return
        if self.prev is None or self.prev.t < self.released_at:
            return  # no poll has seen the last release (a failover's gap): wait for one
        self.releases += 1
        self.released_at = self.clock()
        n = self.releases
        seen = self.prev.state
        # A job running a task and rolling none: a version on top of a rollout not done
        # would leave more to settle, and roll no more tasks.
        ready = [
            k for k in self._live()
            if any(t.state is TaskState.RUNNING for t in seen.tasks_of(k)) and (job := seen.jobs.get(k)) is not None
            and not any(t.state is TaskState.RUNNING and is_stale(t, job) for t in seen.tasks_of(k))
        ]  # fmt: skip
        if ready:
            self.update_field(ready[n % len(ready)], n, RELEASES[n % len(RELEASES)])

    # --- API operations ---------------------------------------------------------------------------

    @initialize(
        jobs=st.lists(
            st.tuples(
                st.sampled_from(sorted(KINDS)), st.sampled_from(PRIORITIES), st.integers(1, 4),
                st.sampled_from(CPUS), st.sampled_from(USERS),
            ),
            min_size=2, max_size=4,
        )
    )
    def start_jobs(self, jobs: list[tuple[str, int, int, int, str]]) -> None:
        """Every example starts with a few jobs, so short runs still exercise the task actions."""
        for job in jobs:
            self.submit(*job)

    @rule(
        kind=st.sampled_from(sorted(KINDS)),
        priority=st.sampled_from(PRIORITIES),
        count=st.integers(1, 4),
        cpu=st.sampled_from(CPUS),
        user=st.sampled_from(USERS),
    )
    def submit(self, kind: str, priority: int, count: int, cpu: int, user: str) -> None:
        self._submit(kind, priority, count, cpu, user)

    def _submit(self, kind: str, priority: int, count: int, cpu: int, user: str, alloc: str | None = None) -> str | None:
        """Submit a job; `alloc` names one of the user's alloc sets for it to run in."""
        name = f"c{self.example}-{next(self.counter)}"
        command, policy = KINDS[kind]
        doc = {
            "name": name, "user": user, "priority": priority, "task_count": count,
            "request": {"cpu": f"{cpu}m", "ram": RAM}, "command": command,
            "restart_policy": policy.value, "appclass": "batch",
        }  # fmt: skip
        if alloc is not None:
            doc["alloc"] = alloc
        if self.c.image is not None:
            doc["image"] = self.c.image
        key = f"{user}/{name}"
        self.keys.add(key)
        self.watch.add(key)
        self.kinds[key] = kind
        job = Job(user, name, priority, count, Resources.of(cpu=cpu, ram=RAM), restart_policy=policy,
                  alloc=None if alloc is None else f"{user}/{alloc}", template=parse_job(doc).template())  # fmt: skip
        self.files[key] = doc
        r = self.api.submit(doc)
        self.c.coverage.api_ops["submit"] += 1
        if r.outcome is not Outcome.FAILED:
            self.submitted[key] = job
        if r.outcome is Outcome.OK:
            if not self._apply_model("submit", job):
                raise ConformanceViolation(f"[api_guard] the cell admitted {key}, which the spec refuses")
        elif r.outcome is Outcome.UNKNOWN:
            answered, value = self.api.read_job(key)
            if answered and value is not None:
                self._apply_model("submit", job)
        else:
            self._judge_refusal(f"submit {key}", r.status, spec_actions.submit(self.model, job) is not None)
            self._judge_quota_refusal(key, r.status, job)
        return key if r.outcome is Outcome.OK else None

    def _judge_quota_refusal(self, key: str, status: int, job: Job) -> None:
        """A 403 (over quota) must match the spec's quota guard on the cell as last seen: its
        jobs (this example's and any other's) and the quotas it shows, read again now: only
        this suite writes to a cell it started, so nothing admitted meanwhile can explain it."""
        if status != 403 or self.c.cell is None:
            return
        seen = self._quota_state()
        if seen is None or key in seen.jobs:
            return
        if spec_actions.fits_quota(seen, job) and spec_actions.job_is_valid(job):
            band, quota = job.band, seen.quota_for(job.user, job.band)
            raise ConformanceViolation(
                f"[api_guard] the cell refused {key} as over quota, but {job.user}'s {band.value} jobs "
                f"request {seen.quota_used(job.user, band)} and {job.total_request()} more fits the quota {quota}"
            )

    def _quota_state(self) -> CellState | None:
        """What a quota refusal is judged on: the cell's jobs, allocs and quotas, read now
        (None when one of them cannot be read)."""
        jobs, allocs, quotas = self.api.jobs(), self.api.get("/v1/allocs"), self.api.get("/v1/quotas")
        if jobs is None or allocs is None or quotas is None:
            return None
        return CellState(jobs=FMap({j.key: j for j in map(job_of, jobs)}), allocs=allocs_of(allocs.get("alloc_sets", [])),
                         quotas=quotas_of(quotas.get("quotas", [])))  # fmt: skip

    def _update(self, key: str, count: int | None, cpu: int | None) -> None:
        r = self.api.update(key, count, cpu)
        self.c.coverage.api_ops["update"] += 1
        request = None if cpu is None else Resources.of(cpu=cpu, ram=RAM)
        if r.outcome is Outcome.OK:
            self._apply_model("update", key, count, request)  # a no-op update is ok and changes nothing
            self._file_follows(key, count, cpu)
            if key in self.model.jobs:
                self.submitted[key] = self.model.jobs[key]
        elif r.outcome is Outcome.UNKNOWN:
            self._resync(key)
        else:
            self._judge_refusal(f"update {key}", r.status, spec_actions.update(self.model, key, count, request) is not None)

    def update_field(self, key: str, n: int, field: str | None = None) -> None:
        """Send the job's whole file again with one field changed (`PUT`): any field can change;
        the spec's update takes the new job, and the leader rolls out what needs a restart."""
        doc = self.files.get(key)
        if doc is None:
            return
        new = changed_file(doc, field or FIELD_CHANGES[n % len(FIELD_CHANGES)], n)
        r = self.api.put_job(new)
        self.c.coverage.api_ops["update_field"] += 1
        spec = parse_job(new)
        restarts = any(new.get(k) != doc.get(k) for k in RESTART_FIELDS)
        if (spec.template() != parse_job(doc).template()) != restarts:
            # The template digest comes from the job file's parser: held to what this suite
            # changed, so a parser that missed (or invented) a change cannot hide a roll.
            raise ConformanceViolation(
                f"[template] {key}: changing {sorted(k for k in new if new.get(k) != doc.get(k))} "
                f"{'must' if restarts else 'must not'} change the job's template"
            )
        if key in self.model.jobs:
            job = replace(self.model.jobs[key], priority=spec.priority, max_unavailable=spec.max_unavailable,
                          template=spec.template(), task_count=spec.task_count, request=spec.resources())  # fmt: skip
        else:
            job = None
        if r.outcome is Outcome.OK:
            self.files[key] = new
            if job is not None:
                self._apply_model("update", key, None, None, job)
                self.submitted[key] = self.model.jobs[key]
        elif r.outcome is Outcome.UNKNOWN:
            self._resync(key)
        else:
            legal = job is not None and spec_actions.update(self.model, key, None, None, job) is not None
            self._judge_refusal(f"update of {key}'s file", r.status, legal)

    def kill_job(self, key: str) -> None:
        r = self.api.kill(key)
        self.c.coverage.api_ops["kill_job"] += 1
        if r.outcome is Outcome.OK:
            if not self._apply_model("kill_job", key):
                raise ConformanceViolation(f"[api_guard] the cell killed {key}, which the spec says does not exist")
        elif r.outcome is Outcome.UNKNOWN:
            self._resync(key)
        else:
            self._judge_refusal(f"kill {key}", r.status, key in self.model.jobs)

    def _pick_busy(self, i: int) -> str:
        """A live job that was last seen with a task not DEAD, so killing one changes something."""
        seen = self.prev.state if self.prev is not None else CellState()
        busy = [k for k in self._live() if any(t.state is not TaskState.DEAD for t in seen.tasks_of(k))]
        return busy[i % len(busy)] if busy else self._pick(i)

    def kill_task(self, key: str, index: int) -> None:
        seen = self.prev.state if self.prev is not None else CellState()
        live = sorted(t.id.index for t in seen.tasks_of(key) if t.state is not TaskState.DEAD)
        if live and index not in live:
            index = live[index % len(live)]  # a live one, so the kill changes something
        r = self.api.kill_task(key, index)
        self.c.coverage.api_ops["kill_task"] += 1
        mine = self.model.latest(key, index)
        if r.outcome is Outcome.OK and mine is not None:
            self._apply_model("kill", mine.id)
        elif r.outcome is Outcome.FAILED and r.status == 404 and mine is not None:
            raise ConformanceViolation(f"[api_guard] the cell says {key} has no task {index}; the spec has {mine.id}")

    def read_job(self, i: int) -> None:
        self.api.read_job(sorted(self.keys)[i % len(self.keys)])
        self.c.coverage.api_ops["read"] += 1

    @rule(ops=st.lists(st.tuples(st.sampled_from(BURST_OPS), st.integers(0, 20), st.integers(0, 5)), min_size=1, max_size=6))
    def burst(self, ops: list[tuple[str, int, int]]) -> None:
        """API operations back to back (submit, resize, update of the request, kill of a job or
        of one task, read), observed together: more work per poll, and a poll that must
        explain several moves at once."""
        touched: set[str] = set()  # one change per job in a burst: each poll sees where it led
        for op, i, n in ops:
            if op == "read" and self.keys:
                self.read_job(i)
                continue
            if op == "submit":
                touched.add(self._submit(sorted(KINDS)[i % len(KINDS)], PRIORITIES[n % len(PRIORITIES)], 1 + n % 4, CPUS[i % len(CPUS)], USERS[n % 2]) or "")
                continue
            if not self.model.jobs:
                continue
            # A new request or a task kill changes something only where a task is live.
            key = self._pick_busy(i) if op in ("update_request", "kill_task") else self._pick(i)
            if key in touched:
                continue
            touched.add(key)
            if op == "resize":
                self._update(key, n, None)
            elif op == "update_request":
                self._update(key, None, CPUS[n % len(CPUS)])
            elif op == "update_field":
                self.update_field(key, n + i)
            elif op == "kill_job":
                self.kill_job(key)
            elif op == "kill_task":
                self.kill_task(key, n % 4)

    @rule(ops=st.lists(st.tuples(st.sampled_from(CHANGE_OPS), st.integers(0, 20), st.integers(0, 5)), min_size=1, max_size=6))
    def change_jobs(self, ops: list[tuple[str, int, int]]) -> None:
        """Changes to the example's jobs only (resize, new request, kill of one task), as a burst."""
        self.burst(ops)

    def new_versions(self, n: int, field: str) -> None:
        """A new version of every job of the example at once (`field` changed): the leader
        rolls them out side by side, each within its own budget."""
        for key in self._live():
            self.update_field(key, n, field)

    @rule(n=st.integers(0, 20))
    def new_environments(self, n: int) -> None:
        """Every job of the example gets a new environment: a rolling update of each."""
        self.new_versions(n, "env")

    @rule(n=st.integers(0, 20))
    def new_commands(self, n: int) -> None:
        """Every job of the example gets a new command (the same program): a rolling update of each."""
        self.new_versions(n, "command")

    @precondition(lambda self: self.c.cell is not None)
    @rule(count=st.integers(2, 4), cpu=st.sampled_from((1500, 2000)))
    def squeeze(self, count: int, cpu: int) -> None:
        """Replace the example's big production job: it needs most of the cell, so lower
        priority work there is preempted, and the old one's room is handed back."""
        if self.squeezer is not None and self.squeezer in self.model.jobs:
            self.kill_job(self.squeezer)
        self.squeezer = self._submit("service", 200, count, cpu, USERS[count % 2])


def changed_file(doc: dict[str, Any], field: str, n: int) -> dict[str, Any]:
    """`doc` with `field` changed: a new environment or command (its program unchanged: a
    trailing comment argument for sh, one more second for sleep), a priority moved within its
    band, or a budget of 1 or 2."""
    new = dict(doc)
    if field == "env":
        new["env"] = {"V": str(n)} if doc.get("env", {}).get("V") != str(n) else {}
    elif field == "command":
        cmd = list(doc["command"])
        if cmd[0] == "sleep":
            new["command"] = ["sleep", str(int(cmd[1]) + 1)]
        else:
            new["command"] = [*cmd[:3], f"v{n}"] if cmd[-1] != f"v{n}" else cmd[:3]
    elif field == "priority":
        floor = doc["priority"] // 100 * 100
        new["priority"] = floor + (n % 5) * 10 if floor + (n % 5) * 10 != doc["priority"] else floor + 50
    else:
        new["max_unavailable"] = 2 if doc.get("max_unavailable", 1) == 1 else 1
    return new
