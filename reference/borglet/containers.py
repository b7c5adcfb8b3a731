"""The Docker runtime of the borglet: a task of a job that names an image runs as a container of it.

The pure part builds what Docker is asked for (`container_kwargs`, `labels`, `task_env`,
`cgroup_dirs`); `Containers` is the shell that talks to the engine through the Docker SDK,
imported only when a borglet runs with `--runtime docker`, so the process runtime needs no
Docker at all.

A container runs with the host's network (the task answers on the port the borglet gave it,
as a process does), under the borglet's cgroup (`cgroup_parent`, so the machine's accounting
holds), as the job user's unprivileged uid (borglet/taskusers.py), on a read-only root with a
tmpfs /tmp, with no-new-privileges, no capabilities and a pids limit. Its stdout and stderr go
to the task's log files on the borglet (borglet/logs.py), bind-mounted into it, so tail,
follow and rotation work as for a process and outlive a borglet restart.

The labels name the cell, machine, job, index and incarnation, the task id, and the borglet's
state dir: a restarted borglet finds its containers by them (several cells on one host may
share a cell and machine name, never a state dir).
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from reference import proctime
from reference.borglet import cgroups, logs
from reference.borglet.isolation import Sample, tree_sample
from reference.borglet.protocol import TaskSpec

log = logging.getLogger(__name__)

LABEL = "minborg"  # every label's prefix: minborg.cell, minborg.machine, ...
LOG_MOUNT = "/minborg/logs"  # where the task's log directory appears inside its container
PIDS_LIMIT = 1024  # processes and threads per container whose job names no pids_max
TMPFS_BYTES = 64 * 1024 * 1024
IMAGES_EVERY_S = 5.0  # how stale the list of the engine's images in a report may be
# The task's streams are redirected by the container's shell, not collected by the engine's
# log driver: the files are the borglet's own and outlive the borglet and the container.
REDIRECT = f'exec "$@" >>{LOG_MOUNT}/stdout 2>>{LOG_MOUNT}/stderr'


def labels(cell: str, machine: str, state_dir: str, spec: TaskSpec) -> dict[str, str]:
    """The labels of a task's container: what a restarted borglet re-adopts it by."""
    return {
        f"{LABEL}.cell": cell,
        f"{LABEL}.machine": machine,
        f"{LABEL}.borglet": state_dir,
        f"{LABEL}.job": spec.job,
        f"{LABEL}.index": str(spec.index),
        f"{LABEL}.incarnation": str(spec.incarnation),
        f"{LABEL}.task": spec.task_id,
    }


def task_env(
    spec: TaskSpec, port: int, machine: str, markers: Mapping[str, str], host: str = "127.0.0.1"
) -> dict[str, str]:
    """A container's environment: what the process runtime gives a task (the address and port
    to listen on, its index, id, BNS name, machine; then the job's own), and none of the
    borglet's, which belongs to the host."""
    env = {
        "HOST": host,
        "PORT": str(port),
        "TASK_INDEX": str(spec.index),
        "TASK_ID": spec.task_id,
        "BNS_NAME": spec.bns,
        "MINBORG_MACHINE": machine,
        "HOME": "/tmp",  # the root file system is read-only: /tmp is the task's to write
    }
    env.update(spec.env)
    env.update(markers)
    return env


def container_kwargs(
    spec: TaskSpec, env: Mapping[str, str], uid: int, task_labels: Mapping[str, str], log_dir: str,
    cgroup_parent: str, *, pids_limit: int = PIDS_LIMIT, read_only: bool = True,
) -> dict[str, Any]:  # fmt: skip
    """The Docker SDK's `containers.create` arguments for a task: its image and command, its
    environment, the task's CPU (nano_cpus) and RAM (mem_limit, no swap beyond it) request as
    limits, host networking, `cgroup_parent` (its alloc's group, or the borglet's), and
    the security settings of the module's docstring."""
    kwargs: dict[str, Any] = {
        "image": spec.image,
        "entrypoint": ["/bin/sh", "-c", REDIRECT, "task"],
        "command": list(spec.command),
        "environment": dict(env),
        "user": f"{uid}:{uid}",
        "labels": dict(task_labels),
        "network_mode": "host",
        "cgroup_parent": cgroup_parent,
        "init": True,  # a pid 1 that forwards SIGTERM and reaps the task's children
        "read_only": read_only,
        "tmpfs": {"/tmp": f"rw,nosuid,nodev,size={TMPFS_BYTES}"},
        "security_opt": ["no-new-privileges"],
        "cap_drop": ["ALL"],
        "pids_limit": pids_limit,
        "volumes": {log_dir: {"bind": LOG_MOUNT, "mode": "rw"}},
        "log_config": {"Type": "none", "Config": {}},
        "detach": True,
    }
    if spec.cwd:
        kwargs["working_dir"] = spec.cwd
    if spec.request.cpu > 0:
        kwargs["nano_cpus"] = spec.request.cpu * 1_000_000  # milli-CPU -> billionths of a CPU
    if spec.request.ram > 0:
        kwargs["mem_limit"] = spec.request.ram
        kwargs["memswap_limit"] = spec.request.ram  # no swap: over its request a task is OOM-killed
    return kwargs


