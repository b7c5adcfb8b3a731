"""The master's reading of what the borglets say, with no I/O: a sync's body (a delta or the
whole set), what an answer's status means, whether a shard's report is taken and against
which sync's tasks (judged once, from its fence), a shard's change applied to its last report,
and how a report's facts merge into the cell.

The poller (poller.py) is the shell: it holds the locks, the clock and the connections, and
calls these. The borglet's side of the same protocol is `borglet/decisions.accept_sync`.
"""

from __future__ import annotations

import enum
from collections.abc import Collection, Iterator, Mapping
from dataclasses import dataclass, replace
from typing import Any

from reference import fastjson
from reference.master import shards
from reference.master.cell import Cell, Draft, MachineInfo, TaskInfo
from reference.master.reports import Outcome, news, usage_items
from spec.model import TaskId, TaskState

DELTA_MIN_TASKS = 64  # a machine with at least this many desired tasks gets deltas


# --- the sync -------------------------------------------------------------------------------------


def sync_body(
    *,
    master: str,
    epoch: int,
    seq: int,
    revision: int,
    desired: list[dict[str, Any]],
    ids: frozenset[str],
    base: frozenset[str] | None,
    base_seq: int,
) -> dict[str, Any]:
    """Sync `seq` of a machine: a delta on its last acknowledged sync (`base`, numbered
    `base_seq`; None when none is known) when it has at least DELTA_MIN_TASKS tasks, else the
    whole desired set."""
    body: dict[str, Any] = {"master": master, "epoch": epoch, "seq": seq, "revision": revision}
    if base is not None and len(desired) >= DELTA_MIN_TASKS:
        body["delta"] = {
            "base_seq": base_seq,
            "add": [d for d in desired if d["task_id"] not in base],
            "remove": sorted(base - ids),
        }
    else:
        body["tasks"] = desired
    return body


# --- a sync's answer ------------------------------------------------------------------------------


class Said(enum.Enum):
    NOTHING = "nothing"  # no answer, or one not understood: the next turn sends the whole set
    LATER_TERM = "later_term"  # 409 stale_epoch: the borglet has seen a newer leader
    REFUSED = "refused"  # 409 for another reason (an old seq, a bad delta base): alive, send whole
    DISTRUSTED = "distrusted"  # 401/403: alive, but it refuses this cell's signature
    REPLY = "reply"  # 200: the sync is acknowledged (the facts come in the shard's report)


@dataclass(frozen=True)
class Answer:
    said: Said
    reason: str = ""  # why it refused (REFUSED, LATER_TERM, DISTRUSTED)
    reply: dict[str, Any] | None = None  # the acknowledgement, or a removed machine's whole report (REPLY)


def read_answer(status: int, body: Any, text: str) -> Answer:
    """What a borglet's answer to a sync means; status 0 is no answer at all."""
    if status == 409:
        reason = sync_refusal(body)
        return Answer(Said.LATER_TERM if reason == "stale_epoch" else Said.REFUSED, reason)
    if status in (401, 403):
        return Answer(Said.DISTRUSTED, refusal_reason(body if isinstance(body, dict) else text.encode()))
    if status == 200 and isinstance(body, dict):
        return Answer(Said.REPLY, reply=body)
    return Answer(Said.NOTHING)


def sync_refusal(body: Any) -> str:
    """The reason a 409 names. A borglet that names none predates sequence numbers: only
    epochs fence it."""
    return str(body.get("reason") or "stale_epoch") if isinstance(body, dict) else "stale_epoch"


def refusal_reason(body: bytes | dict[str, Any]) -> str:
    """What a refusal's body says is wrong (`{"detail": [{"field", "error"}]}`), in one line."""
    try:
        doc = body if isinstance(body, dict) else fastjson.loads(body)
        detail = doc["detail"][0]
        text = f"{detail.get('field')}: {detail.get('error')}" if detail.get("field") else str(detail.get("error"))
    except (ValueError, KeyError, IndexError, TypeError, AttributeError):
        raw = body if isinstance(body, bytes) else str(body).encode()
        text = raw[:200].decode("utf-8", "replace").strip() or "no reason given"
    return text[:300]


