"""Faults a real network and real hosts make, on a netns cell: partitions by packet filter (a host isolated, a split, a bridge, one way), pauses and kills.

A partition is a set of directed cuts (packets from address A to address B are dropped). Each
cut becomes DROP rules in the chain CHAIN of the namespaces it touches: OUTPUT `-d B` in A's,
INPUT `-s A` in B's (the host's own address, the gateway, has no namespace: only the other end
filters). Every namespace of the cell jumps to CHAIN from INPUT and OUTPUT from its creation
(netns.host_commands), so a fault is appended rules and `heal` empties the chains. Rules
match addresses, so established connections are cut too, as by a real partition; a process
cut off sees no reset, only silence. A pause is SIGSTOP of the host's process (its sockets stay
open and answer nothing), a kill SIGKILL; `heal` continues every paused process.

Loss and latency (`tc qdisc ... netem`) need the kernel's sch_netem, which this kernel lacks
(`netem_available()` says why). Loss falls back to the packet filter: a cut's rules with the
statistic match drop a fraction of its packets at random (`--loss`). Latency has no fallback
on netns hosts: a slow link is Toxiproxy's latency toxic on a loopback cell (chaos/README.md).
"""

from __future__ import annotations

import os
import signal
import subprocess
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from reference.launcher.cellfile import CellInfo, LauncherError, ProcessRecord, Role, with_records
from reference.launcher.netns import CHAIN, NetnsError, Network, in_netns, run
from reference.launcher.processes import child_env, kill_process, signal_process, spawn


@dataclass(frozen=True)
class Cut:
    """Packets from `src` to `dst` (addresses) are dropped."""

    src: str
    dst: str


Cuts = Callable[[Network], set[Cut]]  # a fault's cuts, from the cell's hosts


def _hosts(net: Network, names: Iterable[str]) -> list[str]:
    return [net.address(n) for n in names]


def isolate(net: Network, host: str, *, from_this_host: bool = True) -> set[Cut]:
    """`host` cut from every other host of the cell, both ways, and (`from_this_host`) from the
    host the cell runs on (its gateway address: the command line, Sigma)."""
    me = net.address(host)
    others = [h.address for h in net.hosts if h.name != host] + ([net.gateway] if from_this_host else [])
    return {Cut(me, o) for o in others} | {Cut(o, me) for o in others}


def split(net: Network, side: Sequence[str], other: Sequence[str] = (), *, one_way: bool = False) -> set[Cut]:
    """The hosts of `side` cut from those of `other` (default: every other host of the cell);
    `one_way`: only packets from `side` to `other` are dropped."""
    if not side:
        raise LauncherError("name at least one host to cut off")
    rest = list(other) or [n for n in net.names() if n not in side]
    overlap = set(side) & set(rest)
    if overlap:
        raise LauncherError(f"hosts on both sides of the split: {', '.join(sorted(overlap))}")
    a, b = _hosts(net, side), _hosts(net, rest)
    cuts = {Cut(x, y) for x in a for y in b}
    return cuts if one_way else cuts | {Cut(y, x) for x in a for y in b}


