"""Hosts of their own for a local cell (`cell up --hosts netns`): each etcd member, master
replica, scheduler process and borglet in a network namespace of its own, with an address of
its own on a Linux bridge the cell creates.

The host keeps the bridge's first address, so the command line, Sigma and the launcher reach
every process from it. Names: the namespace of process P of cell C is `C-P` (`ip netns list`
shows it); the bridge and the host ends of the veths have short names derived from those
(Linux allows 15 characters). The plan (`Network`) is pure data, recorded in the cell file;
the `ip` command lists that make and remove it are pure too and unit-tested; `ensure` and
`remove` run them. A process enters its namespace by `nsenter --net` alone (not `ip netns
exec`, which remounts /sys and with it the cgroups the borglets use).
"""

from __future__ import annotations

import ipaddress
import os
import shutil
import subprocess
import zlib
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from reference import pki
from reference.store.etcd_cluster import CLIENT_CERT, EtcdCluster

HOSTS_MODES = ("loopback", "netns")
NETNS_DIR = Path("/run/netns")  # where `ip netns add` pins a namespace
SYS_NET = Path("/sys/class/net")  # an interface of the host's namespace, when it exists
IFNAME_MAX = 15  # Linux's IFNAMSIZ less the NUL
PREFIX_LEN = 24
# One /24 per cell, from this range; a cell takes the first one no interface of the host uses.
SUBNET_BASE = ipaddress.IPv4Network("10.200.0.0/13")
# Every process has an address of its own, so each listens on the same well-known port.
ETCD_CLIENT_PORT, ETCD_PEER_PORT = 2379, 2380
MASTER_PORT = 8080
BORGLET_PORT = 7100
GUEST_IF = "eth0"  # the namespace's end of its veth
CHAIN = "MINBORG-FAULTS"  # each namespace's INPUT and OUTPUT go through it (netfaults.py)


class NetnsError(RuntimeError):
    """The namespaces, veths or bridge of a cell could not be made, found or removed."""


@dataclass(frozen=True)
class Host:
    """One process's host: its namespace, the host end of its veth, and its address."""

    name: str  # the process: etcd0, master1, scheduler0, machine2
    netns: str
    veth: str
    address: str


@dataclass(frozen=True)
class Network:
    """A cell's hosts: the bridge, its subnet, the host's own address on it (`gateway`), and
    a host per process."""

    cell: str
    bridge: str
    subnet: str
    gateway: str
    hosts: tuple[Host, ...]

    def host(self, name: str) -> Host:
        for h in self.hosts:
            if h.name == name:
                return h
        raise NetnsError(f"cell {self.cell} has no host {name!r}; its hosts: {', '.join(self.names())}")

    def address(self, name: str) -> str:
        return self.host(name).address

    def names(self) -> list[str]:
        return [h.name for h in self.hosts]

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "hosts": [asdict(h) for h in self.hosts]}

    @classmethod
    def from_json(cls, data: dict[str, Any] | None) -> Network | None:
        if not data:
            return None
        hosts = tuple(Host(**h) for h in data["hosts"])
        return cls(data["cell"], data["bridge"], data["subnet"], data["gateway"], hosts)


def _tag(text: str) -> str:
    return f"{zlib.crc32(text.encode()):08x}"


def netns_name(cell: str, process: str) -> str:
    """The namespace of `process` of `cell`: named after both (`ip netns list` shows it)."""
    return f"{cell}-{process}"


def bridge_name(cell: str) -> str:
    """The cell's bridge: `mb` and a digest of the cell's name (15 characters at most)."""
    return f"mb{_tag(cell)}"[:IFNAME_MAX]


def veth_name(cell: str, process: str) -> str:
    """The host end of a process's veth: `mv` and a digest of its namespace's name."""
    return f"mv{_tag(netns_name(cell, process))}"[:IFNAME_MAX]


