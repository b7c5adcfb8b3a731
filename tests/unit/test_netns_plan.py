"""A netns cell's hosts as planned: names, addresses, the `ip` commands that make and remove them, and etcd's command on them."""

from __future__ import annotations

import ipaddress
from pathlib import Path

import pytest

from reference.launcher import netns
from reference.launcher.cellfile import CellInfo
from reference.launcher.netns import NetnsError, Network, plan_network

NAMES = ["etcd0", "etcd1", "etcd2", "master0", "master1", "master2", "scheduler0", "machine0", "machine1"]


def test_names_follow_the_cell_and_the_process_and_fit_linux_interface_names() -> None:
    net = plan_network("a-rather-long-cell-name", NAMES)
    assert [h.netns for h in net.hosts] == [f"a-rather-long-cell-name-{n}" for n in NAMES]
    links = [net.bridge, *(h.veth for h in net.hosts)]
    assert all(len(name) <= netns.IFNAME_MAX for name in links)
    assert len(set(links)) == len(links)
    # Two cells never share a bridge or a veth name; one cell always gets the same ones.
    other = plan_network("b", NAMES)
    assert not set(links) & {other.bridge, *(h.veth for h in other.hosts)}
    assert plan_network("a-rather-long-cell-name", NAMES) == net


def test_addresses_are_the_gateway_then_each_process_in_order_on_a_free_subnet() -> None:
    net = plan_network("c", NAMES)
    assert net.subnet == "10.200.0.0/24" and net.gateway == "10.200.0.1"
    assert [h.address for h in net.hosts] == [f"10.200.0.{i}" for i in range(2, 2 + len(NAMES))]
    assert net.address("master1") == "10.200.0.6"
    # A subnet the host already uses (another cell's bridge, a LAN) is skipped.
    moved = plan_network("c", NAMES, taken=["10.200.0.1/24", "192.168.1.7/24", "10.200.1.9/16"])
    assert ipaddress.ip_network(moved.subnet).overlaps(ipaddress.ip_network("10.200.0.0/16")) is False
    assert moved.subnet == "10.201.0.0/24"


def test_a_stopped_cell_whose_subnet_another_took_is_told_so() -> None:
    assert netns.overlapping("10.200.0.0/24", ["10.200.0.1/24", "192.168.1.7/24", "10.0.0.0/8"]) == [
        "10.200.0.1/24", "10.0.0.0/8"
    ]
    assert netns.overlapping("10.200.3.0/24", ["10.200.0.1/24"]) == []


def test_a_plan_refuses_repeated_names_and_too_many_hosts_and_names_an_unknown_host() -> None:
    with pytest.raises(NetnsError, match="repeat"):
        plan_network("c", ["etcd0", "etcd0"])
    with pytest.raises(NetnsError, match="do not fit"):
        plan_network("c", [f"machine{i}" for i in range(254)])
    with pytest.raises(NetnsError, match="no host 'master9'.*etcd0"):
        plan_network("c", NAMES).host("master9")


