"""The judgements made after every step: spec invariants on the observed state, explained transitions, convergence."""

from __future__ import annotations

import time
from collections.abc import Mapping

from harness.coverage import Coverage
from harness.history import LIVE_STATES
from harness.observe import Observation
from harness.transitions import (
    ENV_ACTIONS,
    MACHINE_ACTIONS,
    alloc_changes,
    explain_all,
    machine_changes,
    reservation_changes,
)
from spec.actions import EvictReason, Step, restart_allowed, roll, task_fits
from spec.invariants import INVARIANTS, check_state, check_step
from spec.model import CellState, Job, Task, TaskState, is_stale, may_preempt
from spec.taskid import parse_task_id

OBSERVE = Step("observe", ())


def check_observation(
    prev: Observation | None, cur: Observation, cov: Coverage, known: Mapping[str, Job] | None = None
) -> list[tuple[str, str]]:
    """(name, message) for every violation: state invariants, step invariants, unexplained moves.
    `known`: the jobs as submitted, for one submitted and killed between two polls."""
    cov.observations += 1
    bad = check_state(cur.state)
    for inv in INVARIANTS:
        if inv.state_check is not None:
            cov.invariant_checks[inv.name] += 1
    s = cur.state
    cov.quota_judged += sum(1 for u, b in {(j.user, j.band) for j in s.jobs.values()} if s.quota_for(u, b) is not None)
    cov.alloc_judged += sum(1 for t in s.tasks.values() if t.state is TaskState.RUNNING and _in_alloc(s, t))
    if prev is None:
        return bad
    # Step invariants are judged on every observed transition, as the spec's explorer does.
    for inv in INVARIANTS:
        if inv.step_check is not None:
            cov.invariant_checks[inv.name] += 1
    bad += check_step(prev.state, OBSERVE, cur.state)
    # A job's own step (submit, update, kill_job) explains every index it touched but happened
    # once: it counts once per poll. Machine steps are counted from the machines list below.
    job_steps: set[tuple[str, str]] = set()
    histories = {tid: v.get("history", []) for tid, v in cur.task_views.items()}
    replaced = _replaced(prev, cur)
    for v in explain_all(prev.state, cur.state, known, histories, replaced):
        cov.transitions += 1
        if v.path is None:
            bad.append(("spec_transition", v.describe() + _told(cur, v.after)))
            continue
        for step in v.path:
            if step.action in ENV_ACTIONS:
                if step.action not in MACHINE_ACTIONS:
                    job_steps.add((step.action, v.job))
                continue
            cov.actions_observed[step.action] += 1
            if step.action == "evict" and _was_preempted(cur, v.before):
                bad += _judge_preemption(prev.state, cur.state, v.before, cov, replaced)  # type: ignore[arg-type]
    for action, _ in job_steps:
        cov.actions_observed[action] += 1
    changes = machine_changes(prev.state, cur.state) + reservation_changes(prev.state, cur.state, replaced)
    for change in changes + alloc_changes(prev.state, cur.state):
        cov.actions_observed[change.step.action] += 1
        if change.problem is not None:
            bad.append(("spec_transition", change.problem))
    for name, _ in bad:
        cov.invariant_failures[name] += 1
    return bad


def _told(cur: Observation, task: Task) -> str:
    """What the cell's own history of a task says (its last moves, each with its reason),
    so that a move no spec path explains names where the task went and why."""
    moves = cur.task_views.get(task.id, {}).get("history", [])[-4:]
    if not moves:
        return ""
    return "; the cell says: " + ", ".join(f"{h.get('state')} ({h.get('reason') or '-'})" for h in moves)


def _replaced(prev: Observation, cur: Observation) -> frozenset:
    """Tasks whose last RUNNING entry in their history moved: placed again between the polls."""
    out = set()
    for tid, view in cur.task_views.items():
        old = prev.task_views.get(tid)
        if old is not None and _last_run(old) != _last_run(view):
            out.add(tid)
    return frozenset(out)


