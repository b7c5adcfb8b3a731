"""What a borglet declares about its machine, and how it runs the machine's tasks."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class MachineConfig:
    """What the borglet declares about its machine."""

    name: str
    capacity: dict[str, int]
    state_dir: str
    attrs: dict[str, str] = field(default_factory=dict)
    failure_domain: str = ""
    kill_grace_s: float = 3.0
    tick_s: float = 0.2
    start_rate: float = 200.0  # task processes started per second, at most
    # Run each task as its job user's own unprivileged uid (taskusers.py; the borglet must be
    # root), in its own working directory under `work_dir`; False: as the borglet's user.
    task_uids: bool = False
    work_dir: str = ""  # default: the state dir's path + ".work"
    # Variables the borglet's operator chose to give every task (--task-env), beneath the
    # job's own: a task's environment is built from nothing, never from the borglet's.
    task_env: tuple[tuple[str, str], ...] = ()
    # The address this machine's tasks are reached at: the host the borglet serves on (a netns
    # host's own address; 127.0.0.1 on a loopback cell), given to each task as $HOST to listen
    # on, where BNS answers point and where its health check is probed.
    host: str = "127.0.0.1"

    @property
    def work_root(self) -> str:
        return self.work_dir or self.state_dir.rstrip("/") + ".work"
