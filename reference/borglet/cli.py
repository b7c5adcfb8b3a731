"""Command line of the borglet: `python -m reference.borglet` / `minborg borglet`."""

from __future__ import annotations

import argparse
import logging
import os
import signal
import stat
from hashlib import sha1
from pathlib import Path

from reference import channel
from reference.borglet import taskusers
from reference.borglet.config import MachineConfig
from reference.borglet.containers import Containers, default_cgroup_parent
from reference.borglet.hollow import DEFAULT_START_DELAY_S
from reference.borglet.isolation import choose
from reference.borglet.processes import sanitize
from reference.borglet.supervisor import Borglet
from reference.borglet.taskusers import private_ancestor  # noqa: F401 (tests import it from here)
from reference.resources import parse_capacity, parse_pairs

WORK_ROOT = "/var/lib/minborg/tasks"


def parse_listen(text: str) -> tuple[str, int]:
    """'127.0.0.1:7001' -> ('127.0.0.1', 7001)."""
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit():
        raise ValueError(f"invalid --listen {text!r}: expected HOST:PORT such as 127.0.0.1:7001")
    return host or "127.0.0.1", int(port)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="minborg borglet",
        description="Run the borglet of one machine, or (--hollow N) N simulated machines for scale tests.",
    )
    parser.add_argument(
        "--name", help="machine name, unique in the cell; with --hollow the prefix of the names (default hollow)"
    )
    parser.add_argument("--listen", default="127.0.0.1:0", help="HOST:PORT to serve on")
    parser.add_argument(
        "--capacity", required=True, help="e.g. cpu=4000m,ram=8GiB[,gpu=1,disk=10GiB,ports=100]"
    )
    parser.add_argument("--attrs", default="", help="machine attributes, e.g. rack=r1,arch=x86")
    parser.add_argument("--failure-domain", default="", help="e.g. the rack or power domain")
    parser.add_argument(
        "--state-dir",
        help="where tasks.json and task logs live, made private to the borglet's user (mode 0700); "
        "required, except with --hollow",
    )
    parser.add_argument(
        "--run-tasks-as",
        choices=("auto", "job-user", "borglet"),
        default="auto",
        help="job-user: each task as its job user's own unprivileged uid (the borglet must be root); "
        "borglet: as the borglet's own user, which tasks can then signal (on a root borglet: every "
        "task as root, an admin's explicit choice, docs/security.md); auto (default): job-user when "
        "the borglet is root, else borglet (a borglet that is not root cannot change ids)",
    )
    parser.add_argument(
        "--task-env",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="a variable every task gets, beneath its job's own (repeatable): a task's environment "
        "is built from nothing, never from the borglet's; `cell up` gives PYTHONPATH here so the "
        "examples' `python3 -m examples...` import from where it ran",
    )
    parser.add_argument(
        "--work-dir",
        default=None,
        help="run as root: where each task gets its own working directory, owned by the uid it "
        f"runs as; every directory above it must let other users pass (default: {WORK_ROOT}/NAME-HASH "
        "of the state dir)",
    )
    parser.add_argument("--isolation", choices=("auto", "cgroup", "rlimit"), default="auto")
    parser.add_argument(
        "--runtime",
        choices=("process", "docker"),
        default="process",
        help="docker: a task whose job names an image runs as a container of it, on this host's "
        "Docker engine (borglet/containers.py); a task without one runs as a process either way",
    )
    parser.add_argument(
        "--image-store",
        default="",
        help="with --runtime docker: a directory of `docker save` archives (NAME.tar, '/' as '_') "
        "an image missing from the engine is loaded from, as a machine fetches a package",
    )
    parser.add_argument(
        "--cell", default="", help="the cell's name, which labels this borglet's containers (--runtime docker)"
    )
    parser.add_argument(
        "--kill-tasks-on-exit",
        action="store_true",
        help="kill every task when the borglet exits (tests, cell teardown); default: leave them",
    )
    parser.add_argument(
        "--kill-grace", type=float, default=3.0, help="seconds from SIGTERM to SIGKILL"
    )
    parser.add_argument(
        "--start-rate",
        type=float,
        default=200.0,
        help="task processes started per second at most; the rest wait in the queue (default 200)",
    )
    parser.add_argument(
        "--hollow",
        type=int,
        default=0,
        metavar="N",
        help="scale tests only: serve N hollow machines (simulated tasks, no processes) at "
        "http://HOST:PORT/m/<name>, named <--name>0000, <--name>0001, ...",
    )
    parser.add_argument(
        "--hollow-start-delay",
        type=float,
        default=DEFAULT_START_DELAY_S,
        help=f"with --hollow: seconds from a task's sync to its RUNNING (default {DEFAULT_START_DELAY_S})",
    )
    parser.add_argument(
        "--channel-key-file",
        default=None,
        help="the cell's channel key (mode 0600, made by `cell up`): only requests signed with it "
        "by the cell's masters are obeyed; /healthz and /metrics stay open. With --hollow, each "
        "hollow machine checks it likewise; without it they obey anyone",
    )
    parser.add_argument(
        "--insecure-channel",
        action="store_true",
        help="run without a channel key, obeying anyone who reaches the port, who can then run any "
        "command on this machine: for experiments run by hand on a private machine only",
    )
    channel.add_tls_arguments(parser, calls=False)
    parser.add_argument(
        "--join-cgroup",
        action="append",
        default=[],
        metavar="DIR",
        help="a cgroup directory to join before anything starts (repeatable): `cell up` puts its "
        "borglets, and with them their tasks' groups, in one CPU group of the cell's machines",
    )
    parser.add_argument("--log-level", default="info")
    return parser


