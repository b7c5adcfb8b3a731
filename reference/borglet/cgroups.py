"""Per-task cgroup v1 groups under the borglet's own group: limits, usage, OOM counts, cleanup.

A task of a job in an alloc gets its group beneath the alloc's group, which holds the alloc's
limits (Borg: an alloc is a container the tasks in it share); the alloc's group is made with
its first task and removed with its last.

A task is in its groups from its first instruction: the spawn helper (borglet/spawner.py)
writes its own pid into each group's `cgroup.procs` before it execs the task. Where the helper
cannot be built, the thread that spawns the task moves itself into them (`spawning_in`), forks,
and moves back, so the child is born there (cgroup v1 moves single threads through a group's
`tasks` file; the borglet's memory stays charged to its own group, which its process leader is in).
"""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

# memory: the limit and OOM kills; cpu: the CFS quota; cpuacct: CPU usage; pids: the member list.
CONTROLLERS = ("memory", "cpu", "cpuacct", "pids")
CFS_PERIOD_US = 100_000
#: A new cpu group's period in cgroup v1. Each write of a period or a quota takes the kernel
#: about 2 ms (it retunes the bandwidth on every CPU), so the period is written only if ours differs.
KERNEL_CFS_PERIOD_US = 100_000
MIN_CFS_QUOTA_US = 1_000  # the kernel refuses quotas below 1 ms
#: The processes and threads a task may have when its job names no figure: as a container's (containers.py).
DEFAULT_PIDS_MAX = 1024


def parse_proc_cgroup(text: str) -> dict[str, str]:
    """/proc/<pid>/cgroup of v1 hierarchies -> {controller: path inside its hierarchy}."""
    groups: dict[str, str] = {}
    for line in text.splitlines():
        parts = line.strip().split(":", 2)
        if len(parts) != 3 or not parts[1]:
            continue  # the v2 line "0::/" has no controllers
        for controller in parts[1].split(","):
            groups[controller] = parts[2]
    return groups


