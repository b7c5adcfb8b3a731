"""The stateful test: Hypothesis rules drive a live cell (API operations and faults) beside the spec as its model."""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from harness import windows
from harness.api import Api
from harness.checks import borglet_samples, check_observation, convergence_problems
from harness.coverage import Coverage
from harness.history import History, OpKind, Outcome, parse_task_id
from harness.localcell import LocalCell
from harness.observe import Observation, Observer, job_of, quotas_of
from harness.windows import LOST_GRACE_S
from spec import actions as spec_actions
from spec.fmap import FMap
from spec.model import CellState, Job, Resources, RestartPolicy, TaskState

SETTLE_TIMEOUT_S = 25.0
#: A paused borglet is resumed by the next cycle once its machine is seen down, or after this long.
PAUSE_LIMIT_S = 8.0
MAX_PHANTOMS = 3
MAX_PAUSED = 3
SHELTERED = "machine0"
RESIDENTS = 2
RESIDENT_AGE_S = 60.0
RAM = 16 * 1024 * 1024
#: What tasks run: cheap programs, so many fit on a two-core host. The borglet restarts a
#: failing task in place unless its policy is "never", so the fragile kind is the one
#: whose failures reach the master.
KINDS: dict[str, tuple[list[str], RestartPolicy]] = {
    "service": (["sleep", "3600"], RestartPolicy.ALWAYS),
    "batch": (["sleep", "2"], RestartPolicy.ON_FAILURE),
    "fragile": (["sh", "-c", "sleep 2; exit 3"], RestartPolicy.NEVER),
    "quick": (["sh", "-c", "test $TASK_INDEX = 0"], RestartPolicy.NEVER),  # index 0 finishes, the others fail, at once
}
PRIORITIES = (0, 100, 200)
CPUS = (250, 500, 1000, 1500)
USERS = ("alice", "bob")
BURST_OPS = ("submit", "resize", "update_request", "kill_job", "kill_task", "kill_task", "read")
CHANGE_OPS = ("resize", "update_request", "update_request", "kill_task", "kill_task")


@dataclass
class Context:
    """What every example shares: set by the runner before Hypothesis builds machines."""

    api: Api
    cell: LocalCell | None
    coverage: Coverage = field(default_factory=Coverage)
    history: History = field(default_factory=History)
    samples: list[dict[str, Any]] = field(default_factory=list)
    lost_windows: list[tuple[str, float, float]] = field(default_factory=list)
    examples: itertools.count = field(default_factory=itertools.count)
    failures: list[str] = field(default_factory=list)
    residents: dict[str, float] = field(default_factory=dict)  # job key -> when submitted
    resident_count: itertools.count = field(default_factory=itertools.count)
    #: The test's clock: on the scale of the observer's (monotonic) times, which lost windows
    #: are compared with.
    clock: Callable[[], float] = time.monotonic


CTX: Context | None = None


def ctx() -> Context:
    assert CTX is not None, "the runner sets harness.machine.CTX before running the test"
    return CTX


