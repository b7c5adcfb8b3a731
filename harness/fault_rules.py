"""The fault rules of the stateful test: each injects a fault of the catalogue (harness/faults.py names them) into a cell this suite started, and undoes it later.

A fault that takes a machine away opens a lost window for it (harness/windows.py): a task
seen running twice there meanwhile is forgiven.
"""

from __future__ import annotations

from hypothesis import strategies as st
from hypothesis.stateful import precondition, rule

from harness import windows
from harness.context import SHELTERED, ConformanceViolation, ExampleState
from harness.history import Outcome
from harness.localcell import LocalCell
from harness.windows import LOST_GRACE_S

#: A paused borglet is resumed by the next cycle once its machine is seen down, or after this long.
PAUSE_LIMIT_S = 8.0
MAX_PHANTOMS = 3
MAX_PAUSED = 3


class FaultRules(ExampleState):
    """Faults on the cell's processes and machines, only on a cell this suite started."""

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

    def _close_window(self, name: str, grace: float) -> None:
        self.down_since, window = windows.back(self.down_since, name, self.clock(), grace)
        if window is not None:
            self.c.lost_windows.append(window)

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
        self.down_since = windows.lost_from(self.down_since, name, self.clock())
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
        if self._cell().wait_leader(exclude, timeout) is None:
            raise ConformanceViolation(f"[failover] no leader elected within {timeout:.0f}s")

    def undo_faults(self) -> None:
        """Put the cell's machines back as the next example expects them: paused borglets
        resumed, killed ones restarted, phantoms and added machines removed."""
        if self.c.cell is None:
            return
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
        # Machines still lost (removed while lost, or not seen up again yet) keep their windows.
        self.c.lost_windows.extend(windows.close_all(self.down_since, self.clock()))
        self.down_since = {}
