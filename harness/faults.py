"""The fault catalogue: each fault the conformance harness or the chaos experiments inject, by one name, with the spec actions it exercises.

A fault's name is the name of the harness rule (harness/fault_rules.py) and of the Chaos Toolkit
action (chaos/actions.py) that inject it, and the key it is counted under in the coverage;
its undo names the steps that end it, where it has any, counted beside it. `spec` lists the
actions of the cell spec (spec/actions.py) and of the sync protocol's spec
(spec/protocol_actions.py) that the fault and its undo exercise, in the order they happen:
what the cell must be seen doing for the run to conform.

The catalogue lives beside the harness, not in spec/: it names processes, proxies and
signals, which the spec does not model. `tests/unit/test_faults.py` holds every harness rule,
chaos action and spec action named here to one another.
"""

from __future__ import annotations

from dataclasses import dataclass

HARNESS = "harness"
CHAOS = "chaos"
#: a fault of a real network on netns hosts (chaos/netfaults.py, `minborg cell partition ...`, the
#: nemesis campaign), apart from the Toxiproxy experiments of loopback cells
NETNS = "netns"


@dataclass(frozen=True)
class Fault:
    name: str
    spec: tuple[str, ...]
    description: str
    #: the steps that end the fault, where any do (a restart, a resume, a healed link)
    undo: tuple[str, ...] = ()
    #: who injects it: HARNESS (a rule of the stateful test), CHAOS (an action of the experiments),
    #: NETNS (a fault of a real network on netns hosts)
    by: tuple[str, ...] = (HARNESS,)
    #: the other names runs recorded before events.jsonl named a fault by its name (the runs
    #: kept under reports/chaos): read as this fault (`RECORDED_AS`, chaos.events.fault_name)
    #: so that `python -m chaos.campaign soak --report-only` still judges them. Never written.
    recorded_as: tuple[str, ...] = ()


CATALOGUE: tuple[Fault, ...] = (
    Fault(
        "kill_task_process", ("fail", "restart"),
        "SIGKILL running task processes: the borglet restarts them in place; one it may not "
        "restart there fails, and comes back as a new incarnation where its policy allows.",
        by=(HARNESS, CHAOS), recorded_as=("task-kill",),
    ),
    Fault(
        "crash_borglet", ("machine_down", "lost", "restart_borglet", "machine_up"),
        "SIGKILL a borglet, its tasks left running orphaned: the cell declares the machine down "
        "and its tasks lost; restarted from what it saved, the borglet reports the tasks it "
        "cannot adopt lost, and its machine comes back up running nothing.",
        undo=("restart_borglet",),
    ),
    Fault(
        "pause_borglet", ("machine_down", "machine_up"),
        "SIGSTOP a borglet: it answers no poll, so the cell declares its machine down and its "
        "tasks lost; resumed, the machine comes back up running nothing.",
        undo=("resume_borglet",),
    ),
    Fault(
        "bounce_borglet", ("lost",),
        "Stop a borglet (its tasks killed) and start it again before its machine is declared "
        "down: it reports those tasks gone, and the cell loses them one by one.",
    ),
    Fault(
        "cut_borglet", ("drop", "machine_down", "machine_up"),
        "Disable the master-borglet proxy of the machine running most hello_world tasks, past "
        "the down threshold: syncs are lost, the machine is declared down and its tasks run "
        "elsewhere; healed, it comes back up and each task runs once.",
        undo=("heal_borglet",), by=(CHAOS,), recorded_as=("borglet-cut",),
    ),
    Fault(
        "delay_borglets", ("deliver",),
        "Add 200 ms +/- 50 ms latency on every master-borglet proxy: syncs arrive late, and no "
        "machine may be declared down for it.",
        by=(CHAOS,), recorded_as=("borglet-latency",),
    ),
    Fault(
        "add_phantom", ("machine_add", "machine_down", "machine_up", "machine_remove"),
        "Register a machine whose borglet never answers: the cell may place tasks there until "
        "it declares the machine down; a borglet started at its address then brings it back "
        "up, running nothing, and in the end it is drained and removed.",
        undo=("revive_phantom", "remove_phantom"),
    ),
    Fault(
        "add_machine", ("machine_add", "machine_remove"),
        "Add a machine with a new borglet; later drain and remove it, its borglet stopped after.",
        undo=("remove_machine",),
    ),
    Fault(
        "kill_leader", ("elect",),
        "SIGKILL the elected master: another replica must lead within the lease; the killed "
        "one is restarted as a follower.",
        undo=("restart_master",), by=(HARNESS, CHAOS), recorded_as=("leader-kill",),
    ),
    Fault(
        "cut_leader_from_etcd", ("elect",),
        "Disable the leader's master-etcd proxies: it keeps its clients but loses the store, "
        "must step down within its lease, and no write of its lands; another replica leads.",
        undo=("heal_leader_etcd",), by=(CHAOS,), recorded_as=("leader-etcd-cut",),
    ),
    Fault(
        "kill_etcd_members", ("elect",),
        "SIGKILL one etcd member (writes go on) or two of three (writes refused, stale reads "
        "and tasks served, the leader's lease lapses); restarted, writes recover.",
        undo=("restart_etcd_members",), by=(CHAOS,), recorded_as=("etcd-minority", "etcd-majority"),
    ),
    Fault(
        "partition", ("elect", "drop", "machine_down", "machine_up"),
        "On netns hosts, drop packets between hosts with the packet filter: one host isolated, "
        "a majority from a minority, two halves joined through a bridge, or one way; a master "
        "cut from the others and etcd steps down, a machine no replica reaches goes down.",
        undo=("heal",), by=(NETNS,),
    ),
    Fault(
        "pause_host", ("elect", "machine_down", "machine_up"),
        "On netns hosts, SIGSTOP one host's process (an etcd member, a master or a borglet); "
        "continued by the heal.",
        by=(NETNS,),
    ),
    Fault(
        "kill_host", ("elect", "machine_down", "lost", "machine_up"),
        "On netns hosts, SIGKILL one host's process; `cell restart` brings it back.",
        by=(NETNS,),
    ),
    Fault(
        "skew_clock", ("machine_down", "machine_up"),
        "On netns hosts, start one host's process again with its clock off (faketime); the "
        "borglet's channel says why it refuses, and nothing runs twice past the bound; the "
        "same action with 0 s puts it back on time.",
        by=(NETNS,),
    ),
)  # fmt: skip

FAULTS: dict[str, Fault] = {f.name: f for f in CATALOGUE}
#: The one alias table: a name an earlier run recorded -> the fault's name.
RECORDED_AS: dict[str, str] = {old: f.name for f in CATALOGUE for old in f.recorded_as}
#: The names a fault or its undo is counted under.
STEPS: frozenset[str] = frozenset(FAULTS) | {step for f in CATALOGUE for step in f.undo}


def injected_by(who: str) -> list[Fault]:
    """The faults HARNESS or CHAOS injects, in catalogue order."""
    return [f for f in CATALOGUE if who in f.by]
