"""The cell autoscaler: adds machines while tasks wait for room, removes machines idle past a cooldown, within min..max.

    python -m reference.elastic.cellscaler --state-dir D --min 1 --max 4

It reads the cell through the API only (pending tasks with their requests and constraints,
machines with their tasks) and changes it through a MachineProvider; `minborg cell up
--autoscale-machines MIN:MAX` starts it beside the cell and `cell down` stops it first.
"""

from __future__ import annotations

import argparse
import logging
import signal
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

from reference import launcher
from reference.client import CellClient, ClientError
from reference.elastic.celldecisions import CellPolicy, Need, machines_to_add, machines_to_remove
from reference.elastic.provider import LocalProvider, MachineProvider
from reference.jobspec import parse_request_value
from reference.resources import parse_capacity
from spec.model import Constraint, ConstraintOp, Machine, Resources

log = logging.getLogger("cellscaler")


def need_of(job: dict, since: float) -> Need:
    """A pending task of `job` (the API's job JSON) as a Need."""
    request = Resources.of({k: parse_request_value(k, v) for k, v in (job.get("request") or {}).items()})
    constraints = tuple(
        Constraint(c["attr"], ConstraintOp(c.get("op", "eq")), tuple(c.get("values") or [c.get("value")]))
        for c in job.get("constraints") or []
    )
    return Need(request, constraints, since)


class CellScaler:
    def __init__(
        self,
        client: CellClient,
        provider: MachineProvider,
        template: Machine,
        policy: CellPolicy,
        *,
        interval: float = 1.0,
        clock: Callable[[], float] = time.monotonic,
        masters: frozenset[str] = frozenset(),
    ) -> None:
        self.client, self.provider, self.template, self.policy = client, provider, template, policy
        # The cell's own master names: on a busy host another cell's master can hold a port
        # this cell's master failed to bind, and that cell must never be changed from here.
        self.masters = masters
        self.interval, self.clock = interval, clock
        self.pending_since: dict[str, float] = {}  # "job/index#inc" -> first seen pending
        self.idle_since: dict[str, float | None] = {}
        self.last_add_at: float | None = None
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.wait(self.interval):
            try:
                self.tick()
            except ClientError as err:
                log.warning("cell not reachable: %s", err)
            except Exception:  # one bad tick must not end autoscaling
                log.exception("cell autoscaler tick failed")

    def needs(self, cell: dict) -> list[Need]:
        now = self.clock()
        if not cell.get("tasks", {}).get("PENDING"):
            self.pending_since.clear()
            return []
        out, seen = [], set()
        for job in self.client.jobs():
            for t in self.client.tasks(job["key"]):
                if t["state"] != "PENDING":
                    continue
                key = f"{t['job']}/{t['index']}#{t['incarnation']}"
                seen.add(key)
                out.append(need_of(job, self.pending_since.setdefault(key, now)))
        self.pending_since = {k: v for k, v in self.pending_since.items() if k in seen}
        return out

    def tick(self) -> None:
        now = self.clock()
        cell = self.client.cell()
        if self.masters and cell.get("leader") not in self.masters:
            log.error("the master answering leads %r, not this cell (%s): doing nothing",
                      cell.get("leader"), ", ".join(sorted(self.masters)))  # fmt: skip
            return
        needs = self.needs(cell)
        managed = {m.name for m in self.provider.list()}
        machines = {m["name"]: m for m in self.client.machines() if m["name"] in managed}
        for name in managed:
            busy = bool(machines.get(name, {}).get("tasks"))
            if busy or name not in machines:
                self.idle_since[name] = None
            elif self.idle_since.get(name) is None:
                self.idle_since[name] = now
        self.idle_since = {k: v for k, v in self.idle_since.items() if k in managed}
        add = machines_to_add(needs, self.template, len(managed), now, self.last_add_at, self.policy)
        add = max(add, self.policy.min - len(managed))  # a cell started below min
        for _ in range(add):
            m = self.provider.add()
            log.info("added %s (%d waiting task(s), %d machine(s) now)", m.name, len(needs), len(managed) + 1)
            managed.add(m.name)
            self.last_add_at = self.clock()
        if add:
            return
        waiting = sum(1 for n in needs if now - n.pending_since >= self.policy.pending_grace_s)
        for name in machines_to_remove(self.idle_since, now, len(managed), waiting, self.policy):
            log.info("removing %s (idle %.0fs)", name, now - (self.idle_since.get(name) or now))
            self.provider.remove(name)
            managed.discard(name)
            self.idle_since.pop(name, None)


