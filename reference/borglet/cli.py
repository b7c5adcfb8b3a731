"""Command line of the borglet: `python -m reference.borglet` / `minborg borglet`."""

from __future__ import annotations

import argparse
import logging
import os
import signal

from reference import channel
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
        prog="minborg borglet", description="Run the borglet of one machine."
    )
    parser.add_argument("--name", required=True, help="machine name, unique in the cell")
    parser.add_argument("--listen", default="127.0.0.1:0", help="HOST:PORT to serve on")
    parser.add_argument(
        "--capacity", required=True, help="e.g. cpu=4000m,ram=8GiB[,gpu=1,disk=10GiB,ports=100]"
    )
    parser.add_argument("--attrs", default="", help="machine attributes, e.g. rack=r1,arch=x86")
    parser.add_argument("--failure-domain", default="", help="e.g. the rack or power domain")
    parser.add_argument("--state-dir", required=True, help="where tasks.json and task logs live")
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
        "--channel-key-file",
        default=None,
        help="the cell's channel key (mode 0600, made by `cell up`): only requests signed with it "
        "by the cell's masters are obeyed; /healthz and /metrics stay open",
    )
    parser.add_argument(
        "--insecure-channel",
        action="store_true",
        help="run without a channel key, obeying anyone who reaches the port, who can then run any "
        "command on this machine: for experiments run by hand on a private machine only",
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
    if key is None:
        logging.getLogger(__name__).warning(
            "--insecure-channel: syncs are not authenticated; anyone who reaches %s can run commands here",
            args.listen,
        )
    app = make_app(borglet, kill_tasks_on_exit=args.kill_tasks_on_exit, channel_key=key)
    # uvicorn shuts down gracefully on SIGTERM and then re-raises it to the handler that was
    # there before; making that handler exit 0 reports the requested stop as a clean exit.
    signal.signal(signal.SIGTERM, _exit_cleanly)
    uvicorn.run(app, host=host, port=port, log_level="warning", access_log=False)


def _exit_cleanly(signum: int, frame: object) -> None:
    raise SystemExit(0)
