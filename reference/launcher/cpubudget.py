"""A CPU budget for one process of a local cell (a master replica; any process): its own cgroup v1 `cpu` group with a CFS quota, and the CPU the group used.

With a budget, replicas measured on one small machine compare as if each had a host of its
own: 1, 3 or 5 replicas of 0.5 cores each, whatever else runs beside them. A process's group
is `minborg/<cell>-<id>/<name>` under the launcher's own group in the `cpu` hierarchy (the
quota) and the `cpuacct` one (the usage, where it is a hierarchy of its own); `<id>` tells
apart cells of one name in different state dirs.
"""

from __future__ import annotations

import hashlib
import math
import os
import time
from pathlib import Path

from reference.borglet.cgroups import CFS_PERIOD_US, MIN_CFS_QUOTA_US, parse_proc_cgroup

CGROUP_ROOT = Path("/sys/fs/cgroup")
CONTROLLERS = ("cpu", "cpuacct")
PARENT = "minborg"


def cell_group(cell: str, state_dir: str) -> str:
    """The parent group of one cell's processes: `minborg/<cell>-<8 hex of its state dir>`."""
    digest = hashlib.sha256(os.path.abspath(state_dir).encode()).hexdigest()[:8]
    return f"{PARENT}/{cell}-{digest}"


def process_group(cell: str, state_dir: str, name: str) -> str:
    """The group of the cell's process `name`, e.g. `minborg/local-1a2b3c4d/master0`."""
    return f"{cell_group(cell, state_dir)}/{name}"


def quota_us(cores: float, period_us: int = CFS_PERIOD_US) -> int:
    """The CFS quota that holds a group to `cores` of CPU: cores * period, at least the
    kernel's 1 ms. 0.5 cores of a 100,000 us period: 50,000 us."""
    return max(MIN_CFS_QUOTA_US, round(cores * period_us))


MACHINES = "machines"  # the group of a cell's real borglets and their tasks, under its cell group
# The machines' weight, together, against each other process of the host (the kernel gives
# every process 1024), when `cell up --machine-cpu-shares` asks for the group. Without it a
# one-host cell's 100 borglets outweigh its leader 100 to 1; with it the leader's reads stay
# fast and the tasks start more slowly (docs/decisions.md, "The machines' CPU group").
DEFAULT_MACHINE_SHARES = 0  # no group unless asked for


def machines_group(cell: str, state_dir: str) -> str:
    """The group the cell's real borglets join: `minborg/<cell>-<id>/machines`."""
    return f"{cell_group(cell, state_dir)}/{MACHINES}"


MAX_SHARES = 262_144  # the kernel's largest cpu.shares


def shares_problem(shares: int) -> str | None:
    """Why `shares` is no CPU weight (None when it is one)."""
    if not 2 <= shares <= MAX_SHARES:
        return f"must be a CPU weight from 2 to {MAX_SHARES} (1024 is one process's), not {shares}"
    return None


def share_cpu(group: str, shares: int, root: Path = CGROUP_ROOT) -> list[Path]:
    """Make `group` (in the cpu and cpuacct hierarchies) with a CPU weight of `shares` and
    return its directories, for processes to join (`borglet --join-cgroup`). OSError if the
    kernel refuses."""
    problem = shares_problem(shares)
    if problem:
        raise ValueError(problem)
    dirs = group_dirs(group, root)
    for path in dirs.values():
        path.mkdir(parents=True, exist_ok=True)
    (dirs["cpu"] / "cpu.shares").write_text(str(shares))
    return list(dict.fromkeys(dirs.values()))


def budget_problem(cores: float) -> str | None:
    """Why `cores` is no CPU budget (None when it is one)."""
    if not math.isfinite(cores) or cores <= 0:
        return f"must be a number of cores above 0, such as 0.5, not {cores}"
    if quota_us(cores) != round(cores * CFS_PERIOD_US):
        return f"must be at least {MIN_CFS_QUOTA_US / CFS_PERIOD_US} cores (the kernel's 1 ms quota), not {cores}"
    return None


def group_dirs(
    group: str, root: Path = CGROUP_ROOT, self_cgroup: str | None = None
) -> dict[str, Path]:
    """The directories of `group` in each controller's hierarchy, under this process's own
    group (as the borglet places its own groups)."""
    own = parse_proc_cgroup(
        self_cgroup if self_cgroup is not None else Path("/proc/self/cgroup").read_text()
    )
    return {c: root / c / own.get(c, "/").lstrip("/") / group for c in CONTROLLERS}


def unusable(root: Path = CGROUP_ROOT) -> str | None:
    """None when CPU groups can be made here, else why not."""
    if os.geteuid() != 0:
        return "needs root, to make cgroups"
    for controller in CONTROLLERS:
        base = group_dirs("", root)[controller]
        if not (base / "cgroup.procs").is_file():
            return f"the cgroup v1 {controller!r} controller is not mounted at {root / controller}"
        if not os.access(base, os.W_OK):
            return f"{base} is not writable"
    return None


def limit_cpu(pid: int, group: str, cores: float, root: Path = CGROUP_ROOT) -> dict[str, Path]:
    """Put process `pid` (all its threads; its later children follow) in `group`, held to
    `cores` of CPU; returns the group's directories. OSError if the kernel refuses."""
    dirs = group_dirs(group, root)
    for path in dirs.values():
        path.mkdir(parents=True, exist_ok=True)
    cpu = dirs["cpu"]
    period = int((cpu / "cpu.cfs_period_us").read_text())
    (cpu / "cpu.cfs_quota_us").write_text(str(quota_us(cores, period)))
    for path in dirs.values():
        (path / "cgroup.procs").write_text(str(pid))
    return dirs


def cpu_used_s(group: str, root: Path = CGROUP_ROOT) -> float | None:
    """Seconds of CPU the group's processes used (cpuacct.usage); None without the group."""
    try:
        return int((group_dirs(group, root)["cpuacct"] / "cpuacct.usage").read_text()) / 1e9
    except (OSError, ValueError):
        return None


def quota_of(group: str, root: Path = CGROUP_ROOT) -> float | None:
    """The group's budget in cores as the kernel holds it; None without a group or a quota."""
    cpu = group_dirs(group, root)["cpu"]
    try:
        quota = int((cpu / "cpu.cfs_quota_us").read_text())
        period = int((cpu / "cpu.cfs_period_us").read_text())
    except (OSError, ValueError):
        return None
    return quota / period if quota > 0 else None


def remove_groups(parent: str, root: Path = CGROUP_ROOT) -> list[Path]:
    """Remove `parent` and the groups under it, deepest first; returns those that would not
    go (a process still in them)."""
    left = []
    for base in group_dirs(parent, root).values():
        if not base.is_dir():
            continue
        # Children before their parent: a cgroup directory goes only when it has none.
        for path in sorted((p for p in base.rglob("*") if p.is_dir()), key=lambda p: -len(p.parts)):
            left += _rmdir(path)
        left += _rmdir(base)
    return left


def _rmdir(path: Path, wait_s: float = 2.0) -> list[Path]:
    # A stopped master's lease keeper (reference/store/keeper.py) leaves the group a moment after
    # its parent: wait for the group to empty, bounded, before giving up on it.
    deadline = time.monotonic() + wait_s
    while _members(path) and time.monotonic() < deadline:
        time.sleep(0.02)
    try:
        path.rmdir()
        return []
    except FileNotFoundError:
        return []
    except OSError:
        return [path]


def _members(path: Path) -> list[str]:
    try:
        return (path / "cgroup.procs").read_text().split()
    except OSError:
        return []