def test_the_commands_make_a_bridge_a_namespace_a_veth_and_an_address_per_host_and_remove_them() -> None:
    net = plan_network("c", ["master0", "machine0"])
    assert netns.bridge_commands(net) == [
        ["ip", "link", "add", net.bridge, "type", "bridge"],
        ["ip", "addr", "add", "10.200.0.1/24", "dev", net.bridge],
        ["ip", "link", "set", net.bridge, "up"],
        # What crosses the bridge passes the host's FORWARD chain (br_netfilter): let it.
        ["iptables", "-I", "FORWARD", "1", "-i", net.bridge, "-o", net.bridge,
         "-m", "comment", "--comment", "minborg cell c", "-j", "ACCEPT"],
    ]  # fmt: skip
    m = net.host("master0")
    made = netns.host_commands(net, m)
    assert made[0] == ["ip", "netns", "add", "c-master0"]
    assert ["ip", "link", "add", m.veth, "type", "veth", "peer", "name", "eth0", "netns", "c-master0"] in made
    assert ["ip", "link", "set", m.veth, "master", net.bridge] in made
    assert ["ip", "-n", "c-master0", "addr", "add", "10.200.0.2/24", "dev", "eth0"] in made
    assert ["ip", "-n", "c-master0", "link", "set", "lo", "up"] in made  # tasks' health checks
    # A namespace that outlived its veth gets a new veth, not a second namespace.
    assert ["ip", "netns", "add", "c-master0"] not in netns.host_commands(net, m, make_netns=False)
    removed = netns.remove_commands(net)
    # Veths first (both ends go at once), then namespaces, the bridge last.
    assert removed == [
        ["ip", "link", "del", m.veth], ["ip", "link", "del", net.host("machine0").veth],
        ["ip", "netns", "del", "c-master0"], ["ip", "netns", "del", "c-machine0"],
        ["ip", "link", "del", net.bridge],
        ["iptables", "-D", "FORWARD", *netns.forward_rule(net)],
    ]  # fmt: skip


def test_a_process_enters_its_network_namespace_alone() -> None:
    # nsenter --net, not `ip netns exec` (which remounts /sys and with it the cgroups).
    assert netns.in_netns("c-machine0", ["python", "-m", "x"]) == [
        "nsenter", "--net=/run/netns/c-machine0", "--", "python", "-m", "x"
    ]


def test_the_cell_file_records_each_processs_host_and_address(tmp_path: Path) -> None:
    net = plan_network("c", NAMES)
    info = CellInfo("c", str(tmp_path), str(tmp_path), 0.0, (), (), {}, network=net)
    info.save()
    back = CellInfo.load(tmp_path)
    assert back.network == net and back.address_of("machine1") == "10.200.0.10"
    assert Network.from_json(info.to_json()["network"]) == net
    loopback = CellInfo("c", str(tmp_path), str(tmp_path), 0.0, (), (), {})
    assert "network" not in loopback.to_json() and loopback.address_of("machine1") is None


def test_etcd_members_listen_advertise_and_peer_on_their_own_hosts(tmp_path: Path) -> None:
    net = plan_network("c", ["etcd0", "etcd1", "etcd2", "master0"])
    cluster = netns.NetnsEtcdCluster(tmp_path, net, 3, tls=False, etcd_binary="/usr/bin/etcd")
    assert cluster.client_urls == ["http://10.200.0.2:2379", "http://10.200.0.3:2379", "http://10.200.0.4:2379"]
    command = cluster.command(1, "new")
    assert command[:3] == ["nsenter", "--net=/run/netns/c-etcd1", "--"]

    def flag(name: str) -> str:
        return command[command.index(name) + 1]

    assert flag("--listen-client-urls") == flag("--advertise-client-urls") == "http://10.200.0.3:2379"
    assert flag("--listen-peer-urls") == flag("--initial-advertise-peer-urls") == "http://10.200.0.3:2380"
    assert flag("--initial-cluster") == (
        "etcd0=http://10.200.0.2:2380,etcd1=http://10.200.0.3:2380,etcd2=http://10.200.0.4:2380"
    )
    assert "127.0.0.1" not in " ".join(command)


def test_up_names_what_netns_hosts_cannot_be_combined_with_before_making_anything(tmp_path: Path) -> None:
    from reference import launcher
    from reference.launcher import LauncherError

    with pytest.raises(LauncherError, match="--hosts must be one of loopback, netns, not 'vm'"):
        launcher.up(tmp_path / "a", hosts="vm")
    with pytest.raises(LauncherError, match="--hosts netns cannot be combined with --hollow, --runtime docker"):
        launcher.up(tmp_path / "b", hosts="netns", hollow=2, runtime="docker")
    assert not (tmp_path / "a").exists() and not (tmp_path / "b").exists()