def join_cgroups(dirs: list[str]) -> None:
    """Move this process into each cgroup directory of `dirs`; its task groups are then made
    beneath them (cgroups.CgroupTree reads /proc/self/cgroup)."""
    for d in dirs:
        (Path(d) / "cgroup.procs").write_text(str(os.getpid()))


def task_host(listen_host: str) -> str:
    """The address tasks listen on and are probed at: the borglet's own serving address, which
    BNS answers name; a wildcard (0.0.0.0, ::, none) gives 127.0.0.1."""
    return "127.0.0.1" if listen_host in ("", "0.0.0.0", "::", "[::]") else listen_host.strip("[]")


def main(argv: list[str] | None = None) -> None:
    """Parse arguments, re-adopt surviving tasks, and serve until SIGTERM/SIGINT."""
    from reference import serve  # imported here (uvicorn with it) so `--help` stays fast
    from reference.borglet.server import WIRE_LIMITS, make_app

    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        host, port = parse_listen(args.listen)
        capacity = parse_capacity(args.capacity)
        attrs = parse_pairs(args.attrs)
    except ValueError as err:
        parser.error(str(err))
    if args.start_rate <= 0:
        parser.error(f"--start-rate must be a positive number of starts per second, not {args.start_rate}")
    try:
        join_cgroups(args.join_cgroup)
        tls = channel.tls_from_arguments(args)
    except OSError as err:
        parser.error(f"--join-cgroup: {err}")
    except ValueError as err:
        parser.error(str(err))
    if args.hollow:
        _serve_hollow(parser, args, host, port, capacity, attrs, tls)
        return
    if not args.name or not args.state_dir:
        parser.error("--name and --state-dir are required (except with --hollow N)")
    if args.channel_key_file is None and not args.insecure_channel:
        parser.error(
            "--channel-key-file is required: without it anyone who reaches the borglet's port can "
            "run commands on this machine (--insecure-channel runs it so anyway, for experiments)"
        )
    try:
        key = channel.load_key(args.channel_key_file) if args.channel_key_file else None
    except channel.ChannelKeyError as err:
        parser.error(str(err))
    logging.basicConfig(
        level=args.log_level.upper(),
        format=f"%(asctime)s borglet[{args.name}] %(levelname)s %(name)s: %(message)s",
    )
    state_dir = os.path.abspath(args.state_dir)
    work_dir = os.path.abspath(args.work_dir or default_work_dir(args.name, state_dir))
    as_users, why = run_tasks_as_users(args.run_tasks_as, os.geteuid())
    if args.run_tasks_as == "job-user" and not as_users:
        parser.error(f"--run-tasks-as job-user: {why}")
    try:
        task_env = parse_task_env(args.task_env)
    except ValueError as err:
        parser.error(str(err))
    try:
        prepare_dirs(state_dir, work_dir if as_users else None)
    except ValueError as err:
        parser.error(str(err))
    config = MachineConfig(
        name=args.name,
        capacity=capacity,
        state_dir=state_dir,
        attrs=attrs,
        failure_domain=args.failure_domain,
        kill_grace_s=args.kill_grace,
        start_rate=args.start_rate,
        task_uids=as_users,
        work_dir=work_dir,
        task_env=task_env,
        host=task_host(host),
    )
    borglet = Borglet(config, choose(args.isolation, args.name), containers=docker_runtime(parser, args, state_dir))
    borglet.load()
    log = logging.getLogger(__name__)
    log.info("machine %s isolation=%s capacity=%s", args.name, borglet.isolation.name, capacity)
    if as_users:
        log.info("tasks run as their job users' own uids from %d, in %s", taskusers.FIRST_UID, work_dir)
    elif os.geteuid() == 0:
        log.warning(
            "--run-tasks-as borglet on a root borglet: every task runs as ROOT and can read the "
            "cell's keys, signal any process and change its own limits (docs/security.md)"
        )
    else:
        log.warning(
            "tasks run as the borglet's own user (uid %d), able to signal it and each other and to "
            "read its state dir: %s", os.geteuid(), why,
        )  # fmt: skip
    if key is None:
        logging.getLogger(__name__).warning(
            "--insecure-channel: syncs are not authenticated; anyone who reaches %s can run commands here",
            args.listen,
        )
    app = make_app(borglet, kill_tasks_on_exit=args.kill_tasks_on_exit, channel_key=key)
    # uvicorn shuts down gracefully on SIGTERM and then re-raises it to the handler that was
    # there before; making that handler exit 0 reports the requested stop as a clean exit.
    signal.signal(signal.SIGTERM, _exit_cleanly)
    # asyncio's own loop, not uvloop: uvloop keeps SIGCHLD for itself and refuses the handler
    # that wakes the supervisor on a task's exit, which was then seen only on the next idle
    # pass, up to a second late, while syncs reported the dead process RUNNING (a rollout took
    # a crashing replacement for up: docs/decisions.md). A borglet serves a few requests a second.
    serve.run(app, host=host, port=port, limits=WIRE_LIMITS, tls=tls, log_level="warning", access_log=False, loop="asyncio")