class ConformanceViolation(AssertionError):
    """The cell did something the spec forbids, or failed to converge where the spec says it must.

    Each is also kept in the context: a replay of a live cell may not fail the same way (or
    may draw differently), and the first finding must reach the report even then."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        if CTX is not None:
            CTX.failures.append(message)


class CellMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        c = ctx()
        self.c = c
        self.api = c.api
        self.clock = c.clock
        self.example = next(c.examples)
        self.model = CellState()
        self.keys: set[str] = set()
        self.kinds: dict[str, str] = {}
        self.submitted: dict[str, Job] = {}  # as last submitted or updated
        self.counter = itertools.count()
        # Jobs the observer reads tasks of: every job this example touched, until a killed one
        # is seen gone with all its tasks DEAD (it can change no more; the jobs list would show
        # it back). self.keys keeps them all, for convergence and the history's reads.
        self.watch: set[str] = set()
        self.observer = Observer(self.api, self.watch)
        self.prev: Observation | None = None
        self.down_since: dict[str, float] = {}
        self.added: list[str] = []
        self.phantoms: list[str] = []
        self.phantom_since: dict[str, float] = {}
        self.revived: set[str] = set()  # phantoms a borglet now answers for
        self.phantom_address: dict[str, str] = {}
        self.squeezer: str | None = None
        self.leader_kills = 0
        self._rotate_residents()

    # --- helpers ----------------------------------------------------------------------------------

    def _rotate_residents(self) -> None:
        """Keep RESIDENTS long-running service jobs in a cell this suite started, beside the
        examples' own: the master estimates a task's reservation only after it has run for a
        while (ten seconds and more), longer than most tasks of an example live, and lowers it
        step by step for about a minute after. Each is replaced once older than RESIDENT_AGE_S.
        They are no example's jobs: observed and judged like every job, but not killed at teardown."""
        if self.c.cell is None:
            return
        now = self.clock()
        for key, since in sorted(self.c.residents.items()):
            if now - since > RESIDENT_AGE_S and self.api.kill(key).outcome is not Outcome.FAILED:
                del self.c.residents[key]
        while len(self.c.residents) < RESIDENTS:
            name = f"resident{next(self.c.resident_count)}"
            command, policy = KINDS["service"]
            doc = {"name": name, "user": "carol", "priority": 100, "task_count": 4, "request": {"cpu": "500m", "ram": RAM},
                   "command": command, "restart_policy": policy.value, "appclass": "batch"}  # fmt: skip
            if self.api.submit(doc).outcome is Outcome.FAILED:
                return
            self.c.residents[f"carol/{name}"] = now

    def _live(self) -> list[str]:
        return sorted(self.model.jobs)

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

    def _judge_refusal(self, what: str, status: int, legal: bool) -> None:
        """A 404/409 must match a false spec guard; 403 (quota) and 422 (input) are the cell's to give."""
        if status in (404, 409) and legal:
            raise ConformanceViolation(f"[api_guard] the cell refused {what} with {status}, but the spec allows it")

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

    def _submit(self, kind: str, priority: int, count: int, cpu: int, user: str) -> str | None:
        name = f"c{self.example}-{next(self.counter)}"
        command, policy = KINDS[kind]
        doc = {
            "name": name, "user": user, "priority": priority, "task_count": count,
            "request": {"cpu": f"{cpu}m", "ram": RAM}, "command": command,
            "restart_policy": policy.value, "appclass": "batch",
        }  # fmt: skip
        key = f"{user}/{name}"
        self.keys.add(key)
        self.watch.add(key)
        self.kinds[key] = kind
        job = Job(user, name, priority, count, Resources.of(cpu=cpu, ram=RAM), restart_policy=policy)
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
        jobs, quotas = self.api.jobs(), self.api.get("/v1/quotas")
        if jobs is None or quotas is None:
            return
        seen = CellState(jobs=FMap({j.key: j for j in map(job_of, jobs)}), quotas=quotas_of(quotas.get("quotas", [])))
        if key in seen.jobs:
            return
        if spec_actions.fits_quota(seen, job) and spec_actions.job_is_valid(job):
            band, quota = job.band, seen.quota_for(job.user, job.band)
            raise ConformanceViolation(
                f"[api_guard] the cell refused {key} as over quota, but {job.user}'s {band.value} jobs "
                f"request {seen.quota_used(job.user, band)} and {job.total_request()} more fits the quota {quota}"
            )

    def _update(self, key: str, count: int | None, cpu: int | None) -> None:
        r = self.api.update(key, count, cpu)
        self.c.coverage.api_ops["update"] += 1
        request = None if cpu is None else Resources.of(cpu=cpu, ram=RAM)
        if r.outcome is Outcome.OK:
            self._apply_model("update", key, count, request)  # a no-op update is ok and changes nothing
            if key in self.model.jobs:
                self.submitted[key] = self.model.jobs[key]
        elif r.outcome is Outcome.UNKNOWN:
            self._resync(key)
        else:
            self._judge_refusal(f"update {key}", r.status, spec_actions.update(self.model, key, count, request) is not None)

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
            elif op == "kill_job":
                self.kill_job(key)
            elif op == "kill_task":
                self.kill_task(key, n % 4)

    @rule(ops=st.lists(st.tuples(st.sampled_from(CHANGE_OPS), st.integers(0, 20), st.integers(0, 5)), min_size=1, max_size=6))
    def change_jobs(self, ops: list[tuple[str, int, int]]) -> None:
        """Changes to the example's jobs only (resize, new request, kill of one task), as a burst."""
        self.burst(ops)

    @precondition(lambda self: self.c.cell is not None)
    @rule(count=st.integers(2, 4), cpu=st.sampled_from((1500, 2000)))
    def squeeze(self, count: int, cpu: int) -> None:
        """Replace the example's big production job: it needs most of the cell, so lower
        priority work there is preempted, and the old one's room is handed back."""
        if self.squeezer is not None and self.squeezer in self.model.jobs:
            self.kill_job(self.squeezer)
        self.squeezer = self._submit("service", 200, count, cpu, USERS[count % 2])

    @rule(seconds=st.sampled_from((0.5, 1.0, 2.0)))
    def wait(self, seconds: float) -> None:
        """Let the cell move, observing it meanwhile so polls skip fewer intermediate states."""
        deadline = self.clock() + seconds
        while self.clock() < deadline:
            time.sleep(0.3)
            self._observe_and_check()

    @rule()
    def settle(self) -> None:
        self._settle()

    # --- faults (harness/faults.py names them): only on a cell this suite started -------------------

    def _cell(self) -> LocalCell:
        assert self.c.cell is not None
        return self.c.cell

    def _due_back(self, name: str, since: float) -> bool:
        """A faulted borglet may come back once its machine was last seen down, or PAUSE_LIMIT_S
        after the fault (the cell may never have noticed a short one)."""
        m = self.prev.state.machines.get(name) if self.prev is not None else None
        return (m is not None and not m.up) or self.clock() - since > PAUSE_LIMIT_S

    def _steady(self) -> list[str]:
        """Borglets running and not paused that a fault may hit next: all but the first
        machine, which no fault touches, so tasks there live long enough (tens of seconds)
        for the master to estimate their reservations."""
        cell = self._cell()
        return sorted(n for n in cell.borglets if n not in cell.paused and n != SHELTERED and n not in self.phantoms)

    @precondition(lambda self: self.c.cell is not None)
    @rule(i=st.integers(0, 10))
    def crash_borglet(self, i: int) -> None:
        """Restart the borglets killed before once their machines are seen down (or after a
        while); else SIGKILL one, leaving its tasks running orphaned until it is back."""
        cell = self._cell()
        if cell.down_borglets:
            for name in sorted(cell.down_borglets):
                if self._due_back(name, self.down_since.get(name, 0.0)):
                    cell.restart_borglet(name)
                    self.c.coverage.injected("restart_borglet")
                    self._close_window(name, grace=LOST_GRACE_S)
            return
        names = self._steady()
        if not names:
            return
        name = names[i % len(names)]
        self.down_since = windows.lost_anew(self.down_since, name, self.clock())
        cell.kill_borglet(name)
        self.c.coverage.injected("crash_borglet")

    @precondition(lambda self: self.c.cell is not None)
    @rule(picks=st.lists(st.integers(0, 50), min_size=1, max_size=3))
    def kill_task_process(self, picks: list[int]) -> None:
        obs = self.prev
        if obs is None:
            return
        pids = sorted(
            r["pid"] for name, rep in obs.borglets.items() if name != SHELTERED for r in (rep or {}).get("tasks", [])
            if r.get("pid") and r.get("state") == "RUNNING"
        )  # fmt: skip
        for i in picks:
            if pids and self._cell().kill_task_process(pids[i % len(pids)]):
                self.c.coverage.injected("kill_task_process")

    @precondition(lambda self: self.c.cell is not None)
    @rule(i=st.integers(0, 10))
    def pause_borglet(self, i: int) -> None:
        """Resume paused borglets whose machines the cell has declared down (they come back
        up, running nothing), then pause one or two others (the sheltered machine never)."""
        cell = self._cell()
        for name in sorted(cell.paused):
            if self._due_back(name, cell.paused[name]):
                cell.resume_borglet(name)
                self.c.coverage.injected("resume_borglet")
        names = self._steady()
        for name in sorted({names[i % len(names)], names[(i + 1) % len(names)]} if names else ()):
            if len(cell.paused) < MAX_PAUSED:
                self.down_since = windows.lost_from(self.down_since, name, self.clock())
                cell.pause_borglet(name)
                self.c.coverage.injected("pause_borglet")

    @precondition(lambda self: self.c.cell is not None)
    @rule(picks=st.lists(st.integers(0, 10), min_size=1, max_size=2, unique=True))
    def bounce_borglet(self, picks: list[int]) -> None:
        """Borglets stopped (their tasks killed) and started again before their machines are
        declared down: they report those tasks killed, and the cell loses them one by one."""
        names = self._steady()
        for name in sorted({names[i % len(names)] for i in picks} if names else ()):
            self.c.lost_windows.append(windows.bounced(name, self.clock()))
            if self._cell().bounce_borglet(name):
                self.c.coverage.injected("bounce_borglet")

    @precondition(lambda self: self.c.cell is not None)
    @rule(n=st.integers(1, 2))
    def add_phantom(self, n: int) -> None:
        """Add up to `n` machines whose borglet never answers (dead on arrival): the cell may
        place tasks there before it declares them down. One seen down is revived (a borglet
        starts at its address, and the cell must bring it up, running nothing); one revived
        and seen up, or not seen down a while after it was added, is removed (drained)."""
        seen = self.prev.state.machines if self.prev is not None else {}
        for name in list(self.phantoms):
            m = seen.get(name)
            waited = self.clock() - self.phantom_since.get(name, 0.0) >= PAUSE_LIMIT_S
            if m is not None and not m.up and name not in self.revived:
                self._cell().add_borglet(name, self.phantom_address[name])
                self.revived.add(name)
                self.phantom_since[name] = self.clock()
                self.c.coverage.injected("revive_phantom")
                continue
            if not waited and (m is None or (m.up != (name in self.revived))):
                continue
            r = self.api.request("DELETE", f"/v1/machines/{name}", write=True)
            self.c.coverage.injected("remove_phantom")
            if r.outcome is Outcome.OK or r.status == 404:
                self._forget_phantom(name)
        for _ in range(min(n, MAX_PHANTOMS - len(self.phantoms))):
            name = f"phantom{self.example}-{next(self.counter)}"
            address = self._cell().unused_address()
            body = {"name": name, "address": address, "capacity": {"cpu": "4000m", "ram": "8GiB"},
                    "attrs": {"rack": "r9"}, "failure_domain": "r9"}  # fmt: skip
            r = self.api.request("POST", "/v1/machines", body, write=True)
            self.c.coverage.injected("add_phantom")
            if r.outcome is not Outcome.FAILED:
                self.phantoms.append(name)
                self.phantom_since[name] = self.clock()
                self.phantom_address[name] = address

    def _forget_phantom(self, name: str) -> None:
        self.phantoms.remove(name)
        if name in self.revived:
            self.revived.discard(name)
            self._cell().stop_borglet(name)

    @precondition(lambda self: self.c.cell is not None)
    @rule(i=st.integers(0, 5))
    def add_machine(self, i: int) -> None:
        """Drain and remove a machine this rule added (its borglet stopped after), or add one
        with a new borglet."""
        if self.added:
            name = self.added[i % len(self.added)]
            r = self.api.request("DELETE", f"/v1/machines/{name}", write=True)
            self.c.coverage.injected("remove_machine")
            if r.outcome is Outcome.OK:
                self.added.remove(name)
                self._cell().stop_borglet(name)
            return
        name, url = self._cell().add_borglet()
        body = {"name": name, "address": url, "capacity": {"cpu": "4000m", "ram": "8GiB"}, "attrs": {"rack": "r1"}, "failure_domain": "r1"}
        r = self.api.request("POST", "/v1/machines", body, write=True)
        self.c.coverage.injected("add_machine")
        if r.outcome is Outcome.OK:
            self.added.append(name)
        else:
            self._cell().stop_borglet(name)

    @precondition(lambda self: self.c.cell is not None and self.leader_kills < 1)
    @rule()
    def kill_leader(self) -> None:
        self.leader_kills += 1
        cell = self._cell()
        body = self.api.get("/v1/cell") or {}
        url = body.get("leader_url")
        name = cell.kill_master(url) if url else None
        if name is None:
            return
        self.c.coverage.injected("kill_leader")
        if cell.replicas > 1:
            self._wait_leader(exclude=name)
        cell.restart_master(name)
        self.c.coverage.injected("restart_master")
        self._wait_leader()

    def _wait_leader(self, exclude: str | None = None, timeout: float = 20.0) -> None:
        deadline = self.clock() + timeout
        while self.clock() < deadline:
            body = self.api.get("/v1/cell") or {}
            if body.get("leader") and body.get("leader") != exclude:
                return
            time.sleep(0.2)
        raise ConformanceViolation(f"[failover] no leader elected within {timeout:.0f}s")

    # --- after every step -----------------------------------------------------------------------------

    @invariant()
    def conforms(self) -> None:
        self._observe_and_check()

    def _observe_and_check(self) -> Observation | None:
        t0 = self.clock()
        obs = self.observer.poll(skip=set(self.c.cell.paused) if self.c.cell is not None else set())
        if obs is None:
            return None  # no master answered (a failover): nothing to judge this time
        self._record_reads(obs, t0)
        self._track_windows(obs)
        self._lost_since_last(obs)
        self.c.samples += borglet_samples(obs)
        bad = check_observation(self.prev, obs, self.c.coverage, self.submitted)
        self.prev = obs
        self._retire(obs)
        if bad:
            raise ConformanceViolation("; ".join(f"[{n}] {m}" for n, m in bad[:5]))
        return obs

    def _retire(self, obs: Observation) -> None:
        """Stop reading the tasks of killed jobs seen gone with every task DEAD."""
        for key in sorted(self.watch):
            if key not in self.model.jobs and key not in obs.state.jobs:
                if all(t.state is TaskState.DEAD for t in obs.state.tasks_of(key)):
                    self.watch.discard(key)

    def _record_reads(self, obs: Observation, t0: float) -> None:
        """The jobs list is a read of every job this example touched (absent reads as None)."""
        from harness.api import tracked

        views = {v.key: v for v in obs.state.jobs.values()}
        for key in sorted(self.keys):
            op = self.c.history.invoke(OpKind.READ, key, at=t0)
            job = views.get(key)
            value = None if job is None else tracked({"task_count": job.task_count, "request": {"cpu": f"{job.request.get('cpu')}m"}})
            self.c.history.complete(op, Outcome.OK, value, at=obs.t)

    def _track_windows(self, obs: Observation) -> None:
        """Machines seen down are lost from then; those seen up again, and no longer paused or
        killed here, are back (harness/windows.py)."""
        cell = self.c.cell
        faulted = set() if cell is None else {*cell.down_borglets, *cell.paused}
        up = {name: m.up for name, m in obs.state.machines.items()}
        self.down_since, closed = windows.seen(self.down_since, up, faulted, obs.t, self.clock())
        self.c.lost_windows.extend(closed)

    def _lost_since_last(self, obs: Observation) -> None:
        if self.prev is not None:
            self.c.lost_windows.extend(windows.lost_between(self.prev, obs))

    def _close_window(self, name: str, grace: float) -> None:
        self.down_since, window = windows.back(self.down_since, name, self.clock(), grace)
        if window is not None:
            self.c.lost_windows.append(window)

    def _settle(self) -> None:
        self.c.coverage.convergence_checks += 1
        deadline = self.clock() + SETTLE_TIMEOUT_S
        problems: list[str] = ["no observation"]
        while self.clock() < deadline:
            obs = self._observe_and_check()
            if obs is not None:
                problems = convergence_problems(self.model, obs, self.keys)
                if not problems:
                    return
            time.sleep(0.5)
        raise ConformanceViolation(f"[convergence] after {SETTLE_TIMEOUT_S:.0f}s: " + "; ".join(problems[:5]))

    def teardown(self) -> None:
        """Leave the cell as the next example expects it: machines back, this example's jobs gone."""
        if self.c.cell is not None:
            for name in sorted(self.c.cell.paused):
                self.c.cell.resume_borglet(name)
                self._close_window(name, grace=8.0)
            for name in sorted(self.c.cell.down_borglets):
                self.c.cell.restart_borglet(name)
                self._close_window(name, grace=8.0)
            for name in list(self.phantoms):
                self.api.request("DELETE", f"/v1/machines/{name}", write=True)
                self._forget_phantom(name)
            for name in list(self.added):
                self.api.request("DELETE", f"/v1/machines/{name}", write=True)
                self.c.cell.stop_borglet(name)
        for key in self._live():
            self.api.kill(key)
        deadline = self.clock() + SETTLE_TIMEOUT_S
        while self.clock() < deadline:
            obs = self.observer.poll()
            if obs is not None and not self._still_running(obs):
                break
            time.sleep(0.3)

    def _still_running(self, obs: Observation) -> bool:
        if any(t.state is not TaskState.DEAD and t.id.job in self.keys for t in obs.state.tasks.values()):
            return True
        return any(parse_task_id(str(s["task_id"]))[0] in self.keys for s in borglet_samples(obs))
