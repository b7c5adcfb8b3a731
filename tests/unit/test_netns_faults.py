"""Partitions by packet filter on a netns cell: which one-way cuts each fault makes, and the iptables rules that make them."""

from __future__ import annotations

from pathlib import Path

import pytest

from reference.launcher import netfaults as faults
from reference.launcher.cellfile import CellInfo, LauncherError
from reference.launcher.netfaults import Cut
from reference.launcher.netns import CHAIN, hook_commands, plan_network

NAMES = ["etcd0", "etcd1", "etcd2", "master0", "master1", "master2", "scheduler0", "machine0", "machine1", "machine2"]
NET = plan_network("c", NAMES)
A = {n: NET.address(n) for n in NAMES}  # etcd0 .2 ... machine2 .11
GATEWAY = NET.gateway


def test_an_isolated_host_is_cut_both_ways_from_every_other_host_and_this_one() -> None:
    cuts = faults.isolate(NET, "master0")
    others = [A[n] for n in NAMES if n != "master0"] + [GATEWAY]
    assert cuts == {Cut(A["master0"], o) for o in others} | {Cut(o, A["master0"]) for o in others}
    kept = faults.isolate(NET, "master0", from_this_host=False)
    assert Cut(A["master0"], GATEWAY) not in kept and len(kept) == len(cuts) - 2
    assert not any(A["master1"] in (c.src, c.dst) and A["master0"] not in (c.src, c.dst) for c in cuts)


def test_a_split_cuts_one_side_from_the_other_and_one_way_only_what_it_sends() -> None:
    minority, majority = ["etcd0", "master0"], ["etcd1", "etcd2", "master1", "master2"]
    cuts = faults.split(NET, minority, majority)
    assert len(cuts) == 2 * len(minority) * len(majority)
    assert Cut(A["etcd0"], A["etcd1"]) in cuts and Cut(A["etcd1"], A["etcd0"]) in cuts
    assert Cut(A["etcd0"], A["machine0"]) not in cuts  # hosts named on neither side keep their links
    one_way = faults.split(NET, minority, majority, one_way=True)
    assert Cut(A["etcd0"], A["etcd1"]) in one_way and Cut(A["etcd1"], A["etcd0"]) not in one_way
    # Without --from: the rest of the cell (not this host).
    rest = faults.split(NET, ["master1"])
    assert {c.dst for c in rest if c.src == A["master1"]} == {A[n] for n in NAMES if n != "master1"}
    with pytest.raises(LauncherError, match="both sides.*master1"):
        faults.split(NET, ["master1"], ["master1", "machine0"])
    with pytest.raises(LauncherError, match="at least one host"):
        faults.split(NET, [])


def test_a_replica_cut_from_its_borglets_alone_keeps_etcd_and_the_other_masters() -> None:
    cuts = faults.split(NET, ["master1"], ["machine0", "machine1", "machine2"])
    touched = {c.src for c in cuts} | {c.dst for c in cuts}
    assert touched == {A["master1"], A["machine0"], A["machine1"], A["machine2"]}


def test_a_bridge_leaves_the_middle_host_of_each_role_reaching_both_halves() -> None:
    cuts = faults.bridge(NET)
    pairs = {(c.src, c.dst) for c in cuts}
    assert (A["etcd0"], A["etcd2"]) in pairs and (A["master2"], A["master0"]) in pairs
    assert not any(A["etcd1"] in p or A["master1"] in p for p in pairs)  # the middle ones
    assert (A["etcd0"], A["master2"]) in pairs  # halves across roles too
    assert not any(A["machine0"] in p or A["scheduler0"] in p for p in pairs)
    via = faults.bridge(NET, ["etcd2", "master2"])
    assert not any(A["etcd2"] in (c.src, c.dst) for c in via) and Cut(A["etcd0"], A["etcd1"]) in via
    with pytest.raises(LauncherError, match="3 or more"):
        faults.bridge(plan_network("c", ["etcd0", "master0", "machine0"]))


