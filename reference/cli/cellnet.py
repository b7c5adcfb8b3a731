"""`minborg cell hosts|partition|heal|pause|unpause|kill|skew`: the faults of a real network and real hosts on a cell of netns hosts (reference/launcher/netfaults.py)."""

from __future__ import annotations

from typing import Annotated

import typer

from reference.cli.common import JsonOpt, StateDirOpt, examples, handles_errors
from reference.cli.render import console, print_json
from reference.launcher import is_alive
from reference.launcher import netfaults as faults
from reference.launcher.cellfile import CellInfo

partition_app = typer.Typer(
    help="Cut hosts of a netns cell apart by packet filter (iptables in their namespaces); `cell heal` undoes it.",
    no_args_is_help=True,
)

HostArg = Annotated[str, typer.Argument(help="A host: the process it runs (etcd0, master1, scheduler0, machine2).")]


def _names(text: str | None) -> list[str]:
    return [n.strip() for n in (text or "").split(",") if n.strip()]


LossOpt = Annotated[
    float | None,
    typer.Option("--loss", help="Drop this fraction of the packets (0.3), not all: the packet filter's random "
                 "match, as this kernel has no netem. Latency is not offered on netns hosts."),
]  # fmt: skip


def _cut(state_dir: str | None, what: str, make: faults.Cuts, as_json: bool, loss: float | None = None) -> None:
    faults.check_loss(loss)
    info = CellInfo.load(state_dir)
    cuts = make(faults.network_of(info))
    added = faults.apply(info, cuts, loss)
    what += f", {loss:.0%} of packets dropped" if loss else ""
    if as_json:
        print_json({"fault": what, "cuts": sorted([c.src, c.dst] for c in cuts), "rules": added})
        return
    console.print(f"cell {info.cell}: {what}: {len(cuts)} one-way cut(s), {added} packet filter rule(s); "
                  "`minborg cell heal` removes them")  # fmt: skip