def _last_run(view: dict) -> object:
    runs = [h.get("at") for h in view.get("history", []) if h.get("state") == "RUNNING"]
    return runs[-1] if runs else None


def _was_preempted(cur: Observation, task: Task | None) -> bool:
    if task is None or task.id not in cur.task_views:
        return False
    # The task's last move back to PENDING is this eviction; an older one may have been a preemption.
    evictions = [h for h in cur.task_views[task.id].get("history", []) if h.get("state") == "PENDING"]
    return bool(evictions) and evictions[-1].get("reason") == "preempted"


def _judge_preemption(
    before: CellState, after: CellState, victim: Task, cov: Coverage, replaced: frozenset = frozenset()
) -> list[tuple[str, str]]:
    """The cell names no preemptor, so take the strongest task that may have waited between
    the polls and check the spec's rule against it: if even that one may not preempt the
    victim, no task could have. A task may have waited if it is new since, was PENDING before
    or is now, or was placed again (evicted or rolled back to PENDING, then placed): whatever
    became of it since, as it may have been killed after it preempted."""

    def waited(t: Task) -> bool:
        old = before.tasks.get(t.id)
        return (
            old is None or old.state is TaskState.PENDING or t.state is TaskState.PENDING
            or t.id in replaced or (t.state is TaskState.RUNNING and old.machine != t.machine)
        )  # fmt: skip

    waiting = [t for t in after.tasks.values() if t.id != victim.id and waited(t)]
    cov.api_ops["preemptions_judged"] += 1
    if not waiting:
        return [("prod_never_preempts_prod", f"{victim.id} was preempted with no task waiting")]
    p = max(waiting, key=lambda t: (may_preempt(t.priority, victim.priority), t.priority))
    pre = before.with_(tasks=before.tasks.set(p.id, Task(p.id, TaskState.PENDING, None, p.priority, p.request)))
    return check_step(pre, Step("evict", (victim.id, EvictReason.PREEMPTION, p.id)), after)


# The shell's pause of a rollout (reference/master/rollout.py): a task of a job's current version
# that exited by its own doing (an exit code or a signal: the harness's kill_task_process is
# one) and was restarted does not serve, and the job's rollout replaces nothing more, until that
# task has run this long (its back-off's reset, master/backoff.py).
ROLLOUT_PAUSE_S = 60.0


def rollout_paused(s: CellState, obs: Observation, now: float) -> set[str]:
    """The jobs whose rollout the shell holds by its documented rule: a task of the current
    version crashed and restarted within ROLLOUT_PAUSE_S (its view's last exit, failures or
    restarts, and start, `now` on the wall clock). The spec's `roll` allows their stale tasks'
    replacement; the shell waits, so convergence does not ask it of them meanwhile."""
    out: set[str] = set()
    for t in s.tasks.values():
        job = s.jobs.get(t.id.job)
        if t.state is not TaskState.RUNNING or job is None or is_stale(t, job):
            continue
        view = obs.task_views.get(t.id) or {}
        started = view.get("started_at")
        crashed = bool(view.get("last_exit")) and bool(view.get("failures") or view.get("restarts"))
        if crashed and isinstance(started, int | float) and now - started < ROLLOUT_PAUSE_S:
            out.add(t.id.job)
    return out


def convergence_problems(model: CellState, obs: Observation, keys: set[str], now: float | None = None) -> list[str]:
    """What differs between the settled cell and what the spec predicts for it (`now`: the
    wall clock, for the shell's rollout pause)."""
    out: list[str] = []
    s = obs.state
    paused = rollout_paused(s, obs, time.time() if now is None else now)
    for key in sorted(keys):
        want, got = model.jobs.get(key), s.jobs.get(key)
        if want is None:
            if got is not None:
                out.append(f"{key} was killed but is still listed")
            live = [t for t in s.tasks_of(key) if t.state is not TaskState.DEAD]
            if live:
                out.append(f"{key} was killed but {live[0].id} is {live[0].state.value}")
            continue
        if got is None:
            out.append(f"{key} was admitted but is not listed")
            continue
        if (got.task_count, got.request) != (want.task_count, want.request):
            out.append(f"{key} has {got.task_count} tasks of {got.request}, want {want.task_count} of {want.request}")
        indices = s.live_indices(key)
        for i in range(want.task_count):
            out += _index_problems(model, s, want.restart_policy, key, i, indices.get(i), key in paused)
        for i, t in indices.items():
            if i >= want.task_count and t.state is not TaskState.DEAD:
                out.append(f"{t.id} is {t.state.value} beyond the job's {want.task_count} tasks")
    out += _borglet_problems(obs, keys)
    return out