def default_cgroup_parent(machine: str, self_cgroup: str) -> str:
    """The borglet's own memory group + `minborg-<machine>` (CgroupTree's base), as Docker's
    cgroupfs driver takes a parent: a path inside each hierarchy."""
    own = cgroups.parse_proc_cgroup(self_cgroup).get("memory", "/")
    return f"{own.rstrip('/')}/minborg-{machine}"


def alloc_cgroup_parent(parent: str, alloc_directory: str) -> str:
    """A container's `cgroup_parent` in an alloc: the alloc's group beneath the borglet's, the
    group a process task in that alloc goes beneath too (cgroups.CgroupTree), so the alloc's
    limits hold for both."""
    return f"{parent.rstrip('/')}/{alloc_directory}"


def cgroup_dirs(parent: str, container_id: str, root: str = "/sys/fs/cgroup") -> dict[str, str]:
    """The container's memory and cpuacct groups under the cgroupfs driver's layout."""
    inside = f"{parent.strip('/')}/{container_id}".lstrip("/")
    return {c: os.path.join(root, c, inside) for c in ("memory", "cpuacct")}


@dataclass(frozen=True)
class Started:
    """A container just started, or found running: its id, its init's host pid and that
    process's start time (the task's identity, as for a process). The pid is 0 and the start
    time None when the container ended before the engine was asked: the borglet then finds it
    exited at its next look and asks the engine how it ended."""

    container_id: str
    pid: int
    start_ticks: int | None


@dataclass(frozen=True)
class Found:
    """A running container of this borglet, as its labels and state name it."""

    task_id: str
    container: Started