@partition_app.command("isolate", epilog=examples("minborg cell partition isolate master0"))
@handles_errors
def isolate(
    host: HostArg,
    keep_this_host: Annotated[
        bool, typer.Option("--keep-this-host", help="Leave its link to this host (the command line, Sigma) open.")
    ] = False,
    loss: LossOpt = None,
    state_dir: StateDirOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Cut HOST from every other host of the cell, both ways (and from this host, unless --keep-this-host)."""
    _cut(state_dir, f"{host} isolated", lambda net: faults.isolate(net, host, from_this_host=not keep_this_host),
         as_json, loss)  # fmt: skip


@partition_app.command("split", epilog=examples(
    "minborg cell partition split etcd0,master0 --from etcd1,etcd2,master1,master2",
    "minborg cell partition split master1 --from machine0,machine1,machine2",
    "minborg cell partition split master0 --one-way",
))  # fmt: skip
@handles_errors
def split(
    side: Annotated[str, typer.Argument(help="Hosts on one side, comma separated.")],
    other: Annotated[
        str | None, typer.Option("--from", help="Hosts on the other side (default: every other host of the cell).")
    ] = None,
    one_way: Annotated[bool, typer.Option("--one-way", help="Drop only what SIDE sends to the other side.")] = False,
    loss: LossOpt = None,
    state_dir: StateDirOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Cut the hosts of SIDE from the others (a minority from a majority, a replica from its borglets)."""
    hosts, rest = _names(side), _names(other)
    what = f"{','.join(hosts)} cut from {','.join(rest) or 'the rest'}" + (" one way" if one_way else "")
    _cut(state_dir, what, lambda net: faults.split(net, hosts, rest, one_way=one_way), as_json, loss)


@partition_app.command("bridge", epilog=examples("minborg cell partition bridge", "minborg cell partition bridge --via etcd2,master2"))
@handles_errors
def bridge(
    via: Annotated[
        str | None, typer.Option("--via", help="The hosts in the middle (default: the middle etcd member and master).")
    ] = None,
    state_dir: StateDirOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Split the etcd members and masters in two halves that only the hosts in the middle reach both of."""
    middle = _names(via)
    _cut(state_dir, f"bridge via {','.join(middle) or 'the middle hosts'}", lambda net: faults.bridge(net, middle), as_json)


@handles_errors
def heal(state_dir: StateDirOpt = None, as_json: JsonOpt = False) -> None:
    """Remove every packet filter rule of `cell partition` and continue every paused host."""
    info = CellInfo.load(state_dir)
    removed, continued = faults.heal(info)
    if as_json:
        print_json({"rules_removed": removed, "continued": continued})
        return
    console.print(f"cell {info.cell} healed: {removed} rule(s) removed"
                  + (f", {', '.join(continued)} continued" if continued else ""))  # fmt: skip


@handles_errors
def pause(host: HostArg, state_dir: StateDirOpt = None) -> None:
    """Freeze HOST's process (SIGSTOP): its sockets stay open and nothing answers, as a hung host."""
    record = faults.pause(CellInfo.load(state_dir), host)
    console.print(f"{host} paused (pid {record.pid}); `minborg cell unpause {host}` or `cell heal` continues it")


@handles_errors
def unpause(host: HostArg, state_dir: StateDirOpt = None) -> None:
    """Continue a paused host's process (SIGCONT)."""
    record = faults.unpause(CellInfo.load(state_dir), host)
    console.print(f"{host} continued (pid {record.pid})")


@handles_errors
def kill(host: HostArg, state_dir: StateDirOpt = None) -> None:
    """SIGKILL HOST's process, as a host losing power; `minborg cell restart` starts it again on its data."""
    record = faults.kill(CellInfo.load(state_dir), host)
    console.print(f"{host} killed (pid {record.pid}); `minborg cell restart` starts it again")


@handles_errors
def skew(
    host: HostArg,
    seconds: Annotated[float, typer.Argument(help="How far ahead its clock runs (negative: behind; 0: on time).")],
    state_dir: StateDirOpt = None,
) -> None:
    """Start HOST's process again with its clock SECONDS off (faketime): a master, scheduler or borglet."""
    record = faults.skew(CellInfo.load(state_dir), host, seconds)
    console.print(f"{host} started again (pid {record.pid})"
                  + (f" with its clock {seconds:+g} s off; `minborg cell skew {host} 0` puts it back" if seconds else ""))  # fmt: skip


@handles_errors
def hosts(state_dir: StateDirOpt = None, as_json: JsonOpt = False) -> None:
    """Each host of a netns cell: its namespace, address, process and the fault rules on it."""
    info = CellInfo.load(state_dir)
    net = faults.network_of(info)
    rules = faults.rules(info)
    procs = {p.name: p for p in info.processes}
    rows = [
        {"host": h.name, "netns": h.netns, "address": h.address,
         "pid": procs[h.name].pid if h.name in procs else None,
         "state": faults.state_of(procs[h.name]) if h.name in procs and is_alive(procs[h.name]) else "stopped",
         "rules": rules.get(h.name, [])}
        for h in net.hosts
    ]  # fmt: skip
    if as_json:
        print_json({"bridge": net.bridge, "subnet": net.subnet, "this_host": net.gateway, "hosts": rows})
        return
    console.print(f"cell {info.cell}: bridge {net.bridge} {net.subnet}, this host {net.gateway}", markup=False)
    for r in rows:
        console.print(f"  {r['host']:<12} {r['address']:<15} {r['netns']:<28} {r['state']:<8} "
                      f"{len(r['rules'])} rule(s)", markup=False)  # fmt: skip


def register(cell_app: typer.Typer) -> None:
    """Add these commands to `minborg cell`."""
    cell_app.add_typer(partition_app, name="partition")
    cell_app.command("heal", epilog=examples("minborg cell heal"))(heal)
    cell_app.command("pause", epilog=examples("minborg cell pause etcd1"))(pause)
    cell_app.command("unpause", epilog=examples("minborg cell unpause etcd1"))(unpause)
    cell_app.command("kill", epilog=examples("minborg cell kill master0"))(kill)
    cell_app.command("skew", epilog=examples("minborg cell skew machine1 60", "minborg cell skew machine1 0"))(skew)
    cell_app.command("hosts", epilog=examples("minborg cell hosts", "minborg cell hosts --json"))(hosts)