def plan_network(cell: str, processes: Sequence[str], taken: Sequence[str] = ()) -> Network:
    """The cell's hosts: the first /24 of SUBNET_BASE that overlaps no network in `taken`
    (the host's own, `used_networks()`), the gateway at .1, the processes from .2 in order."""
    if len(set(processes)) != len(processes):
        raise NetnsError(f"process names repeat: {list(processes)}")
    busy = [ipaddress.ip_network(t, strict=False) for t in taken]
    subnet = next(
        (s for s in SUBNET_BASE.subnets(new_prefix=PREFIX_LEN) if not any(s.overlaps(b) for b in busy)), None
    )
    if subnet is None:
        raise NetnsError(f"no free /{PREFIX_LEN} left in {SUBNET_BASE} for cell {cell}'s bridge")
    addresses = list(subnet.hosts())
    if len(processes) + 1 > len(addresses):
        raise NetnsError(f"{len(processes)} hosts do not fit in {subnet}")
    hosts = tuple(
        Host(p, netns_name(cell, p), veth_name(cell, p), str(addresses[i + 1])) for i, p in enumerate(processes)
    )
    return Network(cell, bridge_name(cell), str(subnet), str(addresses[0]), hosts)


def in_netns(netns: str, command: Sequence[str]) -> list[str]:
    """`command` run in namespace `netns`'s network alone (its mounts and cgroups the host's)."""
    return ["nsenter", f"--net={NETNS_DIR / netns}", "--", *command]


def bridge_commands(net: Network) -> list[list[str]]:
    """The commands that make the cell's bridge with the host's address on it, and let frames
    between two of its ports through the host's filter: with br_netfilter on, each one passes
    the host's FORWARD chain, which Docker's engine sets to DROP. (The cell's own faults are
    filters inside the namespaces: netfaults.py.)"""
    return [
        ["ip", "link", "add", net.bridge, "type", "bridge"],
        ["ip", "addr", "add", f"{net.gateway}/{PREFIX_LEN}", "dev", net.bridge],
        ["ip", "link", "set", net.bridge, "up"],
        ["iptables", "-I", "FORWARD", "1", *forward_rule(net)],
    ]


def forward_rule(net: Network) -> list[str]:
    """The host's FORWARD rule that accepts what crosses the cell's bridge (`-I`/`-D`/`-C` it)."""
    return ["-i", net.bridge, "-o", net.bridge, "-m", "comment", "--comment", f"minborg cell {net.cell}", "-j", "ACCEPT"]


def host_commands(net: Network, host: Host, *, make_netns: bool = True) -> list[list[str]]:
    """The commands that give `host` its namespace (unless it exists) with its fault chain,
    its veth on the bridge, its address and its loopback (a task's health check reaches it
    at 127.0.0.1)."""
    ns = host.netns
    return [
        *([["ip", "netns", "add", ns]] if make_netns else []),
        ["ip", "link", "add", host.veth, "type", "veth", "peer", "name", GUEST_IF, "netns", ns],
        ["ip", "link", "set", host.veth, "master", net.bridge],
        ["ip", "link", "set", host.veth, "up"],
        ["ip", "-n", ns, "addr", "add", f"{host.address}/{PREFIX_LEN}", "dev", GUEST_IF],
        ["ip", "-n", ns, "link", "set", GUEST_IF, "up"],
        ["ip", "-n", ns, "link", "set", "lo", "up"],
        *(hook_commands(ns) if make_netns else []),
    ]


def hook_commands(netns: str) -> list[list[str]]:
    """The iptables commands that make the fault chain in `netns` (empty until a fault is
    injected: netfaults.py) and send its INPUT and OUTPUT through it."""
    return [
        in_netns(netns, ["iptables", "-w", "-N", CHAIN]),
        in_netns(netns, ["iptables", "-w", "-A", "INPUT", "-j", CHAIN]),
        in_netns(netns, ["iptables", "-w", "-A", "OUTPUT", "-j", CHAIN]),
    ]