def _serve_hollow(
    parser: argparse.ArgumentParser,
    args: argparse.Namespace,
    host: str,
    port: int,
    capacity: dict[str, int],
    attrs: dict[str, str],
    tls: channel.ServerTLS | None = None,
) -> None:
    """Serve `--hollow N` simulated machines from this one process until SIGTERM/SIGINT."""
    from reference import serve
    from reference.borglet.hollow import HollowConfig, HollowMachine, machine_names
    from reference.borglet.hollow_server import WIRE_LIMITS, HollowApp

    if args.hollow < 0:
        parser.error(f"--hollow must be a number of machines above 0, not {args.hollow}")
    if args.hollow_start_delay < 0:
        parser.error(f"--hollow-start-delay must be 0 or more seconds, not {args.hollow_start_delay}")
    try:
        key = channel.load_key(args.channel_key_file) if args.channel_key_file else None
    except channel.ChannelKeyError as err:
        parser.error(str(err))
    logging.basicConfig(
        level=args.log_level.upper(),
        format="%(asctime)s hollow-borglet %(levelname)s %(name)s: %(message)s",
    )
    machines = {
        name: HollowMachine(
            HollowConfig(
                name, capacity, {**attrs, "hollow": "true"}, args.failure_domain, args.hollow_start_delay
            )
        )
        for name in machine_names(args.hollow, args.name or "hollow")
    }
    log = logging.getLogger(__name__)
    log.info("%d hollow machines of %s", len(machines), capacity)
    if key is None:
        log.warning("no --channel-key-file: the hollow machines obey unsigned requests")
    signal.signal(signal.SIGTERM, _exit_cleanly)
    # httptools parses a request in C: the per-request cost is the simulated machine's own.
    serve.run(
        HollowApp(machines, channel_key=key), host=host, port=port, limits=WIRE_LIMITS, tls=tls, log_level="warning",
        access_log=False, lifespan="off",
    )  # fmt: skip