def test_each_cut_drops_output_at_the_sender_and_input_at_the_receiver() -> None:
    rules = faults.rule_commands(NET, [{Cut(A["master0"], A["machine1"]), Cut(A["master0"], GATEWAY)}])
    prefix = ["nsenter", "--net=/run/netns/c-master0", "--", "iptables", "-w", "-A", CHAIN]
    assert sorted(rules["c-master0"]) == sorted(
        [[*prefix, "-d", A["machine1"], "-j", "DROP"], [*prefix, "-d", GATEWAY, "-j", "DROP"]]
    )
    assert rules["c-machine1"] == [
        ["nsenter", "--net=/run/netns/c-machine1", "--", "iptables", "-w", "-A", CHAIN, "-s", A["master0"], "-j", "DROP"]
    ]
    assert set(rules) == {"c-master0", "c-machine1"}  # this host has no namespace: the other end filters


def test_loss_drops_a_fraction_of_a_cuts_packets_and_refuses_a_fraction_out_of_range() -> None:
    rules = faults.rule_commands(NET, [{Cut(A["master0"], A["machine1"])}], loss=0.25)
    assert rules["c-master0"][0][-8:] == ["-m", "statistic", "--mode", "random", "--probability", "0.25", "-j", "DROP"]
    for bad in (0.0, 1.0, 1.5, -0.1):
        with pytest.raises(LauncherError, match="--loss must be a fraction between 0 and 1"):
            faults.check_loss(bad)
    faults.check_loss(None)


def test_every_namespace_sends_its_traffic_through_the_fault_chain_and_heal_empties_each() -> None:
    assert hook_commands("c-etcd0") == [
        ["nsenter", "--net=/run/netns/c-etcd0", "--", "iptables", "-w", "-N", CHAIN],
        ["nsenter", "--net=/run/netns/c-etcd0", "--", "iptables", "-w", "-A", "INPUT", "-j", CHAIN],
        ["nsenter", "--net=/run/netns/c-etcd0", "--", "iptables", "-w", "-A", "OUTPUT", "-j", CHAIN],
    ]
    healed = faults.heal_commands(NET)
    assert len(healed) == len(NAMES) and all(c[-2:] == ["-F", CHAIN] for c in healed)


def test_faults_on_a_loopback_cell_say_what_to_do_instead(tmp_path: Path) -> None:
    info = CellInfo("c", str(tmp_path), str(tmp_path), 0.0, (), (), {})
    with pytest.raises(LauncherError, match="--hosts netns"):
        faults.network_of(info)
    with pytest.raises(LauncherError, match="no host 'master7'"):
        faults.process_of(info, "master7")


def test_each_chaos_action_takes_the_arguments_an_experiment_gives_it() -> None:
    import importlib
    import inspect

    # Steps as a Chaos Toolkit experiment's JSON names them (provider: python, module, func, arguments).
    steps = [
        ("isolate_leader", {"state_dir": "s", "run": "r"}),
        ("isolate_host", {"state_dir": "s", "run": "r", "host": "master0", "loss": 0.3}),
        ("split_hosts", {"state_dir": "s", "run": "r", "side": "etcd0,master0", "other": ["etcd1", "etcd2"], "one_way": True}),
        ("cut_replica_from_borglets", {"state_dir": "s", "run": "r", "master": "master1"}),
        ("bridge", {"state_dir": "s", "run": "r", "via": "etcd1,master1"}),
        ("pause_host", {"state_dir": "s", "run": "r", "host": "etcd1"}),
        ("kill_host", {"state_dir": "s", "run": "r", "host": "machine0"}),
        ("skew_clock", {"state_dir": "s", "run": "r", "host": "machine1", "seconds": 60}),
        ("heal", {"state_dir": "s", "run": "r"}),
        ("fault_rules", {"state_dir": "s"}),
    ]
    module = importlib.import_module("chaos.netfaults")
    for func, arguments in steps:
        inspect.signature(getattr(module, func)).bind(**arguments)
