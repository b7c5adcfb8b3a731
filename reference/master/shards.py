"""Link shards, pure: which replica polls which machine, and a borglet's report as the difference from the last one sent.

Borg (Verma et al. 2015, section 3.4) partitions the borglets among the Borgmaster's replicas:
each replica runs a stateless link shard that polls its share, keeps each borglet's last full
report, and sends the elected master only what changed. The share is recomputed whenever the
set of replicas changes.

The assignment is rendezvous (highest random weight) hashing over the live replicas' names:
every replica computes the same owner for a machine from the same membership, each machine has
exactly one owner, the shares are balanced in expectation, and a replica that comes or goes
moves only the machines it gains or loses (about 1/n of them), never machines between two
replicas that both stay.

The elected master owns no machine while another replica is there (`pollers`): it is the cell's
one writer, and a share of the polls would take the core its writes need (at 10,000 machines and
5 replicas a share of 2,000 machines cost the leader about half a core). Borg recomputes the
shares at every election; so does this: the replica that steps down takes a share, the new
leader gives its own up. The leader still polls a machine handed to every replica (reach.py),
and carries syncs for no machine of its own.

A report is the borglet's `/v1/state` answer: a dict whose "tasks" is a list of task dicts
keyed by "task_id". Its difference from an earlier report lists the tasks added or changed,
the task ids removed, and the other top-level fields whose value changed; applying it to the
earlier report gives the new one (tasks in the new report's order where it matters: by id).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping
from typing import Any

Report = dict[str, Any]


def weight(replica: str, machine: str) -> int:
    """The rendezvous weight of `replica` for `machine`: a stable 64-bit hash of both names."""
    digest = hashlib.blake2b(f"{replica}\0{machine}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big")


def leader_name(leader: str) -> str:
    """The replica's name in a cell view's `leader` ("name=url"; "" with no leader)."""
    return leader.partition("=")[0]


def pollers(replicas: Iterable[str], leader: str | None = None) -> list[str]:
    """The replicas that own machines, by name: every one but `leader` while another is there
    (a lone leader polls its whole cell)."""
    names = sorted(set(replicas))
    others = [r for r in names if r != leader]
    return others or names


def owner(machine: str, replicas: Iterable[str], leader: str | None = None) -> str | None:
    """The replica that polls `machine`: `top` among the `pollers`, or None when there is no
    replica."""
    return top(machine, pollers(replicas, leader))


def top(machine: str, names: Iterable[str]) -> str | None:
    """Of `names`, the one of highest weight for `machine` (ties by name); None of none. A loop
    over many machines computes the `pollers` once and asks this of each."""
    best: tuple[int, str] | None = None
    for r in names:
        key = (weight(r, machine), r)
        if best is None or key > best:
            best = key
    return best[1] if best is not None else None


def assign(machines: Iterable[str], replicas: Iterable[str], leader: str | None = None) -> dict[str, frozenset[str]]:
    """Every replica's share: replica -> the machines it owns. Each machine is in exactly one
    share; a replica that owns nothing (the leader, while another is there) has an empty one."""
    names = sorted(set(replicas))
    shares: dict[str, set[str]] = {r: set() for r in names}
    if not names:
        return {}
    owners = pollers(names, leader)
    for m in machines:
        shares[top(m, owners)].add(m)  # type: ignore[index]
    return {r: frozenset(s) for r, s in shares.items()}


def _tasks(report: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    tasks = report.get("tasks")
    for t in tasks if isinstance(tasks, list) else ():  # a borglet's report: "tasks" may be anything
        if isinstance(t, dict) and "task_id" in t:
            out[str(t["task_id"])] = t
    return out


def diff(before: Mapping[str, Any], after: Mapping[str, Any]) -> dict[str, Any]:
    """What changed from `before` to `after`: {"tasks": [changed or new task dicts],
    "removed": [task ids], "fields": {top-level key: new value}, "dropped": [top-level keys
    gone]}; keys with nothing in them are left out, so an unchanged report diffs to {}."""
    old, new = _tasks(before), _tasks(after)
    out: dict[str, Any] = {}
    changed = [t for tid, t in new.items() if old.get(tid) != t]
    removed = sorted(tid for tid in old if tid not in new)
    fields = {k: v for k, v in after.items() if k != "tasks" and before.get(k) != v}
    dropped = sorted(k for k in before if k != "tasks" and k not in after)
    if changed:
        out["tasks"] = changed
    if removed:
        out["removed"] = removed
    if fields:
        out["fields"] = fields
    if dropped:
        out["dropped"] = dropped
    return out


def apply(before: Mapping[str, Any], change: Mapping[str, Any]) -> Report:
    """The report `change` (from `diff`) makes of `before`."""
    tasks = _tasks(before)
    for tid in change.get("removed") or []:
        tasks.pop(str(tid), None)
    for t in change.get("tasks") or []:
        if isinstance(t, dict) and "task_id" in t:
            tasks[str(t["task_id"])] = t
    out: Report = {k: v for k, v in before.items() if k != "tasks" and k not in set(change.get("dropped") or [])}
    out.update(change.get("fields") or {})
    out["tasks"] = list(tasks.values())
    return out


def same(a: Mapping[str, Any], b: Mapping[str, Any]) -> bool:
    """Whether two reports say the same (task order aside)."""
    return not diff(a, b)


def size(change: Mapping[str, Any]) -> int:
    """How many entries a difference carries: tasks changed or removed plus fields changed."""
    return sum(len(change.get(k) or ()) for k in ("tasks", "removed", "fields", "dropped"))
