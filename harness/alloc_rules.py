"""The alloc set rules of the stateful test: create an alloc set over the API (and run jobs in it), delete it; each judged by its answer and, through the observations, by the spec's alloc_create and alloc_delete."""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st
from hypothesis.stateful import initialize, precondition, rule

from harness.context import RAM, ConformanceViolation
from harness.history import OpKind, Outcome
from harness.observe import allocs_of
from harness.user_rules import USERS, UserRules
from spec import actions as spec_actions
from spec.model import Alloc, Resources

#: Alloc sets one example holds at most: each reserves room on up to three machines, so four
#: sets of the larger size fill every one of the three machines a started cell has.
MAX_SETS = 4
ALLOC_CPUS = (500, 1000)
ALLOC_PRIORITY = 100  # batch: the band most of the example's jobs take quota in too


class AllocRules(UserRules):
    """Alloc sets made and deleted over the API. The cell places them, so the spec model
    adopts the allocs the cell answers with; the placement itself is judged on the
    observations (harness/transitions.py `alloc_changes`, invariant `alloc_tasks_within_alloc`)."""

    def _alloc_sets(self) -> list[str]:
        """This example's alloc sets the model holds, by key."""
        return sorted({a.set for a in self.model.allocs.values()})

    def _adopt(self, view: dict[str, Any]) -> None:
        """Take the cell's allocs into the model: each through `alloc_create` on the machines as
        last seen (the model places nothing else there), else as the cell has it: which one
        the cell could place is judged on the observations, beside every task."""
        seen = self.prev if self.prev is not None else self.observer.poll(borglets=False)
        if seen is not None:
            self.model = self.model.with_(machines=seen.state.machines)
        for a in allocs_of([view]).values():
            if a.name not in self.model.allocs and not self._apply_model("alloc_create", a):
                self.model = self.model.with_(allocs=self.model.allocs.set(a.name, a))

    @initialize(count=st.integers(2, 3), user=st.sampled_from(USERS))
    def start_alloc_set(self, count: int, user: str) -> None:
        """Every example starts with an alloc set and a service in it, so short runs still
        create and delete allocs (the set is deleted at the example's end if not before)."""
        self.alloc_set(count, ALLOC_CPUS[0], user, [("service", count, 100)])

    @initialize(count=st.integers(2, 3), user=st.sampled_from(USERS))
    def start_second_alloc_set(self, count: int, user: str) -> None:
        """And a second set with a batch job in it, so two sets share the machines from the
        start: index i of both sets may land on one machine, and deleting one leaves the other."""
        self.alloc_set(count, ALLOC_CPUS[0], user, [("batch", count, 100)])

    @precondition(lambda self: len(self.alloc_keys) < MAX_SETS)
    @rule(count=st.integers(2, 3), cpu=st.sampled_from(ALLOC_CPUS), user=st.sampled_from(USERS),
          jobs=st.lists(st.tuples(st.sampled_from(("service", "batch")), st.integers(1, 3), st.sampled_from((100, 250))),
                        max_size=2))  # fmt: skip
    def alloc_set(self, count: int, cpu: int, user: str, jobs: list[tuple[str, int, int]]) -> None:
        """Reserve an alloc set, then run jobs in it: task i of each in alloc i, sharing it."""
        name = f"a{self.example}-{next(self.counter)}"
        self.alloc_keys.append(f"{user}/{name}")
        body = {"name": name, "user": user, "priority": ALLOC_PRIORITY, "count": count,
                "resources": {"cpu": f"{cpu}m", "ram": 4 * RAM}}  # fmt: skip
        r = self.api.request("POST", "/v1/allocs", body, write=True)
        self.c.coverage.api_ops["alloc_set"] += 1
        view = None
        if r.outcome is Outcome.OK:
            view = r.body["alloc_set"]
            if len(view.get("allocs", [])) != count or len({a["machine"] for a in view["allocs"]}) != count:
                raise ConformanceViolation(f"[api_guard] alloc set {user}/{name} of {count} answered as {view}")
        elif r.outcome is Outcome.UNKNOWN:
            found = self.api.get(f"/v1/allocs/{user}/{name}")
            view = None if found is None else found["alloc_set"]
        elif r.status == 403:
            self._judge_alloc_quota_refusal(user, name, count, Resources.of(cpu=cpu, ram=4 * RAM))
        elif r.status not in (409, 503):
            raise ConformanceViolation(f"[api_guard] a valid alloc set was refused with {r.status}: {r.body}")
        if view is None:
            return
        self._adopt(view)
        for kind, n, job_cpu in jobs:
            self._submit(kind, 100, min(n, count), job_cpu, user, alloc=name)

    def _judge_alloc_quota_refusal(self, user: str, name: str, count: int, each: Resources) -> None:
        """A 403 (over quota) must match the spec's quota guard for the whole set on the cell
        as it is now (only this suite writes to a cell it started)."""
        if self.c.cell is None:
            return
        seen = self._quota_state()
        if seen is None:
            return
        whole = Alloc(f"{user}/{name}", 0, "", each.scale(count), ALLOC_PRIORITY, user)
        if spec_actions.alloc_fits_quota(seen, whole):
            raise ConformanceViolation(
                f"[api_guard] the cell refused alloc set {user}/{name} as over quota, but {user}'s batch "
                f"jobs and allocs hold {seen.quota_used(user, whole.band)} and {whole.resources} more fits "
                f"the quota {seen.quota_for(user, whole.band)}"
            )

    @precondition(lambda self: bool(self.alloc_keys))
    @rule(i=st.integers(0, 5))
    def delete_alloc_set(self, i: int) -> None:
        """Delete one of the sets this example asked for: one the cell refused is a 404."""
        key = self.alloc_keys.pop(i % len(self.alloc_keys))
        if key in self._alloc_sets():
            self._delete_set(key)
            return
        r = self.api.request("DELETE", f"/v1/allocs/{key}", write=True)
        self.c.coverage.api_ops["delete_alloc_set"] += 1
        if r.outcome is Outcome.OK:
            raise ConformanceViolation(f"[api_guard] the cell deleted alloc set {key}, which the spec does not hold")
        if r.outcome is Outcome.FAILED and r.status not in (404, 503):
            raise ConformanceViolation(f"[api_guard] deleting alloc set {key}, which does not exist, answered {r.status}")

    def _delete_set(self, key: str) -> None:
        """Delete a set: the cell kills the jobs in it, then releases its allocs; so does the model."""
        # The delete is a kill of each job in the set, for the history's job registers too:
        # one kill per job that may exist, done where the cell says it killed the job.
        candidates = sorted(k for k, j in self.submitted.items() if j.alloc == key)
        kills = {k: self.c.history.invoke(OpKind.KILL, k) for k in candidates}
        r = self.api.request("DELETE", f"/v1/allocs/{key}", write=True)
        killed = set(r.body.get("killed_jobs", [])) if r.outcome is Outcome.OK else set()
        for k, op in kills.items():
            outcome = r.outcome if r.outcome is not Outcome.OK else (Outcome.OK if k in killed else Outcome.FAILED)
            self.c.history.complete(op, outcome, r.status)
        self.c.coverage.api_ops["delete_alloc_set"] += 1
        jobs = sorted(k for k, j in self.model.jobs.items() if j.alloc == key)
        if r.outcome is Outcome.FAILED:
            if r.status == 404:
                raise ConformanceViolation(f"[api_guard] the cell says alloc set {key} does not exist; the spec has it")
            return
        if r.outcome is Outcome.OK:
            missed = sorted(set(jobs) - killed)
            if missed:
                raise ConformanceViolation(f"[api_guard] deleting alloc set {key} left its jobs {missed}")
        elif self.api.get(f"/v1/allocs/{key}") is not None:
            return  # unknown, and still there: the delete did not happen
        for job in jobs:
            self._apply_model("kill_job", job)
        for a in sorted(self.model.alloc_set(key), key=lambda a: a.index):
            if not self._apply_model("alloc_delete", a.name):
                raise ConformanceViolation(f"[api_guard] the cell deleted alloc {a.name}, which the spec refuses")

    def clear_alloc_sets(self) -> None:
        """Delete this example's alloc sets (and so the jobs in them), for the next example."""
        for key in self._alloc_sets():
            self._delete_set(key)
        self.alloc_keys.clear()