# --- a shard's report ----------------------------------------------------------------------------


def merge_entry(entry: Mapping[str, Any], copy: tuple[int, dict[str, Any]] | None) -> tuple[int, dict[str, Any]] | None:
    """A shard's entry for one machine, a whole report or a change on the one it sent before,
    as (version, report); None when it is a change and `copy` (the leader's (version, report)
    of that shard's last) is not its base: the shard must send the machine whole."""
    version = int(entry.get("version") or 0)
    if isinstance(entry.get("report"), dict):
        return version, entry["report"]
    if copy is None or copy[0] != int(entry.get("base") or -1):
        return None
    return version, shards.apply(copy[1], entry.get("change") or {})


@dataclass(frozen=True)
class Fence:
    """The last sync the borglet applied when it made the report: the leader's epoch, its seq."""

    epoch: int
    seq: int


def fence_of(report: Mapping[str, Any]) -> Fence:
    fence = report.get("fence") if isinstance(report.get("fence"), dict) else {}
    return Fence(_count(fence.get("epoch") or report.get("epoch")), _count(fence.get("seq")))


def _count(value: Any) -> int:
    """A fence's number as a borglet's report gives it; 0 (no fence) for what is none: one
    machine's report must not raise where a whole batch of the shard's is read."""
    try:
        return int(value or 0)
    except (TypeError, ValueError, OverflowError):
        return 0


class Reading(enum.Enum):
    TAKE = "take"  # this term's: read against the tasks of the sync it says it applied
    TAKE_UNFENCED = "take_unfenced"  # an earlier term's, or a sync this leader no longer holds: no tasks to read it against
    LATER_TERM = "later_term"  # the borglet has seen a newer leader: this term's is over


def read_report(
    report: Mapping[str, Any], *, epoch: int, sent: Mapping[int, frozenset[TaskId]]
) -> tuple[Reading, frozenset[TaskId]]:
    """Whether a leader of `epoch` takes a shard's report of a machine, and the tasks it reads
    it against: those of the sync the report says the borglet applied last (`sent`: seq ->
    the tasks of each sync of the machine this leader still holds). The facts of a machine
    come by the shard's reports alone (a relayed sync's answer is an acknowledgement), so no
    report is stale against a sync's answer: one read before a newer sync was applied is read
    against the sync it names, the tasks the borglet was told to run when it was read."""
    fence = fence_of(report)
    if fence.epoch > epoch:
        return Reading.LATER_TERM, frozenset()
    if fence.epoch == epoch and (ids := sent.get(fence.seq)) is not None:
        return Reading.TAKE, ids
    return Reading.TAKE_UNFENCED, frozenset()


# --- an answer merged into the cell --------------------------------------------------------------


def reported_tasks(reply: Mapping[str, Any]) -> dict[str, str]:
    """borglet task id -> state: what the report says runs on the machine."""
    return {str(t.get("task_id")): str(t.get("state", "")) for t in reply.get("tasks", []) if isinstance(t, dict)}


@dataclass(frozen=True)
class MachineFacts:
    """What an answer says of its machine, besides its tasks."""

    usage: tuple[tuple[str, int], ...]
    isolation: str
    images: tuple[str, ...]
    reason: str  # the machine's reason ('' or its clock's skew)


def machine_facts(reply: Mapping[str, Any]) -> MachineFacts:
    return MachineFacts(
        usage=usage_items(reply.get("usage")),
        isolation=str(reply.get("isolation") or ""),
        images=tuple(sorted(str(i) for i in reply.get("images") or ())),
        reason=skew_reason(reply.get("channel_skew_s")),
    )