def remove_commands(net: Network) -> list[list[str]]:
    """The `ip` commands that remove the cell's veths (both ends at once), namespaces and bridge."""
    return [
        *(["ip", "link", "del", h.veth] for h in net.hosts),
        *(["ip", "netns", "del", h.netns] for h in net.hosts),
        ["ip", "link", "del", net.bridge],
        ["iptables", "-D", "FORWARD", *forward_rule(net)],
    ]


def usable() -> str | None:
    """Why this host cannot make network namespaces, or None when it can."""
    if os.geteuid() != 0:
        return "--hosts netns needs root (network namespaces, veths and a bridge)"
    missing = [tool for tool in ("ip", "nsenter", "iptables") if shutil.which(tool) is None]
    if missing:
        return f"--hosts netns needs {', '.join(missing)} on PATH (iproute2, util-linux, iptables)"
    return None


def run(command: Sequence[str]) -> str:
    """Run one command; NetnsError with its stderr if it fails."""
    done = subprocess.run(list(command), capture_output=True, text=True, timeout=30)
    if done.returncode != 0:
        raise NetnsError(f"{' '.join(command)}: {done.stderr.strip() or f'exit {done.returncode}'}")
    return done.stdout


def used_networks() -> list[str]:
    """Every IPv4 network an interface of the host's namespace is on (`ip -o -4 addr`)."""
    found = []
    for line in run(["ip", "-o", "-4", "addr", "show"]).splitlines():
        parts = line.split()
        if "inet" in parts:
            found.append(parts[parts.index("inet") + 1])
    return found


def overlapping(subnet: str, taken: Sequence[str]) -> list[str]:
    """The networks of `taken` (ADDRESS/PREFIX) that overlap `subnet`."""
    mine = ipaddress.ip_network(subnet)
    return [t for t in taken if ipaddress.ip_network(t, strict=False).overlaps(mine)]


def netns_exists(netns: str) -> bool:
    return (NETNS_DIR / netns).exists()


def link_exists(name: str) -> bool:
    return (SYS_NET / name).exists()


def check_free(net: Network) -> None:
    """NetnsError naming what is in the way if another cell's namespaces or bridge hold a name."""
    taken = [h.netns for h in net.hosts if netns_exists(h.netns)]
    taken += [n for n in (net.bridge, *(h.veth for h in net.hosts)) if link_exists(n)]
    if taken:
        raise NetnsError(
            f"cell {net.cell}'s hosts are already there ({', '.join(taken)}): another cell named {net.cell} "
            "runs on netns hosts; stop it, or name this one otherwise (--cell)"
        )


def forwarding(net: Network) -> bool:
    """Whether the host's FORWARD chain holds the cell's rule."""
    return subprocess.run(["iptables", "-C", "FORWARD", *forward_rule(net)], capture_output=True).returncode == 0


def ensure(net: Network) -> list[str]:
    """Make whatever of the cell's bridge, namespaces and veths is missing (all of it for a
    new cell or one `cell down` stopped; nothing for a cell whose hosts are there); returns
    the names made."""
    made = []
    if not link_exists(net.bridge):
        clash = overlapping(net.subnet, used_networks())
        if clash:
            raise NetnsError(
                f"cell {net.cell}'s subnet {net.subnet} is now used by this host ({', '.join(clash)}; another "
                "cell's bridge?): stop that first, or start this cell anew (--fresh) on a free one"
            )
        for command in bridge_commands(net):
            run(command)
        made.append(net.bridge)
    elif not forwarding(net):
        run(["iptables", "-I", "FORWARD", "1", *forward_rule(net)])
    for host in net.hosts:
        if link_exists(host.veth) and netns_exists(host.netns):
            continue
        if link_exists(host.veth):
            run(["ip", "link", "del", host.veth])
        for command in host_commands(net, host, make_netns=not netns_exists(host.netns)):
            run(command)
        made.append(host.netns)
    return made