def _index_problems(
    model: CellState, s: CellState, policy, key: str, i: int, t: Task | None, paused: bool = False
) -> list[str]:
    if t is None:
        return [f"{key}/{i} has no task"]
    mine = model.latest(key, i)
    if mine is not None and mine.state is TaskState.DEAD:  # killed by the user: stays dead
        return [] if t.state is TaskState.DEAD else [f"{t.id} was killed but is {t.state.value}"]
    if t.state is TaskState.DEAD:
        return [f"{t.id} is DEAD ({t.cause}) though its job's policy restarts it"] if restart_allowed(policy, t.cause) else []
    if t.state is TaskState.PENDING:
        room = room_for(s, key, t)
        return [f"{t.id} is PENDING though {room} has room for it"] if room else []
    job = s.jobs[key]
    if is_stale(t, job) and roll(s, t.id) is not None and not paused:  # a roll the spec allows, the shell not paused
        return [f"{t.id} still runs an older version than its job's {job.version} (no roll)"]
    return []


def room_for(s: CellState, key: str, t: Task) -> str | None:
    job = s.jobs[key]
    if job.alloc is not None:
        # Task i of a job in an alloc set may run only in alloc i: room elsewhere is no room.
        a = s.alloc_for(job, t.id.index)
        m = None if a is None else s.machines.get(a.machine)
        if m is not None and m.up and m.schedulable and task_fits(s, t, job, m):
            return f"{m.name} (alloc {a.name})"  # type: ignore[union-attr]
        return None
    for m in s.machines.values():  # a drained machine has no room for anything new
        if m.up and m.schedulable and all(c.holds(m) for c in job.constraints):
            free = m.capacity - s.machine_reserved(m.name)
            if job.request.fits_in(free):
                return m.name
    return None


def _borglet_problems(obs: Observation, keys: set[str]) -> list[str]:
    """What the borglets really run must be what the API shows RUNNING there."""
    out = []
    s = obs.state
    for name, report in obs.borglets.items():
        m = s.machines.get(name)
        if report is None or m is None or not m.up:
            continue
        live = set()
        for r in report.get("tasks", []):
            job, index, inc, _ = parse_task_id(r["task_id"])
            if job in keys and r.get("state") in LIVE_STATES:
                live.add((job, index, inc))
        shown = {
            (t.id.job, t.id.index, t.id.incarnation)
            for t in s.running_on(name)
            if t.id.job in keys
        }
        for j, i, inc in sorted(live - shown):
            out.append(f"{name} runs {j}/{i}#{inc}, which the API does not show RUNNING there")
        for j, i, inc in sorted(shown - live):
            out.append(f"the API shows {j}/{i}#{inc} RUNNING on {name}, whose borglet does not run it")
    return out


def borglet_samples(obs: Observation) -> list[dict[str, object]]:
    """Live task reports of one poll, for the history checker's double-running check."""
    out = []
    for name, report in obs.borglets.items():
        t0, t1 = obs.borglet_times.get(name, (obs.t, obs.t))
        for r in (report or {}).get("tasks", []):
            if r.get("state") in LIVE_STATES:
                out.append({"t0": t0, "t1": t1, "machine": name, "task_id": r["task_id"], "state": r["state"]})
    return out


def _in_alloc(s: CellState, t: Task) -> bool:
    """Does the running task's job name an alloc set (so `alloc_tasks_within_alloc` judges it)?"""
    job = s.jobs.get(t.id.job)
    return job is not None and job.alloc is not None
