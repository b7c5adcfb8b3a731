"""The leader's intake of what the link shards report: each shard's batch of reports, misses and refusals, taken, judged and merged into the cell.

A borglet's facts reach the leader by this road alone, once per change: the shard that relays
a sync takes the borglet's answer as its latest read of the machine and reports it with the
rest, and hands the leader back an acknowledgement (`poller`). Each report is read against the
tasks of the sync its fence names, kept per machine from when the sync was sent.

A shard sends the leader each machine's report whole or as a change to the last one it sent
(`accept`), the machines that missed polls and those that refused the cell. Whether a report
is taken and how it merges into the cell are `intake`'s pure functions; who may still reach a
machine is `Sightings`'; this module holds the per-machine record both sides of the poller
share (`MachineSync`, what each machine reported, where each index has a process) and writes
what the reports change, one group commit per batch. The other side, deciding and sending
each machine's sync, is `poller.Poller`, built on this one.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from typing import Any

from reference import channel
from reference.master import intake, pollclock, reports, shards
from reference.master.cache import WatchCache
from reference.master.cell import Cell, Draft, MachineInfo
from reference.master.intake import Reading
from reference.master.sightings import Sightings
from reference.master.writer import NotLeader, WriteFailed, Writer
from spec.model import TaskId

log = logging.getLogger(__name__)

# How long a removed machine that still ran processes may stay silent before they are taken
# as stopped: longer than a borglet's kill of its tasks on exit (3 s of grace, 2 s more).
DEPARTED_SILENT_S = 10.0
SENT_KEPT = 16  # syncs of a machine whose tasks are kept for the reports that will name them
# How long the leader asks a borglet that refuses every replica to stand down before it declares
# the machine down and starts its tasks elsewhere: twice the borglet's own wait
# (channel.STAND_DOWN_S), which leaves its kill grace (3 s) and a poll or two of slack, so the
# old copies are stopped before the new ones start.
STAND_DOWN_WAIT_S = 2 * channel.STAND_DOWN_S
# Tasks whose usage moved, kept for the reclaimer's next tick at most: past this, nobody is
# taking them (a cell without reservations), and the next taker looks at every task instead.
USAGE_MOVED_KEPT = 500_000


@dataclass
class MachineSync:
    """What the leader knows of one machine's syncs: when the next is due, what was last sent, the last acknowledged."""

    schedule: pollclock.Schedule = pollclock.Schedule()
    signature: frozenset[str] = frozenset()
    inflight: bool = False
    # The seq and task ids of the last sync the borglet acknowledged: the base of a delta.
    acked_seq: int = 0
    acked: frozenset[str] | None = None
    # seq -> the tasks of each sync sent, as the cell names them, while a report may still name
    # it: a report is read against the sync its fence names (`intake.read_report`).
    sent_ids: dict[int, frozenset[TaskId]] = field(default_factory=dict)
    # The seq of the sync the machine's latest report (this term's) says its borglet applied
    # last; 0: none, or a report of an earlier term or of a sync this leader no longer holds.
    reported_seq: int = 0

    def holds(self, signature: frozenset[str]) -> bool:
        """Whether the borglet holds `signature` as this leader last told it: the last sync
        it acknowledged listed exactly these tasks, and its latest report names that sync. A
        sync of the same set would change nothing on it."""
        return self.acked_seq > 0 and self.acked == signature and self.reported_seq == self.acked_seq

    def sent(self, seq: int, ids: frozenset[TaskId]) -> None:
        """Sync `seq` lists `ids` (kept until a report names a later one, SENT_KEPT at most)."""
        self.sent_ids[seq] = ids
        while len(self.sent_ids) > SENT_KEPT:
            del self.sent_ids[next(iter(self.sent_ids))]

    def applied(self, seq: int) -> None:
        """A report names sync `seq`: the borglet has moved past the earlier ones."""
        for old in [s for s in self.sent_ids if s < seq]:
            del self.sent_ids[old]