def remove(net: Network) -> list[str]:
    """Remove the cell's veths, namespaces and bridge (what is there); returns what failed."""
    failed = []
    for command in remove_commands(net):
        name = command[-1]
        if command[0] == "iptables":
            there = forwarding(net)
        else:
            there = netns_exists(name) if command[1] == "netns" else link_exists(name)
        if not there:
            continue
        try:
            run(command)
        except NetnsError as err:
            failed.append(str(err))
    return failed


def listening(netns: str) -> list[str]:
    """The local addresses (ADDR:PORT) of the TCP sockets listening in namespace `netns`."""
    out = run(in_netns(netns, ["ss", "-H", "-ltn"]))
    return [line.split()[3] for line in out.splitlines() if len(line.split()) > 3]


def replace_flag(command: list[str], flag: str, value: str) -> list[str]:
    """`command` with the value after `flag` replaced (the flag must be there)."""
    i = command.index(flag)
    return [*command[: i + 1], value, *command[i + 2 :]]


class NetnsEtcdCluster(EtcdCluster):
    """An EtcdCluster whose members each run in the namespace of their host, listening on its
    address (client and peer ports the same on every host); certificates name that address."""

    network: Network

    def __init__(
        self, state_dir: str | os.PathLike[str], network: Network, members: int = 3, *, tls: bool = True,
        pki_dir: str | os.PathLike[str] | None = None, etcd_binary: str | None = None,
    ) -> None:  # fmt: skip
        # base_port: the ports are not looked for on the host's loopback; all are replaced below.
        super().__init__(
            state_dir, members, host=network.gateway, base_port=ETCD_CLIENT_PORT, tls=tls, pki_dir=pki_dir,
            etcd_binary=etcd_binary,
        )
        self.network = network
        for m in self.members:
            m.client_port, m.peer_port = ETCD_CLIENT_PORT, ETCD_PEER_PORT

    @classmethod
    def on(cls, state_dir: str | os.PathLike[str], network: Network) -> NetnsEtcdCluster:
        """The cluster of a netns cell started before (its state file), on the cell's hosts."""
        cluster = cls.load(state_dir)
        cluster.network = network
        return cluster

    def member_address(self, i: int) -> str:
        return self.network.address(self.members[i].name)

    @property
    def client_urls(self) -> list[str]:
        return [f"{self.scheme}://{self.member_address(i)}:{m.client_port}" for i, m in enumerate(self.members)]

    def ensure_certificates(self) -> None:
        if not self.tls:
            return
        pki.ensure_ca(self.pki_dir)
        for i, m in enumerate(self.members):
            hosts = [self.member_address(i), "127.0.0.1", "localhost"]
            pki.ensure_issued(self.pki_dir, f"{m.name}-server", hosts=hosts, server=True, client=True)
            pki.ensure_issued(self.pki_dir, f"{m.name}-peer", hosts=hosts, server=True, client=True)
        pki.ensure_issued(self.pki_dir, CLIENT_CERT, client=True)

    def command(self, i: int, initial_state: str) -> list[str]:
        m, own = self.members[i], self.member_address(i)
        client, peer = f"{self.scheme}://{own}:{m.client_port}", f"{self.scheme}://{own}:{m.peer_port}"
        command = super().command(i, initial_state)
        for flag, value in (
            ("--listen-client-urls", client), ("--advertise-client-urls", client),
            ("--listen-peer-urls", peer), ("--initial-advertise-peer-urls", peer),
            ("--initial-cluster", ",".join(
                f"{p.name}={self.scheme}://{self.member_address(k)}:{p.peer_port}" for k, p in enumerate(self.members)
            )),
        ):  # fmt: skip
            command = replace_flag(command, flag, value)
        return in_netns(self.network.host(m.name).netns, command)
