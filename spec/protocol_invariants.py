"""The named invariants of the sync protocol, checked on every state and every step.

They read the ghost history (every start and every kill, per machine) and the committed
history; no action reads either. Same shape as spec/invariants.py: a state check returns one
message per violation, a step check sees (before, step, after).
"""

from __future__ import annotations

from collections import Counter

from .invariants import Invariant
from .protocol_model import NOWHERE, Inc, Phase, ProtocolState, inc_name


def incarnation_started_at_most_once(s: ProtocolState) -> list[str]:
    if len({x for x, _ in s.ghost.started}) == len(s.ghost.started):
        return []
    starts = Counter(x for x, _ in s.ghost.started)
    return [
        f"{inc_name(x)} was started {n} times (on {', '.join(f'm{m}' for y, m in s.ghost.started if y == x)})"
        for x, n in sorted(starts.items())
        if n > 1
    ]


def killed_incarnation_never_starts_again(before: ProtocolState, step: object, after: ProtocolState) -> list[str]:
    if after.ghost.started == before.ghost.started:
        return []
    new = Counter(after.ghost.started) - Counter(before.ghost.started)
    killed = {x for x, _ in before.ghost.killed}
    return [f"{inc_name(x)} starts on m{m} after it was killed" for x, m in sorted(new) if x in killed]


def kill_revision(s: ProtocolState, x: Inc) -> int | None:
    """The first revision at which incarnation x, once desired, is no longer desired."""
    index, incarnation = x
    was_desired = False
    for rev, cell in enumerate(s.history):
        slot = cell[index]
        here = slot.desired and slot.incarnation == incarnation
        if was_desired and not here:
            return rev
        was_desired = was_desired or here
    return None


def one_process_per_index(s: ProtocolState) -> list[str]:
    """Two processes of one index run at once only inside the partition window.

    The window of an older incarnation closes when its borglet has applied a sync at or past
    the revision that stopped wanting it; after that it may still be stopping (its kill in
    progress), never running.
    """
    out = []
    running: dict[int, list[tuple[Inc, int, Phase]]] = {}
    for m, b in enumerate(s.borglets):
        for x, phase in b.tasks:
            if phase is not Phase.ENDED:
                running.setdefault(x[0], []).append((x, m, phase))
    for procs in running.values():
        if len({x for x, _, _ in procs}) < 2:
            continue
        newest = max(x[1] for x, _, _ in procs)
        for x, m, phase in procs:
            gone = kill_revision(s, x)
            if x[1] < newest and phase is Phase.RUNNING and gone is not None \
                    and s.borglets[m].fence.top_revision >= gone:
                out.append(
                    f"{inc_name(x)} still runs on m{m}, whose borglet applied rev"
                    f"{s.borglets[m].fence.top_revision} (not desired since rev{gone}), beside a newer incarnation"
                )
    return out


def one_slot_one_machine(s: ProtocolState) -> list[str]:
    """Committed state is well formed: a desired index is on a machine, an undesired one on none."""
    return [
        f"index {i}: desired={slot.desired} but machine={slot.machine}"
        for i, slot in enumerate(s.cell)
        if slot.desired != (slot.machine != NOWHERE)
    ]


INVARIANTS: tuple[Invariant, ...] = (
    Invariant(
        "incarnation_started_at_most_once",
        "An incarnation's process is started at most once, ever, on any machine.",
        state_check=incarnation_started_at_most_once,  # type: ignore[arg-type]
    ),
    Invariant(
        "killed_incarnation_never_starts_again",
        "An incarnation a borglet killed as not desired is never started again.",
        step_check=killed_incarnation_never_starts_again,  # type: ignore[arg-type]
    ),
    Invariant(
        "one_process_per_index",
        "Two processes of one task index run at once only while the older one's borglet has "
        "not yet applied a sync at or past the revision that stopped wanting it.",
        state_check=one_process_per_index,  # type: ignore[arg-type]
    ),
    Invariant(
        "committed_slot_well_formed",
        "In etcd, a desired task index is placed on one machine and an undesired one on none.",
        state_check=one_slot_one_machine,  # type: ignore[arg-type]
    ),
)

BY_NAME: dict[str, Invariant] = {i.name: i for i in INVARIANTS}


def violations(before: ProtocolState | None, step: object, after: ProtocolState,
               invariants: tuple[Invariant, ...] = INVARIANTS, states: bool = True) -> list[tuple[str, str]]:
    """(invariant name, message) for every invariant the step into `after` breaks, and (with
    `states`) every one the state `after` breaks."""
    out = [(inv.name, msg) for inv in invariants if states and inv.state_check is not None
           for msg in inv.state_check(after)]  # type: ignore[arg-type]
    if before is not None:
        out += [(inv.name, msg) for inv in invariants if inv.step_check is not None
                for msg in inv.step_check(before, step, after)]  # type: ignore[arg-type]
    return out
