"""What an ended task leaves on its machine (its cgroups, its working directory, its container),
removed by the supervisor loop outside the borglet's lock: removing thousands after a job's
kill, under the lock, kept syncs waiting past their timeout."""

from __future__ import annotations

from collections import deque
from collections.abc import Callable

from reference.borglet import processes
from reference.borglet.launch import Launcher
from reference.borglet.task import Task


class Releases:
    """The removals still to make, in the order the tasks ended."""

    def __init__(self, launcher: Launcher) -> None:
        self.launcher = launcher
        self.groups: deque[dict[str, str]] = deque()
        self.workdirs: deque[str] = deque()
        self.containers: deque[str] = deque()  # ids of containers of ended runs

    def __bool__(self) -> bool:
        return bool(self.groups or self.workdirs or self.containers)

    def add(self, task: Task) -> None:
        """Take over what the ended task holds; under the borglet's lock."""
        if task.group:
            self.groups.append(task.group)
            task.group = {}
        if task.container:  # a run the borglet did not see end (lost while it was down)
            self.containers.append(task.container)
            task.container = ""
        if self.launcher.config.task_uids:
            self.workdirs.append(self.launcher.workdir(task))

    def release(self, limit: int | None, busy_allocs: Callable[[], set[str]]) -> int:
        """Remove up to `limit` of each kind (killing what is left in a group); one that
        cannot go yet is retried on a later call. Once a container went, the groups of
        allocs no live task names (`busy_allocs`) go too. Returns how many went."""
        isolation = self.launcher.isolation
        done = 0
        for _ in range(len(self.groups) if limit is None else min(limit, len(self.groups))):
            try:
                group = self.groups.popleft()
            except IndexError:
                break
            if isolation.release(group):
                done += 1
            else:
                self.groups.append(group)
        for _ in range(len(self.workdirs) if limit is None else min(limit, len(self.workdirs))):
            processes.remove_workdir(self.workdirs.popleft())
        removed = False
        for _ in range(len(self.containers) if limit is None else min(limit, len(self.containers))):
            try:
                cid = self.containers.popleft()
            except IndexError:
                break
            if self.launcher.engine().remove(cid):
                done += 1
                removed = True
            else:
                self.containers.append(cid)
        if removed and isolation.alloc_groups:
            # The engine removed the container's group; its alloc's goes when no live task here
            # names the alloc (checked under the lock, so a task starting in it keeps it).
            isolation.release_idle_allocs(busy_allocs())
        return done
