"""Command line of the borglet: `python -m reference.borglet` / `minborg borglet`."""

from __future__ import annotations

import argparse
import logging
import os
import signal

from reference.borglet.hollow import DEFAULT_START_DELAY_S
from reference.borglet.isolation import choose
from reference.borglet.supervisor import Borglet, MachineConfig
from reference.resources import parse_capacity, parse_pairs


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
        "--state-dir", help="where tasks.json and task logs live (required, except with --hollow)"
    )
    parser.add_argument("--isolation", choices=("auto", "cgroup", "rlimit"), default="auto")
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
    parser.add_argument("--log-level", default="info")
    return parser


def main(argv: list[str] | None = None) -> None:
    """Parse arguments, re-adopt surviving tasks, and serve until SIGTERM/SIGINT."""
    import uvicorn  # imported here so `--help` stays fast

    from reference.borglet.server import make_app

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
    if args.hollow:
        _serve_hollow(parser, args, host, port, capacity, attrs)
        return
    if not args.name or not args.state_dir:
        parser.error("--name and --state-dir are required (except with --hollow N)")
    logging.basicConfig(
        level=args.log_level.upper(),
        format=f"%(asctime)s borglet[{args.name}] %(levelname)s %(name)s: %(message)s",
    )
    os.makedirs(args.state_dir, exist_ok=True)
    config = MachineConfig(
        name=args.name,
        capacity=capacity,
        state_dir=os.path.abspath(args.state_dir),
        attrs=attrs,
        failure_domain=args.failure_domain,
        kill_grace_s=args.kill_grace,
        start_rate=args.start_rate,
    )
    borglet = Borglet(config, choose(args.isolation, args.name))
    borglet.load()
    logging.getLogger(__name__).info(
        "machine %s isolation=%s capacity=%s", args.name, borglet.isolation.name, capacity
    )
    app = make_app(borglet, kill_tasks_on_exit=args.kill_tasks_on_exit)
    # uvicorn shuts down gracefully on SIGTERM and then re-raises it to the handler that was
    # there before; making that handler exit 0 reports the requested stop as a clean exit.
    signal.signal(signal.SIGTERM, _exit_cleanly)
    uvicorn.run(app, host=host, port=port, log_level="warning", access_log=False)


def _serve_hollow(
    parser: argparse.ArgumentParser,
    args: argparse.Namespace,
    host: str,
    port: int,
    capacity: dict[str, int],
    attrs: dict[str, str],
) -> None:
    """Serve `--hollow N` simulated machines from this one process until SIGTERM/SIGINT."""
    import uvicorn

    from reference.borglet.hollow import HollowConfig, HollowMachine, machine_names
    from reference.borglet.hollow_server import HollowApp

    if args.hollow < 0:
        parser.error(f"--hollow must be a number of machines above 0, not {args.hollow}")
    if args.hollow_start_delay < 0:
        parser.error(f"--hollow-start-delay must be 0 or more seconds, not {args.hollow_start_delay}")
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
    logging.getLogger(__name__).info("%d hollow machines of %s", len(machines), capacity)
    signal.signal(signal.SIGTERM, _exit_cleanly)
    # httptools parses a request in C: the per-request cost is the simulated machine's own.
    uvicorn.run(
        HollowApp(machines), host=host, port=port, log_level="warning", access_log=False,
        http="httptools", lifespan="off",
    )  # fmt: skip


def _exit_cleanly(signum: int, frame: object) -> None:
    raise SystemExit(0)
