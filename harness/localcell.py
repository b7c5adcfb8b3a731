"""Starts a local reference cell for the suite (the tests' `LocalCell` in `cell up`'s shape) and injects its faults; the one harness module that imports the cell's implementation (`reference/launcher`)."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from reference import launcher
from reference.launcher import (
    DEFAULT_MACHINE_SHARES,
    CellInfo,
    LauncherError,
    ProcessRecord,
    Role,
    testcell,
)
from reference.ports import HOST, free_port

#: Faster failure detection than the defaults, so a run sees many machine-down events, yet
#: slow enough (5 missed polls, about 1.5 s) that a borglet restarted at once is back before
#: its machine is declared down, so its killed tasks are reported lost one by one. Rolls are
#: not rate-limited below what a run needs, and every user has a quota in every band but best
#: effort, so admission is judged against one.
POLL_INTERVAL_S, DOWN_AFTER, LEASE_TTL_S = 0.3, 5, 2.0
MASTER_ARGS = ("--roll-rate", "20", "--default-quota", "cpu=24,ram=4GiB")
CAPACITY = "cpu=4000m,ram=8GiB"
READY_TIMEOUT_S = 20.0


@dataclass
class LocalCell:
    """A cell in a temp state dir. Every process the faults start again is recorded in its
    cell file, so `down` stops it with the rest and none outlives the cell."""

    replicas: int = 1
    machines: int = 3
    runtime: str = "process"  # the borglets' --runtime: "docker" runs jobs that name an image as containers
    state_dir: str = ""
    master_urls: list[str] = field(default_factory=list)
    masters: dict[str, ProcessRecord] = field(default_factory=dict)
    borglets: dict[str, ProcessRecord] = field(default_factory=dict)
    down_borglets: dict[str, ProcessRecord] = field(default_factory=dict)
    paused: dict[str, float] = field(default_factory=dict)  # name -> when it was stopped
    _next_machine: int = 0
    _cell: testcell.LocalCell | None = None

    def up(self) -> None:
        """The tests' `LocalCell` in `cell up`'s shape: its names, registration, a scheduler
        process, the machines' CPU group, the borglets' own isolation and kill grace."""
        self.state_dir = tempfile.mkdtemp(prefix="minborg-conformance-")
        self._cell = testcell.LocalCell(
            Path(self.state_dir), masters=self.replicas, borglets=self.machines, capacity=CAPACITY, cell="local",
            poll_interval=POLL_INTERVAL_S, down_after=DOWN_AFTER, lease_ttl=LEASE_TTL_S, master_args=MASTER_ARGS,
            schedulers=1, isolation=None, kill_grace_s=None, names=launcher.Names(), cell_up_registration=True,
            machine_shares=DEFAULT_MACHINE_SHARES, task_dir=Path.cwd(), runtime=self.runtime,
        ).start()  # fmt: skip
        info = CellInfo.load(self.state_dir)
        self.master_urls = list(info.master_urls)
        self.masters = {p.name: p for p in info.of_role(Role.MASTER)}
        self.borglets = {p.name: p for p in info.of_role(Role.BORGLET)}
        self._next_machine = self.machines

    def borglet_auth(self, machine: str) -> httpx.Auth:
        """Signs a read of `machine`'s borglet with the cell's channel key, as its masters do."""
        return launcher.borglet_auth(Path(self.state_dir), machine)

    def admin_token(self) -> str | None:
        """The cell's admin token, from its state dir (what its masters were started with)."""
        return launcher.read_admin_token(self.state_dir)

    def down(self) -> list[str]:
        """Stop the cell; returns what is still running."""
        leftovers: list[str] = []
        if self._cell is not None:
            self._cell.http.close()  # its processes are the cell file's: `down` stops them
        try:
            launcher.down(self.state_dir)
        except LauncherError as err:
            leftovers.append(str(err))
        keep = os.environ.get("MINBORG_CONFORMANCE_KEEP")
        if keep:  # the cell's files (logs, cell file) for a look after the run
            shutil.copytree(
                self.state_dir, Path(keep) / Path(self.state_dir).name,
                ignore_dangling_symlinks=True, ignore=shutil.ignore_patterns("*.sock", "etcd*"),
            )  # fmt: skip
        shutil.rmtree(self.state_dir, ignore_errors=True)
        return leftovers

    # --- faults -----------------------------------------------------------------------------------

    def kill_borglet(self, name: str) -> bool:
        """SIGKILL a borglet; its tasks keep running, orphaned, until it comes back."""
        proc = self.borglets.pop(name, None)
        if proc is None:
            return False
        _signal(proc, signal.SIGKILL)
        self.down_borglets[name] = proc
        return True

    def restart_borglet(self, name: str) -> bool:
        proc = self.down_borglets.pop(name, None)
        if proc is None:
            return False
        self.borglets[name] = self._start_again(proc)
        return True

    def pause_borglet(self, name: str) -> bool:
        """SIGSTOP a borglet (a hung machine agent): it answers nothing, its tasks run on."""
        proc = self.borglets.get(name)
        if proc is None or name in self.paused:
            return False
        _signal(proc, signal.SIGSTOP)
        self.paused[name] = time.monotonic()
        return True

    def resume_borglet(self, name: str) -> bool:
        proc = self.borglets.get(name)
        if self.paused.pop(name, None) is None or proc is None:
            return False
        _signal(proc, signal.SIGCONT)
        return True

    def bounce_borglet(self, name: str) -> bool:
        """A machine agent that crashed with its tasks (SIGKILL to the borglet and to every
        process it started) and is started again at once: back on the same state dir, it
        finds those tasks gone and reports them lost."""
        proc = self.borglets.get(name)
        if proc is None or name in self.paused:
            return False
        tasks = launcher.descendants([proc])
        _signal(proc, signal.SIGKILL)
        for task in tasks:
            launcher.signal_process(task, signal.SIGKILL)
        self.borglets[name] = self._start_again(proc)
        return True

    def kill_task_process(self, pid: int) -> bool:
        """SIGKILL a task's process, as an OOM killer or a crash would."""
        # Only processes our borglets started.
        task = next((t for t in launcher.descendants(self.borglets.values()) if t.pid == pid), None)
        return task is not None and launcher.signal_process(task, signal.SIGKILL)

    def add_borglet(self, name: str | None = None, url: str | None = None) -> tuple[str, str]:
        """Start a new borglet process (a new machine, or one the cell knows by `name` at a
        loopback `url` where nothing answered yet); the caller adds a new machine through the API."""
        i = self._next_machine
        self._next_machine += 1
        name = name or f"machine{i}"
        url = url or self.unused_address()
        port = int(url.rsplit(":", 1)[1])
        workdir = os.getcwd()
        record = launcher.start_borglet(
            Path(self.state_dir), name, port, CAPACITY, i, workdir, launcher.child_env(workdir),
            runtime=self.runtime, cell=CellInfo.load(self.state_dir).cell,
        )
        self.borglets[name] = self._recorded(record)
        return name, url

    def unused_address(self) -> str:
        """A loopback URL nothing listens on: the address of a machine whose borglet never answers."""
        return f"http://{HOST}:{free_port()}"

    def stop_borglet(self, name: str) -> None:
        """Stop a removed machine's borglet gracefully (it kills its tasks on exit)."""
        self.resume_borglet(name)
        proc = self.borglets.pop(name, None) or self.down_borglets.pop(name, None)
        if proc is not None:
            _signal(proc, signal.SIGTERM)

    def kill_master(self, url: str) -> str | None:
        for name, proc in self.masters.items():
            if proc.url == url:
                _signal(proc, signal.SIGKILL)
                return name
        return None

    def wait_leader(self, not_named: str | None = None, timeout: float = 20.0) -> str | None:
        """The leader's name once a master names one other than `not_named` (launcher's one
        way to find it), or None if none does within `timeout`."""
        try:
            return launcher.wait_for_leader(CellInfo.load(self.state_dir), timeout, not_named)
        except LauncherError:
            return None

    def restart_master(self, name: str) -> None:
        proc = self.masters[name]
        if not launcher.is_alive(proc):
            self.masters[name] = self._start_again(proc)

    def _start_again(self, proc: ProcessRecord) -> ProcessRecord:
        """Run a stopped process's command again, as `cell restart` would."""
        workdir = os.getcwd()
        record = launcher.spawn(
            proc.role, proc.name, list(proc.command), proc.url, Path(proc.log), workdir, launcher.child_env(workdir)
        )
        return self._recorded(record)

    def _recorded(self, record: ProcessRecord) -> ProcessRecord:
        """Record a process just started in the cell file (so `down` stops it), then wait for it
        to answer. One that does not answer is left to the suite to observe as a machine or
        replica that stays down."""
        launcher.with_records(CellInfo.load(self.state_dir), record.role, [record])
        with contextlib.suppress(LauncherError):
            launcher.wait_ready([record], "/healthz", READY_TIMEOUT_S)
        return record


def _signal(proc: ProcessRecord, sig: int) -> None:
    """Signal the process if it is still the one recorded; a SIGKILL is waited for."""
    if sig == signal.SIGKILL:
        with contextlib.suppress(LauncherError):  # already gone
            launcher.kill_process(proc, sig)
    else:
        launcher.signal_process(proc, sig)