def cfs_quota_us(cpu_milli: int, period_us: int = CFS_PERIOD_US) -> int:
    """CFS quota for a milli-CPU request; -1 (unlimited) for a request of 0."""
    if cpu_milli <= 0:
        return -1
    return max(MIN_CFS_QUOTA_US, cpu_milli * period_us // 1000)


def parse_oom_kills(oom_control: str) -> int | None:
    """The 'oom_kill N' counter of memory.oom_control, or None on kernels without it."""
    for line in oom_control.splitlines():
        key, _, value = line.partition(" ")
        if key == "oom_kill":
            return int(value)
    return None


ALLOC_PREFIX = "alloc-"


@dataclass(frozen=True)
class AllocGroup:
    """An alloc a task runs in: its name ("user/set/index") and its limits."""

    name: str
    cpu_milli: int
    ram_bytes: int

    @property
    def directory(self) -> str:
        """The group's directory name: alloc alice/logs/0 is "alloc-alice.logs.0" (names hold no dots)."""
        return ALLOC_PREFIX + self.name.replace("/", ".")


class CgroupTree:
    """The borglet's subtree `<own group>/minborg-<machine>` in each v1 hierarchy it uses."""

    def __init__(self, machine: str, root: str = "/sys/fs/cgroup", self_cgroup: str | None = None):
        own = parse_proc_cgroup(self_cgroup or Path("/proc/self/cgroup").read_text())
        self.bases: dict[str, Path] = {}
        for controller in CONTROLLERS:
            mount = Path(root) / controller
            if controller in own and mount.is_dir():
                # Where cpu and cpuacct share a hierarchy both names reach the same directory;
                # creating it twice is harmless (exist_ok) and removing it twice is ignored.
                self.bases[controller] = mount / own[controller].lstrip("/") / f"minborg-{machine}"
        # Held while an alloc's group is made or removed, so a task's group is never made in
        # an alloc group that its last task's release is removing.
        self._allocs = threading.Lock()

    def usable(self) -> str | None:
        """None when every needed hierarchy is writable, else why not."""
        for needed in ("memory", "cpu", "cpuacct"):
            if needed not in self.bases:
                return f"cgroup v1 hierarchy {needed!r} is not mounted"
        probe = f"probe-{os.getpid()}"
        try:
            group = self.create(probe, cpu_milli=100, ram_bytes=64 * 1024 * 1024)
        except OSError as err:
            return f"cannot create cgroups: {err}"
        remove_group(group)
        return None

    def create(
        self, name: str, cpu_milli: int, ram_bytes: int, alloc: AllocGroup | None = None,
        pids_max: int = DEFAULT_PIDS_MAX,
    ) -> dict[str, str]:  # fmt: skip
        """Create the task's groups and set its limits; returns {controller: absolute path}.
        With `alloc`, beneath the alloc's group (made, with the alloc's limits, if absent)."""
        if alloc is None:
            return _make(self.bases, name, cpu_milli, ram_bytes, pids_max)
        with self._allocs:
            parents = _make(self.bases, alloc.directory, alloc.cpu_milli, alloc.ram_bytes)
            return _make({c: Path(p) for c, p in parents.items()}, name, cpu_milli, ram_bytes, pids_max)

    def create_alloc(self, alloc: AllocGroup) -> dict[str, str]:
        """The alloc's own group with its limits (made if absent), for a container the engine
        makes beneath it; returns {controller: absolute path}."""
        with self._allocs:
            return _make(self.bases, alloc.directory, alloc.cpu_milli, alloc.ram_bytes)

    def remove_idle_allocs(self, busy: set[str]) -> None:
        """Remove the empty alloc groups whose directory is not in `busy` (allocs a live task
        of this borglet names): a container's group goes with the container, so the alloc's
        is left empty when its last container is removed."""
        with self._allocs:
            for base in self.bases.values():
                for group in base.glob(ALLOC_PREFIX + "*"):
                    if group.name not in busy:
                        try:
                            group.rmdir()
                        except OSError:
                            pass  # a task's group or a container is still in it

    def remove_empty_alloc(self, group: dict[str, str]) -> None:
        """Remove the alloc group a released task's group was in, if no other task's is left there."""
        with self._allocs:
            for path in dict.fromkeys(group.values()):
                parent = Path(path).parent
                if parent.name.startswith(ALLOC_PREFIX):
                    try:
                        parent.rmdir()
                    except OSError:
                        pass  # another task's group is still there (or it went already)

    def remove_bases(self) -> None:
        """Remove the borglet's own subtree where empty (at exit); busy ones stay."""
        for base in self.bases.values():
            for empty in base.glob(ALLOC_PREFIX + "*"):
                try:
                    empty.rmdir()
                except OSError:
                    pass
            try:
                base.rmdir()
            except OSError:
                pass


def _make(
    bases: dict[str, Path], name: str, cpu_milli: int, ram_bytes: int, pids_max: int | None = None
) -> dict[str, str]:
    """The group `name` under each base, with a memory limit, a CFS quota and (a task's, not
    an alloc's) a pids limit."""
    group: dict[str, str] = {}
    for controller, base in bases.items():
        path = base / name
        path.mkdir(parents=True, exist_ok=True)
        group[controller] = str(path)
    if ram_bytes > 0:
        _write(group["memory"], "memory.limit_in_bytes", str(ram_bytes))
    if CFS_PERIOD_US != KERNEL_CFS_PERIOD_US:
        _write(group["cpu"], "cpu.cfs_period_us", str(CFS_PERIOD_US))
    _write(group["cpu"], "cpu.cfs_quota_us", str(cfs_quota_us(cpu_milli)))
    if pids_max is not None and "pids" in group:
        _write(group["pids"], "pids.max", str(pids_max))
    return group


def _write(directory: str, name: str, value: str) -> None:
    fd = os.open(os.path.join(directory, name), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        os.write(fd, value.encode())
    finally:
        os.close(fd)


def _read(directory: str, name: str) -> str | None:
    # os.open/os.read, not open(): a borglet reads two counters per task every few seconds, and
    # the buffered text layers of open() were most of the cost of an idle borglet's pass.
    try:
        fd = os.open(os.path.join(directory, name), os.O_RDONLY)
    except OSError:
        return None
    try:
        chunks = []
        while chunk := os.read(fd, 65536):
            chunks.append(chunk)
        return b"".join(chunks).decode("ascii", "replace")
    except OSError:
        return None
    finally:
        os.close(fd)


def join(group: dict[str, str], pid: int) -> None:
    """Move a process into the task's group in every hierarchy (a process that exited already
    is left alone: the borglet sees its exit on the next pass)."""
    for path in dict.fromkeys(group.values()):
        try:
            _write(path, "cgroup.procs", str(pid))
        except ProcessLookupError:
            return


def thread_groups(root: str = "/sys/fs/cgroup") -> dict[str, str]:
    """{controller: directory} of the calling thread's v1 groups."""
    own = parse_proc_cgroup(Path("/proc/thread-self/cgroup").read_text())
    return {c: os.path.join(root, c, path.lstrip("/")) for c, path in own.items()}


@contextmanager
def spawning_in(group: dict[str, str], pids_max: int | None = None) -> Iterator[None]:
    """Run the block with the calling thread in the task's groups, so a process it forks there
    starts in them, under their limits, before its first instruction; then put the thread
    back where it was (the fork path of processes.spawn, where the spawn helper is missing). Spawns in one thread are one at a time by nature; two threads may each
    spawn into their own task's groups at once.

    The thread counts in the pids group while it is there: the limit is raised by one for it
    and set back to `pids_max` once it left."""
    if not group:
        yield
        return
    tid = str(threading.get_native_id())
    home = thread_groups()
    paths = list(dict.fromkeys(group.values()))
    pids = group.get("pids")
    if pids and pids_max is not None:
        _write(pids, "pids.max", str(pids_max + 1))
    joined: list[str] = []
    try:
        for path in paths:
            _write(path, "tasks", tid)
            joined.append(path)
        yield
    finally:
        for controller in dict.fromkeys(c for c, p in group.items() if p in joined):
            _write(home[controller], "tasks", tid)
        if pids and pids_max is not None:
            _write(pids, "pids.max", str(pids_max))


def members(group: dict[str, str]) -> list[int]:
    """Pids in the task's group (the memory hierarchy holds every process of the task)."""
    directory = group.get("memory") or next(iter(group.values()), None)
    text = _read(directory, "cgroup.procs") if directory else None
    return [int(line) for line in (text or "").split()]


def cpu_ns(group: dict[str, str]) -> int | None:
    text = _read(group.get("cpuacct", ""), "cpuacct.usage")
    return int(text) if text and text.strip() else None


def ram_bytes(group: dict[str, str]) -> int | None:
    text = _read(group.get("memory", ""), "memory.usage_in_bytes")
    return int(text) if text and text.strip() else None


def oom_kills(group: dict[str, str]) -> int:
    """OOM kills in the group so far; falls back to the limit-hit count on older kernels."""
    text = _read(group.get("memory", ""), "memory.oom_control") or ""
    kills = parse_oom_kills(text)
    if kills is not None:
        return kills
    failcnt = _read(group.get("memory", ""), "memory.failcnt")
    return int(failcnt) if failcnt and failcnt.strip() else 0


def remove_group(group: dict[str, str]) -> bool:
    """Kill what is left in the group and remove its directories; False if some remain."""
    for pid in members(group):
        if pid <= 1:  # not one of the task's (0 is this process's own group)
            continue
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    removed = True
    for path in dict.fromkeys(group.values()):
        try:
            os.rmdir(path)
        except FileNotFoundError:
            pass
        except OSError:
            removed = False
    return removed