def template_of(capacity: str) -> Machine:
    """What a new machine will look like (attrs as the launcher gives the first rack)."""
    return Machine("new", Resources.of(parse_capacity(capacity)), (("rack", launcher.rack_of(0)),), launcher.rack_of(0))


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m reference.elastic.cellscaler", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
    p.add_argument("--state-dir", required=True, help="the local cell's state dir")
    p.add_argument("--min", type=int, required=True, help="fewest machines")
    p.add_argument("--max", type=int, required=True, help="most machines")
    p.add_argument("--capacity", default=launcher.DEFAULT_CAPACITY, help="capacity of a new machine")
    p.add_argument("--idle-cooldown", type=float, default=30.0, help="seconds a machine is idle before removal")
    p.add_argument("--pending-grace", type=float, default=1.0, help="seconds a task waits before a machine is added")
    p.add_argument("--interval", type=float, default=1.0)
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if not 0 <= args.min <= args.max:
        print(f"--min and --max must satisfy 0 <= min <= max, got {args.min}:{args.max}", file=sys.stderr)
        return 2
    logging.basicConfig(level=logging.INFO, format="%(asctime)s cellscaler %(levelname)s %(message)s")
    logging.getLogger("httpx").setLevel(logging.WARNING)
    client = CellClient.discover(state_dir=args.state_dir, timeout=3.0)
    provider = LocalProvider(args.state_dir, client, args.capacity)
    policy = CellPolicy(args.min, args.max, pending_grace_s=args.pending_grace, idle_cooldown_s=args.idle_cooldown)
    masters = frozenset(r.name for r in launcher.CellInfo.load(args.state_dir).of_role(launcher.Role.MASTER))
    scaler = CellScaler(client, provider, template_of(args.capacity), policy, interval=args.interval, masters=masters)
    signal.signal(signal.SIGTERM, lambda *_: scaler.stop.set())
    signal.signal(signal.SIGINT, lambda *_: scaler.stop.set())
    scaler.run()
    return 0


def spawn(info: launcher.CellInfo, bounds: tuple[int, int], capacity: str, extra: list[str] | None = None) -> launcher.ProcessRecord:
    """Start the cell autoscaler of a local cell as its own process (for `cell up`)."""
    command = [
        sys.executable, "-m", "reference.elastic.cellscaler", "--state-dir", info.state_dir,
        "--min", str(bounds[0]), "--max", str(bounds[1]), "--capacity", capacity, *(extra or []),
    ]  # fmt: skip
    log_path = Path(info.state_dir) / "logs" / "cellscaler.log"
    env = launcher.child_env(info.workdir)
    return launcher.spawn(launcher.Role.AUTOSCALER, "cellscaler", command, "", log_path, info.workdir, env)


def parse_bounds(text: str) -> tuple[int, int]:
    """'1:4' -> (1, 4); ValueError with what to type otherwise."""
    lo, sep, hi = text.partition(":")
    if not sep or not lo.strip().isdigit() or not hi.strip().isdigit() or int(lo) > int(hi):
        raise ValueError(f"expected MIN:MAX with 0 <= MIN <= MAX, such as 1:4; got {text!r}")
    return int(lo), int(hi)


if __name__ == "__main__":
    raise SystemExit(main())
