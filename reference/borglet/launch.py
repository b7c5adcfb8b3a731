"""How the borglet makes a task's process or container (its environment, its working directory,
its cgroups, the spawn, and what a failed spawn is reported as), finds it again after a restart,
and samples what it uses."""

from __future__ import annotations

import os
import subprocess
from typing import Any

from reference import proctime
from reference.borglet import containers as runtime
from reference.borglet import logs, processes
from reference.borglet.cgroups import AllocGroup
from reference.borglet.config import MachineConfig
from reference.borglet.isolation import Isolation, Sample
from reference.borglet.protocol import TaskSpec
from reference.borglet.task import Task


def alloc_group(spec: TaskSpec) -> AllocGroup | None:
    """The alloc the task runs in, as its cgroups name it; None: in no alloc."""
    return None if spec.alloc is None else AllocGroup(spec.alloc.name, spec.alloc.cpu, spec.alloc.ram)


class Launcher:
    """Makes the processes (or, with the docker runtime, the containers) of one machine's tasks."""

    def __init__(
        self, config: MachineConfig, isolation: Isolation, containers: runtime.Containers | None
    ) -> None:
        self.config, self.isolation, self.containers = config, isolation, containers

    def in_container(self, task: Task) -> bool:
        """Whether the task runs as a container: its job names an image and this borglet
        runs the docker runtime (one without an image runs as a process: docs/decisions.md)."""
        return self.containers is not None and bool(task.spec.image)

    def engine(self) -> runtime.Containers:
        assert self.containers is not None, "a container task on a borglet without the docker runtime"
        return self.containers

    def env(self, task: Task) -> dict[str, str]:
        """The task's environment, built from nothing: a PATH of the system's programs, a HOME
        of its own, the operator's --task-env, then Minborg's variables, then the job's env;
        the markers last. Nothing of the borglet's own environment (nor of whoever started
        it) reaches a task."""
        spec = task.spec
        if self.in_container(task):
            markers = {processes.TASK_MARKER: spec.task_id, processes.BORGLET_MARKER: self.config.state_dir}
            return runtime.task_env(spec, task.port, self.config.name, markers, self.config.host)
        env = {"PATH": processes.TASK_PATH, "HOME": self.workdir(task) if self.config.task_uids else spec.cwd or "/"}
        env.update(self.config.task_env)
        env.update(
            HOST=self.config.host,  # where to listen: the address BNS answers and probes name
            PORT=str(task.port),
            TASK_INDEX=str(spec.index),
            TASK_ID=spec.task_id,
            BNS_NAME=spec.bns,
            MINBORG_MACHINE=self.config.name,
        )
        env.update(spec.env)
        # Set last, so a job's environment cannot hide its processes from a /proc scan.
        env[processes.TASK_MARKER] = spec.task_id
        env[processes.BORGLET_MARKER] = self.config.state_dir
        return env

    def workdir(self, task: Task) -> str:
        """The task's own working directory, when tasks run as their users' uids."""
        return os.path.join(self.config.work_root, task.key)

    def container_parent(self, task: Task) -> str:
        """The task's container's `cgroup_parent`: its alloc's group where allocs get groups here."""
        alloc = alloc_group(task.spec)
        directory = alloc.directory if alloc is not None and self.isolation.alloc_groups else None
        return self.engine().parent_for(directory)

    def prepare(self, task: Task) -> dict[str, str]:
        """The task's cgroups, made with its limits (none for a container: the engine makes its
        group, under its alloc's or the borglet's: containers.py)."""
        if self.in_container(task):
            return {}
        spec = task.spec
        return self.isolation.prepare(task.key, spec.request.cpu, spec.request.ram, alloc_group(spec), spec.pids_max)

    def spawn(
        self, task: Task, group: dict[str, str], env: dict[str, str], uid: int | None
    ) -> subprocess.Popen | runtime.Started:
        log_dir = logs.task_dir(self.config.state_dir, task.key)
        if self.in_container(task):
            assert uid is not None
            alloc = alloc_group(task.spec)
            if alloc is not None and self.isolation.alloc_groups:
                self.isolation.prepare_alloc(alloc)  # before the engine makes the container beneath it
            return self.engine().run(task.spec, env, uid, log_dir, self.container_parent(task))
        cwd = task.spec.cwd
        if uid is not None:
            # Its HOME, and its working directory unless its job names one: only its uid enters.
            home = processes.make_workdir(self.workdir(task), uid)
            cwd = cwd or home
        confinement = self.isolation.confinement(group, task.spec.pids_max, task.spec.request.ram)
        return processes.spawn(task.spec.command, env, cwd, log_dir, uid, confinement)

    def spawn_error(self, task: Task, err: Exception, env: dict[str, str], uid: int | None) -> str:
        """What a task's failed spawn is reported as: 'spawn: ...' saying what to change."""
        if self.in_container(task):
            return f"spawn: {err}"
        cwd = task.spec.cwd or (self.workdir(task) if uid is not None else None)
        return processes.spawn_error(err, task.spec.command, cwd, uid, env.get("PATH", ""))

    def find(self, task: Task, now: float, scans: dict[str, Any]) -> bool:
        """Look for the process of a task saved launching, just before its spawn (never to be
        spawned again): by its environment marker, or its container by its labels. Found, its
        pid, creation time and start time (and container) are filled in. `scans` keeps the
        machine's one scan of each kind across the tasks of a restart."""
        task.launching = False
        if self.in_container(task):
            if "labelled" not in scans:
                scans["labelled"] = {f.task_id: f.container for f in self.engine().owned()}
            hit = scans["labelled"].get(task.spec.task_id)
            if hit is None:
                return False
            task.pid, task.container, task.start_ticks = hit.pid, hit.container_id, hit.start_ticks
        else:
            if "marked" not in scans:
                scans["marked"] = processes.marked_processes(self.config.state_dir)
            pids = sorted(scans["marked"].get(task.spec.task_id, []))
            if not pids:
                return False
            task.pid = pids[0]
            task.start_ticks = proctime.start_ticks(pids[0])
        task.started_at = (processes.start_time(task.pid) if task.pid else None) or now
        return True

    def sample(self, task: Task) -> Sample:
        """What the task's process (or container) uses now."""
        assert task.pid is not None
        if task.container:
            return self.engine().sample(task.container, task.pid, self.container_parent(task))
        return self.isolation.sample(task.group, task.pid)