def docker_runtime(parser: argparse.ArgumentParser, args: argparse.Namespace, state_dir: str) -> Containers | None:
    """The engine of `--runtime docker`, None for the process runtime; an unreachable engine
    (or no Docker SDK) ends the borglet with why."""
    if args.runtime != "docker":
        return None
    try:
        containers = Containers(
            args.cell, args.name, state_dir, default_cgroup_parent(args.name, Path("/proc/self/cgroup").read_text()),
            image_store=os.path.abspath(args.image_store) if args.image_store else "",
        )
        containers.client.ping()
    except Exception as err:  # ImportError, DockerException: either way no engine to use
        parser.error(f"--runtime docker: no Docker engine answers ({err}); start dockerd or use --runtime process")
    return containers


def run_tasks_as_users(mode: str, euid: int) -> tuple[bool, str]:
    """Whether tasks run as their job users' uids (`--run-tasks-as`), and why not if not. A
    root borglet runs them so unless told otherwise: never root by accident. A task whose
    program its user cannot run fails to spawn, saying so (processes.spawn_error)."""
    if mode == "borglet":
        return False, "--run-tasks-as borglet"
    if euid != 0:
        return False, f"the borglet runs as uid {euid}, not root, and cannot start a task as another uid"
    return True, ""


def parse_task_env(pairs: list[str]) -> tuple[tuple[str, str], ...]:
    """['PYTHONPATH=/src', ...] -> (('PYTHONPATH', '/src'), ...); ValueError naming a bad one."""
    out = []
    for pair in pairs:
        name, sep, value = pair.partition("=")
        if not sep or not name or "\0" in pair:
            raise ValueError(f"--task-env {pair!r}: expected NAME=VALUE, with no NUL byte")
        out.append((name, value))
    return tuple(out)


def default_work_dir(name: str, state_dir: str) -> str:
    """Where a root borglet makes its tasks' working directories: outside the state dir
    (private), and outside /tmp (where another user could plant a link first), one per state
    dir so the borglets of several cells on one host never share one."""
    return os.path.join(WORK_ROOT, f"{sanitize(name)}-{sha1(state_dir.encode()).hexdigest()[:8]}")


def prepare_dirs(state_dir: str, work_dir: str | None) -> None:
    """The state dir, private to the borglet's user (0700: tasks run as other uids must not
    read its table or other tasks' logs); the parent of the tasks' working directories, which
    their uids may pass through but not list (0711). ValueError if a directory above it
    keeps other users out: no task could enter its own."""
    os.makedirs(state_dir, exist_ok=True)
    os.chmod(state_dir, 0o700)
    if work_dir is None:
        return
    os.makedirs(work_dir, mode=0o711, exist_ok=True)
    os.chmod(work_dir, 0o711)
    for parent in Path(work_dir).parents:
        if not os.stat(parent).st_mode & stat.S_IXOTH:
            raise ValueError(
                f"--work-dir {work_dir}: {parent} does not let other users pass (mode "
                f"{stat.S_IMODE(os.stat(parent).st_mode):04o}), so tasks, which run as their own "
                "uids, could not enter their working directories; choose a --work-dir elsewhere"
            )


def _exit_cleanly(signum: int, frame: object) -> None:
    raise SystemExit(0)
