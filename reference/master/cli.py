"""Command line of a master replica: `python -m reference.master` / `minborg master`."""

from __future__ import annotations

import argparse
import logging
import signal
import sys

from reference import channel
from reference.master import access, freshness
from reference.master.leader import LeaderConfig
from reference.master.writer import MAX_OPS_PER_TXN
from reference.resources import CELL_MACHINES, parse_pairs
from reference.store import tls as store_tls
from spec.model import Resources


def parse_listen(text: str) -> tuple[str, int]:
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit():
        raise ValueError(f"invalid --listen {text!r}: expected HOST:PORT such as 127.0.0.1:7000")
    return host or "127.0.0.1", int(port)


def parse_peers(text: str) -> dict[str, str]:
    """'m1=http://127.0.0.1:7001,m2=...' -> {'m1': 'http://127.0.0.1:7001', ...}."""
    return parse_pairs(text)


def parse_quota(text: str) -> Resources:
    """'cpu=100,ram=1TiB' (CPU in cores or 500m) -> Resources, each at most what the cell's
    most machines hold (a quota spans the cell)."""
    from reference.jobspec import parse_request_value

    pairs = parse_pairs(text)
    if not pairs:
        raise ValueError("--default-quota needs at least one resource, e.g. cpu=100,ram=1TiB")
    quota = {}
    for name, value in pairs.items():
        try:
            quota[name] = parse_request_value(name, value, CELL_MACHINES)
        except ValueError as err:
            raise ValueError(f"--default-quota {name}: {err}") from None
    return Resources.of(quota)


GIL_SWITCH_MS = 1.0


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="minborg master", description="Run one Borgmaster replica.")
    p.add_argument("--name", required=True, help="replica name, unique in the cell")
    p.add_argument("--listen", required=True, help="HOST:PORT to serve the API on")
    p.add_argument("--etcd", required=True, help="etcd client URLs, comma separated")
    store_tls.add_arguments(p)
    channel.add_tls_arguments(p)
    p.add_argument("--cell", required=True, help="cell name (part of every BNS name)")
    p.add_argument("--poll-interval", type=float, default=1.0, help="seconds between borglet polls")
    p.add_argument("--down-after", type=int, default=3, help="missed polls before a machine is down")
    p.add_argument("--lease-ttl", type=float, default=2.0, help="leader lease TTL in seconds")
    p.add_argument(
        "--max-staleness",
        type=float,
        default=freshness.DEFAULT_MAX_STALENESS_S,
        help="refuse reads (503) when etcd was last heard longer ago than this, in seconds",
    )
    p.add_argument(
        "--max-txn-ops",
        type=int,
        default=MAX_OPS_PER_TXN,
        help=f"operations per etcd txn at most, 2 or more under etcd's --max-txn-ops (a txn also compares each "
        f"key it writes, and the fence's 2; default {MAX_OPS_PER_TXN}, under etcd's default of 128; local cells raise both)",
    )
    p.add_argument(
        "--gil-switch-ms",
        type=float,
        default=GIL_SWITCH_MS,
        help=f"how long a thread may hold the interpreter while another waits for it, in ms (default "
        f"{GIL_SWITCH_MS}; Python's is 5): the API's event loop waits that long at each step of a "
        "request while the watch and the poller are busy",
    )
    p.add_argument("--advertise", default=None, help="URL other replicas reach this one at")
    p.add_argument("--peers", default="", help="name=url,... of the other replicas (for /v1/cell)")
    p.add_argument("--default-quota", default=None, help="quota of user '*' per band, e.g. cpu=100,ram=1TiB")
    p.add_argument("--restart-rate", type=float, default=20.0, help="task restarts per second")
    p.add_argument("--roll-rate", type=float, default=2.0, help="tasks rolled per second in an update")
    # Gone (issue 40): kept only to say so, rather than argparse's bare "unrecognized arguments".
    p.add_argument("--link-shards", default=None, help=argparse.SUPPRESS)
    p.add_argument(
        "--channel-key-file",
        default=None,
        help="the cell's channel key (made by `cell up`): every request to a borglet is signed with "
        "it; without it requests go unsigned, and only borglets run with --insecure-channel obey them",
    )
    p.add_argument(
        "--admin-token-file", default=None,
        help="file holding the admin's bearer token (mode 0600; `cell up` writes one); its SHA-256 is recorded in etcd",
    )
    p.add_argument(
        "--rate-limit", type=float, default=access.DEFAULT_RATE,
        help=f"requests per second each user may make to this replica (default {access.DEFAULT_RATE:g}; 0: no limit)",
    )
    p.add_argument(
        "--rate-burst", type=float, default=None,
        help="requests a user may make at once above the rate (default: twice --rate-limit)",
    )
    p.add_argument("--metrics-need-token", action="store_true", help="/metrics takes a token like the API (default: open)")
    p.add_argument(
        "--unsafe-no-auth-benchmark-only", action="store_true",
        help="check no token at all: anyone who reaches the replica owns the cell. Only for measuring what the checks cost",
    )  # fmt: skip
    p.add_argument("--log-level", default="info")
    return p


