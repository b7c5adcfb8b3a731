"""Chaos Toolkit actions (python providers) for the faults of a real network on a netns cell (`minborg cell up --hosts netns`): partitions by packet filter, pauses, kills, heal.

Each action takes the cell's state dir and the run dir, records the fault's start or end in
the run's events (chaos/events.py, as chaos/actions.py does), and returns what it did. An
experiment names a host by its process (etcd0, master1, machine2) or asks for the leader
(`isolate_leader`). The packet filter is reference/launcher/netfaults.py; these are its
entries for an experiment's JSON.
"""

from __future__ import annotations

from typing import Any

from chaos import cellfile, events
from reference.launcher import netfaults as faults
from reference.launcher.cellfile import CellInfo


def _names(hosts: list[str] | str | None) -> list[str]:
    if hosts is None:
        return []
    return [h.strip() for h in (hosts.split(",") if isinstance(hosts, str) else hosts) if h.strip()]


def _cut(state_dir: str, run: str, fault: str, cuts: faults.Cuts, loss: float | None = None,
         **detail: Any) -> dict[str, Any]:  # fmt: skip
    info = CellInfo.load(state_dir)
    made = cuts(faults.network_of(info))
    rules = faults.apply(info, made, loss)
    detail |= {"loss": loss} if loss else {}
    events.record("fault-start", run, fault="partition", partition=fault, rules=rules, **detail)
    return {"fault": fault, "cuts": len(made), "rules": rules, **detail}


def isolate_host(
    state_dir: str, run: str, host: str, from_this_host: bool = True, loss: float | None = None
) -> dict[str, Any]:
    """Cut `host` from every other host of the cell (and this one), both ways; `loss`: drop
    that fraction of its packets instead of all (this kernel has no netem)."""
    return _cut(state_dir, run, "isolate", lambda net: faults.isolate(net, host, from_this_host=from_this_host),
                loss, host=host)  # fmt: skip


def isolate_leader(state_dir: str, run: str, from_this_host: bool = False) -> dict[str, Any]:
    """Cut the elected master's host from the rest of the cell (this host keeps reaching it
    unless `from_this_host`, so a probe can see it step down)."""
    leader = cellfile.leader(cellfile.load(state_dir))
    if leader is None:
        raise RuntimeError("no leader to isolate")
    return isolate_host(state_dir, run, leader.name, from_this_host)


def split_hosts(state_dir: str, run: str, side: list[str] | str, other: list[str] | str | None = None,
                one_way: bool = False, loss: float | None = None) -> dict[str, Any]:  # fmt: skip
    """Cut the hosts of `side` from those of `other` (default every other host); `one_way`:
    only what `side` sends is dropped; `loss`: that fraction of the packets."""
    a, b = _names(side), _names(other)
    return _cut(state_dir, run, "split", lambda net: faults.split(net, a, b, one_way=one_way), loss,
                side=a, other=b, one_way=one_way)  # fmt: skip


def cut_replica_from_borglets(state_dir: str, run: str, master: str) -> dict[str, Any]:
    """Cut master `master`'s host from every borglet's host alone (etcd and the other masters
    still reach it)."""
    info = CellInfo.load(state_dir)
    machines = [n for n in faults.network_of(info).names() if n.startswith("machine")]
    return split_hosts(state_dir, run, [master], machines)


def bridge(state_dir: str, run: str, via: list[str] | str | None = None) -> dict[str, Any]:
    """The control plane in two halves joined only through the hosts in the middle."""
    middle = _names(via)
    return _cut(state_dir, run, "bridge", lambda net: faults.bridge(net, middle), via=middle)


def pause_host(state_dir: str, run: str, host: str) -> dict[str, Any]:
    """SIGSTOP `host`'s process."""
    record = faults.pause(CellInfo.load(state_dir), host)
    events.record("fault-start", run, fault="pause_host", host=host, pid=record.pid)
    return {"fault": "pause", "host": host, "pid": record.pid}


def kill_host(state_dir: str, run: str, host: str) -> dict[str, Any]:
    """SIGKILL `host`'s process (`minborg cell restart` brings it back)."""
    record = faults.kill(CellInfo.load(state_dir), host)
    events.record("fault-start", run, fault="kill_host", host=host, pid=record.pid)
    return {"fault": "kill", "host": host, "pid": record.pid}


def skew_clock(state_dir: str, run: str, host: str, seconds: float) -> dict[str, Any]:
    """Start `host`'s process again with its clock `seconds` off (faketime; 0: on time)."""
    record = faults.skew(CellInfo.load(state_dir), host, seconds)
    events.record("fault-start" if seconds else "fault-end", run, fault="skew_clock", host=host, seconds=seconds)
    return {"fault": "clock_skew", "host": host, "seconds": seconds, "pid": record.pid}


def heal(state_dir: str, run: str) -> dict[str, Any]:
    """Remove every fault rule of the cell and continue every paused host."""
    removed, continued = faults.heal(CellInfo.load(state_dir))
    events.record("fault-end", run, fault="partition", rules_removed=removed, continued=continued)
    return {"rules_removed": removed, "continued": continued}


def fault_rules(state_dir: str) -> dict[str, list[str]]:
    """Probe: the fault rules now in each host's chain (an empty dict once healed)."""
    return faults.rules(CellInfo.load(state_dir))