def bridge(net: Network, via: Sequence[str] = ()) -> set[Cut]:
    """Jepsen's bridge: the control plane (etcd members, masters) in two halves that cannot
    reach each other, and a host of each role in the middle (`via`; default the middle one of
    each role of 3 or more) that reaches both. Schedulers and machines are left alone."""
    left: list[str] = []
    right: list[str] = []
    middle = list(via)
    for prefix in ("etcd", "master"):
        names = [n for n in net.names() if n.startswith(prefix) and n[len(prefix):].isdigit()]
        if not via and len(names) >= 3:
            middle.append(names[len(names) // 2])
        rest = [n for n in names if n not in middle]
        left += rest[: len(rest) // 2]
        right += rest[len(rest) // 2 :]
    if not left or not right:
        raise LauncherError("a bridge needs 3 or more etcd members or masters, in two halves and a middle")
    return split(net, left, right)


def rule_commands(
    net: Network, cuts: Iterable[set[Cut] | Cut], loss: float | None = None
) -> dict[str, list[list[str]]]:
    """The iptables commands, by namespace, that drop every cut: OUTPUT -d in the sender's
    namespace, INPUT -s in the receiver's. `loss`: drop that fraction of the packets at random
    (the statistic match; with both ends filtering, a packet passes each with 1 - loss)."""
    drop = [*(["-m", "statistic", "--mode", "random", "--probability", f"{loss:g}"] if loss else []), "-j", "DROP"]
    ns_of = {h.address: h.netns for h in net.hosts}
    flat: set[Cut] = set()
    for c in cuts:
        flat |= c if isinstance(c, set) else {c}
    out: dict[str, list[list[str]]] = {}
    for cut in sorted(flat, key=lambda c: (c.src, c.dst)):
        if cut.src in ns_of:
            out.setdefault(ns_of[cut.src], []).append(
                in_netns(ns_of[cut.src], ["iptables", "-w", "-A", CHAIN, "-d", cut.dst, *drop]))  # fmt: skip
        if cut.dst in ns_of:
            out.setdefault(ns_of[cut.dst], []).append(
                in_netns(ns_of[cut.dst], ["iptables", "-w", "-A", CHAIN, "-s", cut.src, *drop]))  # fmt: skip
    return out


def heal_commands(net: Network) -> list[list[str]]:
    """The commands that empty every namespace's fault chain."""
    return [in_netns(h.netns, ["iptables", "-w", "-F", CHAIN]) for h in net.hosts]


def network_of(info: CellInfo) -> Network:
    if info.network is None:
        raise LauncherError(
            f"cell {info.cell} runs on loopback: faults by packet filter need hosts of their own "
            "(`minborg cell up --hosts netns --fresh`); on loopback use Toxiproxy (`cell up --toxiproxy`)"
        )
    return info.network


def check_loss(loss: float | None) -> None:
    if loss is not None and not 0 < loss < 1:
        raise LauncherError(f"--loss must be a fraction between 0 and 1 (0.3: 30% of packets dropped), got {loss}")


def apply(info: CellInfo, cuts: set[Cut], loss: float | None = None) -> int:
    """Drop every cut in the cell's namespaces (`loss`: that fraction of its packets); returns
    the number of rules added."""
    check_loss(loss)
    net = network_of(info)
    added = 0
    try:
        for commands in rule_commands(net, [cuts], loss).values():
            for command in commands:
                run(command)
                added += 1
    except NetnsError as err:
        raise LauncherError(f"cannot add a packet filter rule: {err}") from None
    return added


def rules(info: CellInfo) -> dict[str, list[str]]:
    """The fault rules now in each host's chain, by host name (hosts without any left out)."""
    net = network_of(info)
    found = {}
    for h in net.hosts:
        try:
            listed = run(in_netns(h.netns, ["iptables", "-w", "-S", CHAIN])).splitlines()
        except NetnsError:
            continue
        mine = [line for line in listed if line.startswith("-A ")]
        if mine:
            found[h.name] = mine
    return found


def heal(info: CellInfo) -> tuple[int, list[str]]:
    """Empty every fault chain of the cell and continue every paused process; returns the
    number of rules removed and the names of the processes continued."""
    net = network_of(info)
    removed = sum(len(r) for r in rules(info).values())
    for command in heal_commands(net):
        try:
            run(command)
        except NetnsError:
            pass  # a host whose namespace is gone has no rule left
    continued = [r.name for r in info.processes if r.name in net.names() and _paused(r) and _signal(r, signal.SIGCONT)]
    return removed, continued


def process_of(info: CellInfo, host: str) -> ProcessRecord:
    """The process of `host` (etcd0, master1, scheduler0, machine2) in the cell file."""
    for record in info.processes:
        if record.name == host and record.role is not Role.AUTOSCALER:
            return record
    names = ", ".join(r.name for r in info.processes if r.role is not Role.AUTOSCALER)
    raise LauncherError(f"cell {info.cell} has no host {host!r}; its hosts: {names}")


def pause(info: CellInfo, host: str) -> ProcessRecord:
    """Freeze `host`'s process (SIGSTOP): its sockets stay open and nothing answers."""
    record = process_of(info, host)
    if not _signal(record, signal.SIGSTOP):
        raise LauncherError(f"{host} (pid {record.pid}) is not running")
    return record


def unpause(info: CellInfo, host: str) -> ProcessRecord:
    """Let a paused host's process run again (SIGCONT)."""
    record = process_of(info, host)
    if not _signal(record, signal.SIGCONT):
        raise LauncherError(f"{host} (pid {record.pid}) is not running")
    return record


def kill(info: CellInfo, host: str) -> ProcessRecord:
    """SIGKILL `host`'s process, as a host that loses power; `minborg cell restart` (or `cell
    up` once the cell is down) starts it again on its data."""
    record = process_of(info, host)
    kill_process(record, signal.SIGKILL)
    return record


LIBFAKETIME = "/usr/lib/x86_64-linux-gnu/faketime/libfaketimeMT.so.1"  # Debian's faketime


def skew_env(seconds: float) -> dict[str, str]:
    """The variables that start a process with its wall clock `seconds` off (libfaketime;
    its monotonic clock left true, as an NTP-less host's would be)."""
    if not seconds:
        return {}
    return {"LD_PRELOAD": LIBFAKETIME, "FAKETIME": f"{seconds:+g}s", "FAKETIME_DONT_FAKE_MONOTONIC": "1"}


def skew(info: CellInfo, host: str, seconds: float) -> ProcessRecord:
    """Start `host`'s process again with its clock `seconds` ahead (negative: behind; 0: on
    time again), as a host whose clock drifted: SIGKILLed (a borglet's tasks live on and are
    re-adopted), then its recorded command under libfaketime, recorded in the cell file. A
    master, scheduler or borglet; an etcd member is brought back by its cluster, not here."""
    record = process_of(info, host)
    if record.role not in (Role.MASTER, Role.SCHEDULER, Role.BORGLET) or not record.command:
        raise LauncherError(f"{host} is an etcd member: clock skew is offered on masters, schedulers and borglets")
    if seconds and not os.path.exists(LIBFAKETIME):
        raise LauncherError(f"no {LIBFAKETIME}: apt-get install -y faketime")
    if signal_process(record, 0):
        kill_process(record, signal.SIGKILL)
    env = child_env(info.workdir) | skew_env(seconds)
    started = spawn(record.role, record.name, list(record.command), record.url, Path(record.log), info.workdir, env)
    with_records(info, record.role, [started])
    return started


def _signal(record: ProcessRecord, sig: int) -> bool:
    return signal_process(record, sig)


def state_of(record: ProcessRecord) -> str:
    """"paused" for a stopped (SIGSTOP) process, else "running"."""
    return "paused" if _paused(record) else "running"


def _paused(record: ProcessRecord) -> bool:
    try:
        with open(f"/proc/{record.pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] == "T"
    except (OSError, IndexError):
        return False


def netem_available() -> str | None:
    """None when `tc` can give a link loss and latency (netem) here, else why not: this is
    tried on a namespace's loopback made for the purpose and removed again."""
    probe = "minborg-netem-probe"
    try:
        run(["ip", "netns", "add", probe])
        done = subprocess.run(
            in_netns(probe, ["tc", "qdisc", "add", "dev", "lo", "root", "netem", "delay", "1ms"]),
            capture_output=True, text=True,
        )  # fmt: skip
    except (NetnsError, OSError) as err:
        return str(err)
    finally:
        subprocess.run(["ip", "netns", "del", probe], capture_output=True)
    return None if done.returncode == 0 else f"tc netem: {done.stderr.strip()} (the kernel has no sch_netem)"