def access_config(args: argparse.Namespace) -> access.AccessConfig:
    """How the replica checks its callers, from its arguments; ValueError naming the flag."""
    admin_hash = None
    if args.admin_token_file:
        from reference.master.users import read_token_file

        try:
            admin_hash = access.hash_token(read_token_file(args.admin_token_file))
        except OSError as err:
            raise ValueError(f"--admin-token-file: cannot read {args.admin_token_file}: {err.strerror}") from None
        except ValueError as err:
            raise ValueError(f"--admin-token-file: {err}") from None
    if args.rate_limit < 0 or (args.rate_burst is not None and args.rate_burst < 1):
        raise ValueError("--rate-limit must be >= 0 (0: no limit) and --rate-burst >= 1")
    burst = args.rate_burst if args.rate_burst is not None else 2 * args.rate_limit
    return access.AccessConfig(
        admin_hash=admin_hash, rate=args.rate_limit, burst=burst,
        metrics_open=not args.metrics_need_token, enforce=not args.unsafe_no_auth_benchmark_only,
    )  # fmt: skip


LINK_SHARDS_GONE = (
    "--link-shards is gone: every replica's link shard polls its share of the borglets and carries "
    "the leader's syncs, always; remove the option"
)


def main(argv: list[str] | None = None) -> None:
    """Parse arguments and serve until SIGTERM/SIGINT."""
    from reference import serve
    from reference.master.api import make_app
    from reference.master.replica import Replica

    parser = build_parser()
    args = parser.parse_args(argv)
    if args.link_shards is not None:
        parser.error(LINK_SHARDS_GONE)
    try:
        host, port = parse_listen(args.listen)
        peers = parse_peers(args.peers)
        quota = parse_quota(args.default_quota) if args.default_quota else None
        checks = access_config(args)
        etcd_tls = store_tls.from_arguments(args)
        api_tls = channel.tls_from_arguments(args)
    except ValueError as err:
        parser.error(str(err))
    try:
        key = channel.load_key(args.channel_key_file) if args.channel_key_file else None
    except channel.ChannelKeyError as err:
        parser.error(str(err))
    if args.max_txn_ops < 2:
        parser.error(f"--max-txn-ops must be at least 2, not {args.max_txn_ops}")
    if not 0.05 <= args.gil_switch_ms <= 100:
        parser.error(f"--gil-switch-ms must be between 0.05 and 100, not {args.gil_switch_ms}")
    if args.poll_interval <= 0 or args.down_after < 1 or args.lease_ttl < 1 or args.max_staleness <= 0:
        parser.error("--poll-interval must be > 0, --down-after >= 1, --lease-ttl >= 1, --max-staleness > 0")
    logging.basicConfig(
        level=args.log_level.upper(),
        format=f"%(asctime)s master[{args.name}] %(levelname)s %(name)s: %(message)s",
    )
    logging.getLogger("httpx").setLevel(logging.WARNING)  # one line per poll drowns the log
    if key is None:
        logging.getLogger(__name__).warning(
            "no --channel-key-file: requests to borglets go unsigned, and only borglets run with "
            "--insecure-channel obey them"
        )
    sys.setswitchinterval(args.gil_switch_ms / 1000)
    url = args.advertise or f"{'https' if api_tls else 'http'}://{host}:{port}"
    config = LeaderConfig(
        cell_name=args.cell,
        master_name=args.name,
        poll_interval=args.poll_interval,
        down_after=args.down_after,
        restart_rate=args.restart_rate,
        roll_rate=args.roll_rate,
        default_quota=quota,
        channel_key=key,
    )
    replica = Replica(
        name=args.name,
        url=url,
        etcd=args.etcd.split(","),
        etcd_tls=etcd_tls,
        config=config,
        lease_ttl=args.lease_ttl,
        peers=peers,
        max_staleness=args.max_staleness,
        max_txn_ops=args.max_txn_ops,
    )
    replica.start()
    if not checks.enforce:
        logging.getLogger(__name__).warning("--unsafe-no-auth-benchmark-only: this replica checks no token")
    if checks.admin_hash is not None:
        from reference.master.users import store_admin
        from reference.store.client import StoreError

        try:
            store_admin(replica.client, replica.keys, checks.admin_hash)
        except StoreError as err:  # this replica still knows the admin from the file
            logging.getLogger(__name__).warning("could not record the admin's token hash in etcd: %s", err)
    signal.signal(signal.SIGTERM, _exit_cleanly)
    try:
        serve.run(make_app(replica, checks), host=host, port=port, tls=api_tls, log_level="warning", access_log=False)
    finally:
        replica.stop()


def _exit_cleanly(signum: int, frame: object) -> None:
    raise SystemExit(0)
