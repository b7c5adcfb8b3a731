"""Task isolation strategies: cgroup v1 groups where writable, else rlimits; chosen at startup."""

from __future__ import annotations

import logging
from dataclasses import dataclass

import psutil

from reference.borglet import cgroups
from reference.borglet.processes import Confinement

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Sample:
    """Cumulative CPU time (ns) and current RAM (bytes) of one task."""

    cpu_ns: int
    ram_bytes: int


class Isolation:
    """What the supervisor needs from an isolation strategy."""

    name = "none"

    def prepare(
        self, key: str, cpu_milli: int, ram_bytes: int, alloc: cgroups.AllocGroup | None = None,
        pids_max: int = cgroups.DEFAULT_PIDS_MAX,
    ) -> dict[str, str]:  # fmt: skip
        """Set up the task's container (inside its alloc's, if it runs in one); returns what
        `confinement`/`sample`/`release` need later."""
        return {}

    def confinement(self, group: dict[str, str], pids_max: int, ram_bytes: int) -> Confinement:
        """What the task's process is put under before its first instruction (processes.spawn)."""
        return Confinement()

    #: Whether an alloc gets a group of its own here, for a container in it to go beneath.
    alloc_groups = False

    def prepare_alloc(self, alloc: cgroups.AllocGroup) -> None:
        """Make the alloc's own group with its limits (a container's group goes beneath it)."""

    def release_idle_allocs(self, busy: set[str]) -> None:
        """Remove the empty alloc groups not named in `busy` (their directory names)."""

    def sample(self, group: dict[str, str], pid: int | None) -> Sample:
        return tree_sample(pid)

    def oom_kills(self, group: dict[str, str]) -> int:
        return 0

    def release(self, group: dict[str, str]) -> bool:
        """Tear down the container after the task ended; False to retry later."""
        return True

    def close(self) -> None:
        """Called at borglet exit."""


class RlimitIsolation(Isolation):
    """No containers: an address-space rlimit from the RAM request, usage from psutil. An
    alloc is then only the master's reservation: its tasks get no shared limit here."""

    name = "rlimit"

    def confinement(self, group: dict[str, str], pids_max: int, ram_bytes: int) -> Confinement:
        # The spawn helper sets it on itself as root before it drops its ids (no capability
        # needed to lower one's own limit); the fork path sets it once the process exists.
        return Confinement(rlimit_as=ram_bytes if ram_bytes > 0 else None)


class CgroupIsolation(Isolation):
    """One cgroup per task in each v1 hierarchy: memory limit, CFS quota, cpuacct usage."""

    name = "cgroup"
    alloc_groups = True

    def __init__(self, tree: cgroups.CgroupTree):
        self.tree = tree

    def prepare_alloc(self, alloc: cgroups.AllocGroup) -> None:
        self.tree.create_alloc(alloc)

    def release_idle_allocs(self, busy: set[str]) -> None:
        self.tree.remove_idle_allocs(busy)

    def prepare(
        self, key: str, cpu_milli: int, ram_bytes: int, alloc: cgroups.AllocGroup | None = None,
        pids_max: int = cgroups.DEFAULT_PIDS_MAX,
    ) -> dict[str, str]:  # fmt: skip
        return self.tree.create(key, cpu_milli, ram_bytes, alloc, pids_max)

    def confinement(self, group: dict[str, str], pids_max: int, ram_bytes: int) -> Confinement:
        # Born in the task's groups: the helper writes its own pid into each before it execs
        # the task (the fork path: the spawning thread joins them for the fork).
        return Confinement(cgroups=dict(group), pids_max=pids_max)

    def sample(self, group: dict[str, str], pid: int | None) -> Sample:
        cpu = cgroups.cpu_ns(group)
        ram = cgroups.ram_bytes(group)
        if cpu is None or ram is None:
            return tree_sample(pid)
        return Sample(cpu_ns=cpu, ram_bytes=ram)

    def oom_kills(self, group: dict[str, str]) -> int:
        return cgroups.oom_kills(group) if group else 0

    def release(self, group: dict[str, str]) -> bool:
        if not group:
            return True
        if not cgroups.remove_group(group):
            return False
        self.tree.remove_empty_alloc(group)
        return True

    def close(self) -> None:
        self.tree.remove_bases()


def choose(mode: str, machine: str) -> Isolation:
    """'cgroup', 'rlimit', or 'auto' (cgroup when the hierarchies are writable)."""
    if mode == "rlimit":
        return RlimitIsolation()
    tree = cgroups.CgroupTree(machine)
    problem = tree.usable()
    if problem is None:
        if "pids" not in tree.bases:
            log.warning("cgroup v1 hierarchy 'pids' is not mounted: tasks get no pids limit")
        return CgroupIsolation(tree)
    if mode == "cgroup":
        raise SystemExit(f"--isolation cgroup: {problem}; use --isolation rlimit or auto")
    log.warning("falling back to rlimit isolation: %s", problem)
    return RlimitIsolation()


def tree_sample(pid: int | None) -> Sample:
    """CPU and RSS summed over a process and its descendants (the rlimit-mode usage)."""
    if pid is None:
        return Sample(0, 0)
    try:
        root = psutil.Process(pid)
        procs = [root, *root.children(recursive=True)]
    except psutil.Error:
        return Sample(0, 0)
    cpu = 0.0
    ram = 0
    for proc in procs:
        try:
            times = proc.cpu_times()
            cpu += times.user + times.system
            ram += proc.memory_info().rss
        except psutil.Error:
            continue
    return Sample(cpu_ns=int(cpu * 1e9), ram_bytes=ram)