def skew_reason(skew_s: Any) -> str:
    """The machine's reason when its borglet obeys though its clock is off (channel.SKEW_HEADER):
    '' when it is not."""
    if not isinstance(skew_s, int | float) or not skew_s:
        return ""
    side = "ahead of" if skew_s > 0 else "behind"
    return f"clock skew: the borglet's clock is {abs(skew_s):.0f} s {side} the master's; synchronize the clocks (NTP)"


def changes_cell(outcome: Outcome, *, up: bool, write_usage: bool, reason_changed: bool) -> bool:
    """Whether an answer needs a write: a step, a task fact, a down machine that answers, the
    usage due, or a new machine reason."""
    return bool(outcome.steps or outcome.infos or not up or write_usage or reason_changed)


# Task id -> the usage a borglet last reported for it (the leader's `ShardReports.usage`).
Usage = Mapping[TaskId, tuple[tuple[str, int], ...]]


def merge(
    d: Draft,
    machine: str,
    outcome: Outcome,
    facts: MachineFacts,
    *,
    sent: Collection[TaskId],
    usage: Usage | None,
) -> None:
    """Write an answer of `machine` into the draft: it is up, its reason, the steps its task
    states map to, its tasks' facts, and with `usage` (when due) the machine's and the `sent`
    tasks' usage."""
    if not d.state.machines[machine].up:
        d.step("machine_up", machine, reason=f"machine {machine} answers again")
    if d.machine_info(machine).reason != facts.reason:
        d.machines[machine] = replace(d.machine_info(machine), reason=facts.reason)
    for action, args, reason in outcome.steps:
        task = d.state.tasks.get(args[0]) if args and isinstance(args[0], TaskId) else None
        if task is not None and (task.state is not TaskState.RUNNING or task.machine != machine):
            # Read from a cell older than the draft: a drain moved the task (same id, another
            # machine) or it ended since. What this machine says of it no longer applies; a
            # lost step here would end it where it now runs.
            continue
        d.step(action, *args, reason=reason)
    for tid, info in outcome.infos.items():
        task = d.state.tasks.get(tid)
        if task is not None and task.state is TaskState.RUNNING and task.machine == machine:
            # Keep what the cell decided (history, placement, a drain begun since the sync
            # was sent); take the borglet's facts.
            cur = d.task_info(tid)
            if not news(cur, info):
                continue  # an earlier reply's write said it already
            d.set_task_info(
                tid,
                replace(info, history=cur.history, placement=cur.placement, draining_since=cur.draining_since),
            )
    if usage is not None:
        info = d.machine_info(machine)
        if _machine_moved(info, facts):
            d.machines[machine] = replace(info, usage=facts.usage, isolation=facts.isolation, images=facts.images)
        for tid, cur, used in _usage_moved(d, sent, usage):
            d.set_task_info(tid, replace(cur, usage=used))


def usage_news(cell: Cell, machine: str, facts: MachineFacts, sent: Collection[TaskId], usage: Usage) -> bool:
    """Whether writing an answer's usage (`merge` with `usage`) would change `cell`: the
    machine's usage, isolation or images, or the usage of a running task it was sent. A
    borglet whose figures did not move since they were last written costs no write."""
    return _machine_moved(cell.machines.get(machine) or MachineInfo(), facts) or any(_usage_moved(cell, sent, usage))


def _machine_moved(info: MachineInfo, facts: MachineFacts) -> bool:
    return (info.usage, info.isolation, info.images) != (facts.usage, facts.isolation, facts.images)


def _usage_moved(cell: Cell | Draft, sent: Collection[TaskId], usage: Usage) -> Iterator[tuple[TaskId, TaskInfo, tuple[tuple[str, int], ...]]]:
    """(task, its facts, its new usage) for each running task of `sent` whose usage in
    `usage` is not the one `cell` holds: what `merge` rewrites, and all `usage_news` asks."""
    tasks = cell.state.tasks
    for tid in sent:
        task = tasks.get(tid)
        if task is not None and task.state is TaskState.RUNNING and (used := usage.get(tid)) is not None:
            cur = cell.task_info(tid)
            if cur.usage != used:
                yield tid, cur, used
