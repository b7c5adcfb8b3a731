"""Starts a local reference cell for the suite and injects its faults; the one module that imports `reference/`."""

from __future__ import annotations

import os
import shutil
import signal
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import psutil

#: Faster failure detection than the defaults, so a run sees many machine-down events, yet
#: slow enough (5 missed polls, about 1.5 s) that a borglet restarted at once is back before
#: its machine is declared down, so its killed tasks are reported lost one by one. Rolls are
#: not rate-limited below what a run needs, and every user has a quota in every band but best
#: effort, so admission is judged against one.
MASTER_ARGS = (
    "--poll-interval", "0.3", "--down-after", "5", "--lease-ttl", "2", "--roll-rate", "20",
    "--default-quota", "cpu=24,ram=4GiB",
)  # fmt: skip
CAPACITY = "cpu=4000m,ram=8GiB"


@dataclass
class Proc:
    name: str
    argv: list[str]
    pid: int
    create_time: float
    url: str


@dataclass
class LocalCell:
    """A cell in a temp state dir; every process it ever started is tracked so none outlives it."""

    replicas: int = 1
    machines: int = 3
    state_dir: str = ""
    master_urls: list[str] = field(default_factory=list)
    masters: dict[str, Proc] = field(default_factory=dict)
    borglets: dict[str, Proc] = field(default_factory=dict)
    down_borglets: dict[str, Proc] = field(default_factory=dict)
    paused: dict[str, float] = field(default_factory=dict)  # name -> when it was stopped
    started: list[psutil.Process] = field(default_factory=list)
    _next_machine: int = 0

    def up(self) -> None:
        from reference import launcher

        self.state_dir = tempfile.mkdtemp(prefix="minborg-conformance-")
        info = launcher.up(
            self.state_dir, replicas=self.replicas, machines=self.machines, master_args=MASTER_ARGS
        )
        self.master_urls = list(info.master_urls)
        for p in info.processes:
            proc = Proc(p.name, psutil.Process(p.pid).cmdline(), p.pid, p.create_time, p.url)
            if p.role == launcher.Role.MASTER:
                self.masters[p.name] = proc
            elif p.role == launcher.Role.BORGLET:
                self.borglets[p.name] = proc
        self._next_machine = self.machines

    def down(self) -> list[str]:
        """Stop the cell and everything started beside it; returns what is still running."""
        from reference import launcher

        leftovers: list[str] = []
        extra = [p for p in self.started if _alive(p)]
        try:
            launcher.down(self.state_dir)
        except launcher.LauncherError as err:
            leftovers.append(str(err))
        for p in extra + [q for q in self.started if _alive(q)]:
            _kill_tree(p)
        time.sleep(0.2)
        leftovers += [f"pid {p.pid}" for p in self.started if _alive(p)]
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
        self.borglets[name] = self._spawn(proc.name, proc.argv, proc.url)
        _wait_healthy(proc.url)
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
        try:
            p = psutil.Process(proc.pid)
            tasks = p.children(recursive=True) if abs(p.create_time() - proc.create_time) < 0.05 else []
        except psutil.Error:
            tasks = []
        _signal(proc, signal.SIGKILL)
        for t in tasks:
            try:
                t.kill()
            except psutil.Error:
                pass
        self.borglets[name] = self._spawn(proc.name, proc.argv, proc.url)
        _wait_healthy(proc.url)
        return True

    def kill_task_process(self, pid: int) -> bool:
        """SIGKILL a task's process, as an OOM killer or a crash would."""
        try:
            p = psutil.Process(pid)
            if not any(pid in {c.pid for c in psutil.Process(b.pid).children(recursive=True)} for b in self.borglets.values() if _exists(b.pid)):
                return False  # only processes our borglets started
            p.kill()
            return True
        except psutil.Error:
            return False

    def add_borglet(self, name: str | None = None, url: str | None = None) -> tuple[str, str]:
        """Start a new borglet process (a new machine, or one the cell knows by `name` at a
        loopback `url` where nothing answered yet); the caller adds a new machine through the API."""
        from reference import launcher

        i = self._next_machine
        self._next_machine += 1
        name = name or f"machine{i}"
        url = url or self.unused_address()
        port = int(url.rsplit(":", 1)[1])
        argv = [
            sys.executable, "-m", "reference.borglet", "--name", name, "--listen", f"{launcher.HOST}:{port}",
            "--capacity", CAPACITY, "--attrs", f"rack=r{i % 2}", "--failure-domain", f"r{i % 2}",
            "--state-dir", str(Path(self.state_dir) / "machines" / name), "--kill-tasks-on-exit",
        ]  # fmt: skip
        self.borglets[name] = self._spawn(name, argv, url)
        _wait_healthy(url)
        return name, url

    def unused_address(self) -> str:
        """A loopback URL nothing listens on: the address of a machine whose borglet never answers."""
        from reference import launcher

        return f"http://{launcher.HOST}:{launcher.free_ports(1, host=launcher.HOST)[0]}"

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

    def restart_master(self, name: str) -> None:
        proc = self.masters[name]
        if not _exists(proc.pid):
            self.masters[name] = self._spawn(name, proc.argv, proc.url)
            _wait_healthy(proc.url)

    def _spawn(self, name: str, argv: list[str], url: str) -> Proc:
        from reference import launcher

        log = Path(self.state_dir) / "logs" / f"{name}.log"
        workdir = os.getcwd()
        rec = launcher.spawn(launcher.Role.BORGLET, name, argv, url, log, workdir, launcher.child_env(workdir))
        p = psutil.Process(rec.pid)
        self.started.append(p)
        return Proc(name, argv, rec.pid, rec.create_time, url)


def _exists(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def _alive(p: psutil.Process) -> bool:
    try:
        return p.is_running() and p.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def _signal(proc: Proc, sig: int) -> None:
    try:
        p = psutil.Process(proc.pid)
        if abs(p.create_time() - proc.create_time) < 0.05:
            p.send_signal(sig)
            if sig == signal.SIGKILL:
                p.wait(timeout=5)
    except (psutil.Error, psutil.TimeoutExpired):
        pass


def _kill_tree(p: psutil.Process) -> None:
    try:
        for c in p.children(recursive=True):
            c.kill()
        p.kill()
        p.wait(timeout=5)
    except (psutil.Error, psutil.TimeoutExpired):
        pass


def _wait_healthy(url: str, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if httpx.get(url + "/healthz", timeout=1.0).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.1)


def leftover_processes(root_pid: int | None = None) -> list[str]:
    """Descendants of this process still alive (the suite must leave none)."""
    me = psutil.Process(root_pid or os.getpid())
    return [f"{c.pid} {' '.join(c.cmdline()[:4])}" for c in me.children(recursive=True) if _alive(c)]