class Containers:
    """The Docker engine, as the borglet uses it."""

    def __init__(
        self, cell: str, machine: str, state_dir: str, cgroup_parent: str, client: Any = None,
        clock: Callable[[], float] = time.monotonic, image_store: str = "",
    ) -> None:  # fmt: skip
        if client is None:
            import docker  # only a docker-runtime borglet needs the SDK

            client = docker.from_env(timeout=60)
        self.client = client
        self.cell, self.machine, self.state_dir = cell, machine, state_dir
        self.cgroup_parent = cgroup_parent
        self.clock = clock
        self.image_store = image_store
        self._fetch_lock = threading.Lock()
        self._images: list[str] = []
        self._images_at = -IMAGES_EVERY_S
        self._images_lock = threading.Lock()

    def labels(self, spec: TaskSpec) -> dict[str, str]:
        return labels(self.cell, self.machine, self.state_dir, spec)

    def run(
        self, spec: TaskSpec, env: Mapping[str, str], uid: int, log_dir: str, cgroup_parent: str | None = None
    ) -> Started:
        """Create and start the task's container; `cgroup_parent` None: under the borglet's
        group. Raises OSError (a missing image, a refusal by the engine) with Docker's reason."""
        import docker.errors

        prepare_log_dir(log_dir, uid)
        kwargs = container_kwargs(
            spec, env, uid, self.labels(spec), log_dir, cgroup_parent or self.cgroup_parent, pids_limit=spec.pids_max
        )
        kwargs.pop("detach")
        try:
            container = self.client.containers.create(**kwargs)
            container.start()
            container.reload()
        except docker.errors.ImageNotFound as err:
            if not self.fetch(spec.image):
                raise OSError(f"image {spec.image!r} is not on this machine's engine: {err.explanation}") from err
            return self.run(spec, env, uid, log_dir, cgroup_parent)
        except docker.errors.APIError as err:
            raise OSError(f"docker: {err.explanation or err}") from err
        except docker.errors.DockerException as err:
            raise OSError(f"docker: {err}") from err
        return _started(container.id, container.attrs)

    def fetch(self, image: str) -> bool:
        """Load a missing image from the image store (`docker save` archives, one per image:
        `store_path`), as a Borg machine fetches a package; False when the store has none."""
        if not self.image_store:
            return False
        path = store_path(self.image_store, image)
        with self._fetch_lock:  # the first start that misses it loads it; the others wait
            if any(image in (tag, tag.removesuffix(":latest")) for tag in image_tags(self.client.api.images())):
                return True
            try:
                with open(path, "rb") as archive:
                    log.info("loading image %s from %s", image, path)
                    self.client.images.load(archive)
            except FileNotFoundError:
                return False
            self._images_at = -IMAGES_EVERY_S  # the next report lists it
        return True

    def exit_status(self, container_id: str) -> tuple[int | None, bool]:
        """The exit code of an ended container and whether the kernel OOM-killed it."""
        import docker.errors

        try:
            state = self.client.api.inspect_container(container_id)["State"]
        except (docker.errors.DockerException, OSError) as err:  # OSError: the engine's socket
            log.warning("cannot inspect container %s: %s", container_id[:12], err)
            return None, False
        code = state.get("ExitCode")
        return (int(code) if code is not None else None), bool(state.get("OOMKilled"))

    def owned(self) -> list[Found]:
        """This borglet's running containers (by its state-dir label)."""
        found = []
        for info in self.client.api.containers(filters={"label": f"{LABEL}.borglet={self.state_dir}"}):
            try:
                attrs = self.client.api.inspect_container(info["Id"])
            except Exception as err:  # gone between the list and the inspection
                log.info("container %s: %s", info["Id"][:12], err)
                continue
            if attrs["State"].get("Running"):
                task_id = attrs["Config"]["Labels"].get(f"{LABEL}.task", "")
                found.append(Found(task_id, _started(info["Id"], attrs)))
        return found

    def labelled(self) -> dict[str, str]:
        """Every container of this borglet, running or not: its id -> the task its label names."""
        filters = {"label": f"{LABEL}.borglet={self.state_dir}"}
        return {
            c["Id"]: (c.get("Labels") or {}).get(f"{LABEL}.task", "")
            for c in self.client.api.containers(all=True, filters=filters)
        }

    def all_ids(self) -> list[str]:
        """Every container of this borglet, running or not."""
        return list(self.labelled())

    def remove(self, container_id: str) -> bool:
        """Remove a container, killing it if it still runs; False to retry later."""
        import docker.errors

        try:
            self.client.api.remove_container(container_id, force=True)
        except docker.errors.NotFound:
            return True
        except (docker.errors.DockerException, OSError) as err:
            log.warning("cannot remove container %s: %s", container_id[:12], err)
            return False
        return True

    def parent_for(self, alloc_directory: str | None) -> str:
        """The `cgroup_parent` of a container: its alloc's group (by directory name), else the borglet's."""
        return self.cgroup_parent if alloc_directory is None else alloc_cgroup_parent(self.cgroup_parent, alloc_directory)

    def sample(self, container_id: str, pid: int | None, cgroup_parent: str | None = None) -> Sample:
        """CPU and RAM from the container's own groups (the process tree's when unreadable);
        `cgroup_parent` None: the container is under the borglet's group."""
        dirs = cgroup_dirs(cgroup_parent or self.cgroup_parent, container_id)
        cpu, ram = cgroups.cpu_ns(dirs), cgroups.ram_bytes(dirs)
        if cpu is None or ram is None:
            return tree_sample(pid)
        return Sample(cpu_ns=cpu, ram_bytes=ram)

    def images(self) -> list[str]:
        """The tags of the images the engine holds, as last listed (`refresh_images`)."""
        return list(self._images)

    def refresh_images(self) -> None:
        """List the engine's images again when the last list is IMAGES_EVERY_S old."""
        with self._images_lock:
            if self.clock() - self._images_at < IMAGES_EVERY_S:
                return
            self._images_at = self.clock()
            try:
                self._images = image_tags(self.client.api.images())
            except Exception as err:  # an engine that does not answer holds nothing usable
                log.warning("cannot list images: %s", err)
                self._images = []


def image_tags(images: list[dict[str, Any]]) -> list[str]:
    """The tags of the engine's images, sorted, each name also without ':latest' (a job may
    name `minborg/hello_world` or `minborg/hello_world:latest`)."""
    tags: set[str] = set()
    for image in images:
        for tag in image.get("RepoTags") or ():
            if tag == "<none>:<none>":
                continue
            tags.add(tag)
            if tag.endswith(":latest"):
                tags.add(tag.removesuffix(":latest"))
    return sorted(tags)


def _started(container_id: str, attrs: Mapping[str, Any]) -> Started:
    pid = int(attrs["State"].get("Pid") or 0)
    return Started(container_id, pid, proctime.start_ticks(pid) if pid else None)


def store_path(store: str, image: str) -> str:
    """Where an image's archive lives in an image store: 'minborg/hello_world' ->
    STORE/minborg_hello_world.tar (a tag other than latest is part of the name)."""
    name = image.removesuffix(":latest").replace("/", "_").replace(":", "_")
    return os.path.join(store, f"{name}.tar")


def prepare_log_dir(log_dir: str, uid: int) -> None:
    """The task's log directory and files, writable by the uid its container runs as."""
    out, err = logs.open_streams(log_dir)
    os.close(out)
    os.close(err)
    for path in (log_dir, *(os.path.join(log_dir, s) for s in logs.STREAMS)):
        os.chown(path, uid, uid)
    Path(log_dir).chmod(0o755)