class ShardReports:
    """The reports side of the leader's poller: takes the shards' batches and keeps what each machine reported."""

    def __init__(
        self,
        cache: WatchCache,
        writer: Writer,
        *,
        epoch: int,
        interval: float,
        down_after: int,
        on_poll: Callable[[str], None] | None,
        clock: Callable[[], float],
    ) -> None:
        self.cache = cache
        self.writer = writer
        self.epoch = epoch
        self.interval = interval
        self.down_after = down_after
        self._on_poll = on_poll
        self.clock = clock
        self._machines: dict[str, MachineSync] = {}
        self._lock = threading.Lock()
        self._wake = threading.Event()  # wakes the sending side's loop: a batch may make it work
        self.usage: dict[TaskId, tuple[tuple[str, int], ...]] = {}
        # The tasks whose usage moved since the reclaimer last took them (`take_usage_moved`);
        # None before the first take, or once more moved than it may hold unread: the taker
        # then looks at every task.
        self._usage_moved: set[TaskId] | None = None
        self._usage_lock = threading.Lock()
        # machine -> {borglet task id: state} from its last reply: what really runs there.
        self._reported: dict[str, dict[str, str]] = {}
        # Per machine, the borglet task ids its last report says have run READY_AFTER_S and
        # run (rollout.is_up's confirmation); this leader's memory, not the cell's: it changes
        # once per start, and a new leader has every machine's whole report first.
        self._ready: dict[str, frozenset[str]] = {}
        self._silent_since: dict[str, float] = {}  # removed machine -> its first unanswered poll since an answer
        self._released: set[str] = set()  # borglet task ids sent at least once
        self._reported_version = 0  # moves whenever a machine's reported tasks change
        self._unreported: set[str] = set()  # up machines no shard has reported yet
        # (job, index) -> machine -> the borglet task ids of that index it reported or was sent.
        self._sites: dict[reports.IndexKey, dict[str, set[str]]] = {}
        # Which machines the sending side looks at next turn: plans changed, machines freed.
        self._pending: set[str] = set()
        # (machine, shard) -> (version, report): the base of the next change that shard sends
        # (a machine handed over is polled by several shards at once: one base each).
        self._copies: dict[tuple[str, str], tuple[int, dict[str, Any]]] = {}
        # Who reaches each machine, as the shards say (a shard sends a heartbeat every interval).
        self._sightings = Sightings(
            down_after=down_after, vouch_s=3 * interval + 2.0, grace_s=(down_after + 3) * interval + 2.0
        )
        self._refusing: dict[str, str] = {}  # machine -> why its borglet refuses the cell, as recorded
        # machine -> since when (this clock) its borglet, refusing every replica, is asked to
        # stand down (`_stand_downs`)
        self._standing_down: dict[str, float] = {}
        self.shard_batches = 0

    def accept(self, batch: dict[str, Any]) -> dict[str, Any]:
        """Take a shard's batch: whole reports and changes to the ones it sent before, and the
        machines that missed polls. Returns the machines whose change could not be applied
        (this leader lacks its base): the shard sends them whole next time."""
        shard = str(batch.get("shard", ""))
        cell = self.cache.cell()
        need_full: list[str] = []
        known: list[tuple[str, dict[str, Any], set[TaskId]]] = []
        with self._lock:
            self.shard_batches += 1
            for name, entry in (batch.get("reports") or {}).items():
                if not isinstance(entry, dict):
                    continue
                self._sightings.answered(name, shard)
                merged = intake.merge_entry(entry, self._copies.get((name, shard)))
                if merged is None:
                    # A change on a base this leader lacks: the shard sends the machine whole
                    # next time.
                    need_full.append(name)
                    self._copies.pop((name, shard), None)
                    continue
                self._copies[(name, shard)] = merged
                if name not in cell.state.machines:
                    continue
                # The borglet's word on which tasks have run their first second, from every report
                # whatever sync it answers: what runs there now (rollout.is_up).
                self._ready[name] = reports.ready_ids(merged[1])
                st = self._machines.setdefault(name, MachineSync())
                reading, ids = intake.read_report(merged[1], epoch=self.epoch, sent=st.sent_ids)
                st.reported_seq = intake.fence_of(merged[1]).seq if reading is Reading.TAKE else 0
                if st.reported_seq:
                    st.applied(st.reported_seq)
                if reading is not Reading.LATER_TERM:
                    known.append((name, merged[1], set(ids)))
        # One write for the whole batch: a round of a thousand machines is one group commit.
        changes: list[tuple[str, Callable[[Draft], None]]] = []
        for name, report, ids in known:
            try:
                change = self._answer(name, report, ids, cell)
            except Exception:
                log.exception("report of %s failed", name)
                continue
            if change is not None:
                changes.append((name, change))
        if changes:

            def batch_change(d: Draft) -> None:
                for name, change in changes:
                    try:
                        change(d)
                    except Exception:  # one machine's facts must not cost the others theirs
                        log.exception("report of %s not applied", name)

            try:
                self.writer.mutate(batch_change)
                for name, change in changes:
                    self._usage_written(name, change)
            except (NotLeader, WriteFailed) as err:
                log.info("reports of %d machine(s) not recorded: %s", len(changes), err)
        missed = {str(n): int(k) for n, k in (batch.get("missed") or {}).items() if n in cell.state.machines}
        refused = {str(n): str(r) for n, r in (batch.get("refused") or {}).items() if n in cell.state.machines}
        try:
            poll = self._reach(shard, missed, refused, cell)
        except (NotLeader, WriteFailed) as err:
            log.info("misses not recorded: %s", err)
            poll = {}
        self._wake.set()
        answer: dict[str, Any] = {"need_full": need_full, "poll": poll}
        with self._lock:
            if self._standing_down:
                answer["stand_down"] = sorted(self._standing_down)
        return answer

    def _reach(
        self, shard: str, missed: dict[str, int], refused: dict[str, str], cell: Cell
    ) -> dict[str, str]:
        """Take a shard's misses and refusals, mark down the machines nobody may reach
        (`Sightings.judge`) and return the machines handed to this shard beyond its share:
        name -> borglet address."""
        with self._lock:
            verdicts = self._sightings.judge(
                shard, missed, refused, machines=cell.state.machines, replicas=cell.replicas, now=self.clock(),
                leader=shards.leader_name(cell.leader),
            )
        for name, reason in refused.items():
            self._note_refusal(name, reason)
        for name, verdict in verdicts.items():
            if verdict.down:
                self._mark_down(name, verdict.reason)
        for name, why in self._stand_downs(refused, cell).items():
            self._mark_down(name, why)
        return {
            n: cell.machines[n].address
            for n, v in verdicts.items()
            if shard in v.pollers[1:] and n in cell.machines and cell.machines[n].address
        }

    def _stand_downs(self, refused: dict[str, str], cell: Cell) -> dict[str, str]:
        """Which borglets are asked to stand down, and which machines to declare down now
        (name -> reason).

        A borglet refused by every replica that polls it (a second replica's signature tried
        too) while most of the cell's machines answer is the one at fault: a key that is not
        the cell's. No master can tell it to stop its tasks, so it is asked to stop them itself
        (`channel.StandDown`, the header the shards add), and the machine is declared down
        `STAND_DOWN_WAIT_S` later, once they are stopped: its tasks then start elsewhere and
        none runs twice. When half the cell's machines or more refuse, the fault is more likely
        the masters' (their key): nobody is asked, and a machine asked before is asked no more;
        the machines stay up, their tasks unmanaged but not stopped."""
        now = self.clock()
        with self._lock:
            vouching = self._sightings.vouching(now, cell.replicas)
            for name in [*refused, *self._standing_down]:
                if name not in cell.state.machines or not self._sightings.refused_by_all(name, vouching):
                    self._standing_down.pop(name, None)
                else:
                    self._standing_down.setdefault(name, now)
            refusing = sum(1 for n in self._refusing if n in cell.state.machines)
            if self._standing_down and 2 * refusing >= len(cell.state.machines):
                log.warning(
                    "%d of %d machines refuse the cell: not asking any to stand down (the masters' key may be at fault)",
                    refusing, len(cell.state.machines),
                )  # fmt: skip
                self._standing_down.clear()
            due = [n for n, since in self._standing_down.items() if now - since >= STAND_DOWN_WAIT_S]
            whys = {n: self._refusing.get(n, "") for n in due}
        return {
            n: f"its borglet refused every replica for {STAND_DOWN_WAIT_S:.0f} s and was asked to stop its tasks "
            f"(the refusal: {why or 'unknown'}): starting them elsewhere"
            for n, why in whys.items()
        }

    def _note_refusal(self, name: str, reason: str) -> None:
        """Show on the machine why its borglet refuses the cell (once per reason). The machine
        answered: it is not down, and its tasks are not started elsewhere, unless its borglet
        refuses every replica and stands down (`_stand_downs`, docs/decisions.md)."""
        with self._lock:
            if self._refusing.get(name) == reason:
                return
            self._refusing[name] = reason
        text = f"the borglet refuses this cell's requests: {reason}"
        log.warning("machine %s: %s", name, text)

        def change(d: Draft) -> None:
            if name in d.state.machines:
                d.machines[name] = replace(d.machine_info(name), reason=text)

        self.writer.mutate(change)

    def _mark_down(self, name: str, reason: str) -> None:
        m = self.cache.cell().state.machines.get(name)
        if m is None or not m.up:
            return
        log.warning("machine %s: %s: marking it down", name, reason)  # loadtests count this line

        def change(d: Draft) -> None:
            if name in d.state.machines and d.state.machines[name].up:
                d.step("machine_down", name, reason=reason)
                d.machines[name] = replace(d.machine_info(name), reason=reason)

        self.writer.mutate(change)

    def _departed_missed(self, name: str) -> None:
        """A relayed sync of removed machine `name` got no answer. Gone silent for longer than
        any kill takes, it holds nothing back any more, as a down machine."""
        with self._lock:
            st = self._machines.setdefault(name, MachineSync())
            st.schedule = pollclock.missed(st.schedule)
            if not pollclock.is_down(st.schedule, self.down_after):
                return
            now = self.clock()
            since = self._silent_since.setdefault(name, now)
            if now - since >= DEPARTED_SILENT_S:
                self._silent_since.pop(name, None)
                gone = self._reported.pop(name, None) or {}
                self._site(name, (), {*gone, *st.signature})
                st.signature = frozenset()
                self._reported_version += 1

    def ready(self, machine: str | None, borglet_id: str) -> bool | None:
        """Whether `machine`'s borglet last reported `borglet_id` (one placement of a task)
        running for READY_AFTER_S (rollout.Ready); None while this leader has no report of the
        machine yet (a new term's first moments: the caller estimates then)."""
        with self._lock:
            said = self._ready.get(machine) if machine is not None else None
            return None if said is None else borglet_id in said

    def _take_usage(self, usage: dict[TaskId, tuple[tuple[str, int], ...]]) -> None:
        """Keep a report's usage, noting the tasks whose figures moved."""
        known = self.usage
        moved = [tid for tid, used in usage.items() if known.get(tid) != used]
        if not moved:
            return
        known.update(usage)
        with self._usage_lock:
            if self._usage_moved is not None:
                self._usage_moved.update(moved)
                if len(self._usage_moved) > USAGE_MOVED_KEPT:
                    self._usage_moved = None  # nobody takes them: the next taker walks every task

    def take_usage_moved(self) -> set[TaskId] | None:
        """The tasks whose usage moved since the last call (None: more than could be kept, or
        the first call: look at every task), and start counting afresh."""
        with self._usage_lock:
            moved, self._usage_moved = self._usage_moved, set()
        return moved

    def _usage_written(self, name: str, change: Callable[[Draft], None]) -> None:
        if getattr(change, "writes_usage", False):
            with self._lock:
                st = self._machines[name]
                st.schedule = pollclock.usage_written(st.schedule, self.clock())

    def _answer(
        self, name: str, reply: dict[str, Any], ids: set[TaskId], cell: Cell | None = None
    ) -> Callable[[Draft], None] | None:
        """What an answer of `name` changes in the cell, as a change for the writer (None:
        nothing); the change's `writes_usage` says whether it writes the usage. `cell`: the
        view to map it on (a batch's answers share the view the batch was read against: one
        view for the batch, not one built for each answer while the watch applies writes)."""
        with self._lock:
            st = self._machines[name]
            st.schedule = pollclock.answered(st.schedule)
            write_usage = pollclock.usage_due(st.schedule, self.clock())
        self._record_report(name, reply)
        with self._lock:
            self._silent_since.pop(name, None)
            self._refusing.pop(name, None)
            self._standing_down.pop(name, None)
        cell = self.cache.cell() if cell is None else cell
        outcome = reports.map_reply(cell, name, reply, ids)
        self._take_usage(outcome.usage)
        m = cell.state.machines.get(name)
        if m is None:
            return None
        facts = intake.machine_facts(reply)
        reason_changed = cell.machines.get(name, MachineInfo()).reason != facts.reason
        # Usage due but unchanged since it was written: nothing to write for it (it is looked
        # at again with the next answer, until it moves).
        write_usage = write_usage and intake.usage_news(cell, name, facts, ids, self.usage)
        if not intake.changes_cell(outcome, up=m.up, write_usage=write_usage, reason_changed=reason_changed):
            return None
        usage = self.usage if write_usage else None

        def change(d: Draft) -> None:
            intake.merge(d, name, outcome, facts, sent=ids, usage=usage)

        change.writes_usage = write_usage  # type: ignore[attr-defined]
        return change

    def _record_report(self, name: str, reply: dict[str, Any]) -> None:
        reported = intake.reported_tasks(reply)
        with self._lock:
            before = self._reported.get(name)
            if before != reported:
                if before is None:
                    self._pending.add(name)  # known now: its first sync may go
                    self._unreported.discard(name)
                before = before or {}
                self._reported[name] = reported
                self._reported_version += 1
                new = [t for t in reported if t not in before]
                self._released.update(new)  # seen running: never taken back
                st = self._machines.get(name)
                sent = st.signature if st is not None else frozenset()
                self._site(name, new, [t for t in before if t not in reported and t not in sent])

    def _sites_sent(self, name: str, before: frozenset[str], after: frozenset[str]) -> None:
        """A sync of `after` replaces `before` as what `name` was last sent (under the lock)."""
        if before is after:
            return
        reported = self._reported.get(name, {})
        self._site(name, after - before, [t for t in before - after if t not in reported])

    def _site(self, name: str, added: Iterable[str], removed: Iterable[str]) -> None:
        """Keep `_sites`: where each index has a process reported or sent (under the lock)."""
        for tid in added:
            if (parsed := reports.parse_borglet_task_id(tid)) is not None:
                self._sites.setdefault((parsed[0], parsed[1]), {}).setdefault(name, set()).add(tid)
        for tid in removed:
            if (parsed := reports.parse_borglet_task_id(tid)) is None:
                continue
            key = (parsed[0], parsed[1])
            on = self._sites.get(key, {})
            if (tids := on.get(name)) is not None:
                tids.discard(tid)
                if not tids:
                    del on[name]
                    if not on:
                        del self._sites[key]
