"""The sync protocol model: each rule of the borglet as an action test, then the explorer's
verdicts (the old rules fail with a short trace, the new rules hold exhaustively), symmetry
reduction and pruning judged by the verdicts they keep as well as the states they save."""

from __future__ import annotations

import pytest

from spec.protocol_actions import (
    ACTIONS,
    Step,
    accepts,
    apply_sync,
    commit_kill,
    commit_place,
    deliver,
    drop_tombstone,
    elect,
    prune,
    restart_borglet,
    send_sync,
    start_next,
    stop_finished,
)
from spec.protocol_explore import explore, main, report
from spec.protocol_invariants import (
    incarnation_started_at_most_once,
    killed_incarnation_never_starts_again,
    one_process_per_index,
)
from spec.protocol_model import (
    EPOCH_FENCE_WITH_GC_RULE,
    NEW_RULES,
    OLD_RULES,
    REVISION_FENCE_WITH_FREE_GC,
    Borglet,
    Bounds,
    Fence,
    Ghost,
    Phase,
    ProtocolState,
    Sync,
    initial_state,
)
from spec.protocol_symmetry import canonical, permute

B = Bounds(machines=2, indices=1, incarnations=2, epochs=2, syncs_per_epoch=3, in_flight=2)
X = (0, 0)  # task index 0, incarnation 0
Y = (0, 1)

# The scopes the tests explore exhaustively; tox runs a larger one (see tox.ini).
SMALL = Bounds(machines=2, indices=1, incarnations=2, epochs=1, syncs_per_epoch=2, in_flight=2)
# Two, because one with both a leader change and enough syncs for tombstones to be dropped
# takes minutes: one sync per epoch over two epochs, and three syncs in one epoch.
NEW_SCOPES = (
    Bounds(machines=2, indices=1, incarnations=2, epochs=2, syncs_per_epoch=1, in_flight=2),
    Bounds(machines=2, indices=1, incarnations=2, epochs=1, syncs_per_epoch=3, in_flight=2),
)


def placed() -> ProtocolState:
    """0#0 placed on m0 at revision 1."""
    s = commit_place(initial_state(2, 1), 0, 0, bounds=B)
    assert s is not None
    return s


def with_borglet(s: ProtocolState, b: Borglet, machine: int = 0) -> ProtocolState:
    return s.with_borglet(machine, b)


def test_every_action_is_documented():
    for name, fn in ACTIONS.items():
        doc = fn.__doc__ or ""
        assert "Guard:" in doc and "Effect:" in doc, name


# --- rule 1: the fence -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("fence", "msg", "new", "old"),
    [
        # (epoch, seq, revision, top) applied; sync (epoch, seq, revision)
        (Fence(1, 2, 3, 3), (1, 3, 3), True, True),  # next seq, same revision
        (Fence(1, 2, 3, 3), (1, 2, 3), False, True),  # a duplicate: same (epoch, seq)
        (Fence(1, 2, 3, 3), (1, 1, 3), False, True),  # an older seq delivered late
        (Fence(1, 2, 3, 3), (1, 4, 2), False, True),  # newer seq, older revision (lagging view)
        (Fence(1, 2, 3, 3), (2, 1, 3), True, True),  # new epoch restarts seq
        (Fence(1, 2, 3, 3), (2, 1, 2), False, True),  # new leader whose view lags what was applied
        (Fence(2, 1, 3, 3), (1, 9, 4), False, False),  # a deposed leader's epoch
    ],
)
def test_fence(fence, msg, new, old):
    sync = Sync(msg[0], msg[1], msg[2], 0, ())
    assert accepts(NEW_RULES, fence, sync) is new
    assert accepts(OLD_RULES, fence, sync) is old


def test_refused_sync_changes_nothing_but_is_consumed():
    b = Borglet(fence=Fence(1, 2, 3, 3), tasks=((X, Phase.RUNNING),))
    late = Sync(1, 1, 1, 0, ())
    s = with_borglet(placed(), b).with_(network=(late,))
    after = deliver(s, late, rules=NEW_RULES)
    assert after.borglets == s.borglets and after.network == ()
    assert deliver(after, late, rules=NEW_RULES) is None  # not in flight any more


# --- rule 2: applying ------------------------------------------------------------------------


def test_apply_queues_unknown_restores_tombstoned_kills_and_forgets():
    z, w = (1, 0), (2, 0)
    b = Borglet(
        fence=Fence(1, 1, 2, 2),
        tasks=((X, Phase.RUNNING), (z, Phase.ENDED)),
        tombstones=((w, 1),),
    )
    after, killed = apply_sync(b, Sync(1, 2, 4, 0, (Y, w)))
    assert after.queue == (Y,)  # listed, unknown, not tombstoned: queued, not started yet
    assert after.phase(w) is Phase.ENDED and after.tombstone(w) is None  # restored as ended
    assert after.phase(X) is Phase.STOPPING and killed == (X,)  # known, not listed: killed
    assert after.phase(z) is None and after.tombstone(z) == 4  # ended, not listed: forgotten at rev4
    assert after.fence == Fence(1, 2, 4, 4)


def test_apply_replaces_the_queue_and_keeps_a_listed_stopping_one():
    b = Borglet(fence=Fence(1, 1, 1, 1), tasks=((X, Phase.STOPPING),), queue=((1, 0),))
    after, killed = apply_sync(b, Sync(1, 2, 1, 0, (X,)))
    assert after.queue == () and after.phase(X) is Phase.STOPPING and killed == ()


# --- rule 3: tombstone GC --------------------------------------------------------------------


def test_tombstone_goes_only_after_a_sync_of_a_greater_revision():
    s = placed()
    kept = with_borglet(s, Borglet(fence=Fence(1, 3, 2, 2), tombstones=((X, 2),)))
    assert drop_tombstone(kept, 0, X, rules=NEW_RULES) is None  # same revision: kept
    assert drop_tombstone(kept, 0, X, rules=OLD_RULES) is not None  # the old cap: any time
    gone = with_borglet(s, Borglet(fence=Fence(1, 4, 3, 3), tombstones=((X, 2),)))
    assert drop_tombstone(gone, 0, X, rules=NEW_RULES).borglets[0].tombstones == ()
    assert drop_tombstone(gone, 0, Y, rules=NEW_RULES) is None


# --- rule 4 and the borglet's own actions ----------------------------------------------------


def test_a_stopped_incarnation_ends_and_nothing_restarts_it():
    s = with_borglet(placed(), Borglet(tasks=((X, Phase.STOPPING),)))
    ended = stop_finished(s, 0, X)
    assert ended.borglets[0].phase(X) is Phase.ENDED
    assert stop_finished(ended, 0, X) is None
    assert start_next(ended, 0, X) is None  # only a queued incarnation starts


def test_start_waits_for_another_process_of_the_index_and_records_first():
    s = with_borglet(placed(), Borglet(tasks=((X, Phase.STOPPING),), queue=(Y,)))
    assert start_next(s, 0, Y) is None
    free = with_borglet(placed(), Borglet(tasks=((X, Phase.ENDED),), queue=(Y,)))
    started = start_next(free, 0, Y)
    assert started.borglets[0].phase(Y) is Phase.RUNNING and started.borglets[0].queue == ()
    assert started.ghost.started == ((Y, 0),)


def test_borglet_restart_loses_only_the_queue():
    b = Borglet(fence=Fence(1, 1, 1, 1), tasks=((X, Phase.RUNNING),), queue=(Y,), tombstones=(((1, 0), 1),))
    s = restart_borglet(with_borglet(placed(), b), 0)
    assert s.borglets[0] == Borglet(b.fence, b.tasks, (), b.tombstones)
    assert restart_borglet(s, 0) is None


# --- the leader and etcd ---------------------------------------------------------------------


def test_commits_need_a_current_view_and_incarnations_only_grow():
    s = placed()
    assert commit_place(s, 0, 1, bounds=B) is None  # desired already
    killed = commit_kill(s, 0)
    assert killed.revision == 2 and not killed.cell[0].desired
    again = commit_place(killed, 0, 0, bounds=B)
    assert again.cell[0].incarnation == 1  # a new placement is a new incarnation
    assert commit_place(commit_kill(again, 0), 0, 0, bounds=B) is None  # past the bound
    lagging = elect(killed, 1, bounds=B)
    assert lagging.leader.epoch == 2 and lagging.leader.view == 1
    assert commit_kill(lagging, 0) is None and commit_place(lagging, 0, 1, bounds=B) is None


def test_a_sync_carries_the_desired_set_at_its_leaders_view():
    s = elect(commit_kill(placed(), 0), 1, bounds=B)  # new leader, its view still at rev1
    sent = send_sync(s, 2, 0, bounds=B)
    assert sent.network == (Sync(2, 1, 1, 0, (X,)),)
    assert send_sync(s, 1, 0, bounds=B) is None  # the deposed leader stopped
    full = send_sync(send_sync(sent, 2, 1, bounds=B), 2, 0, bounds=B)
    assert full is None  # two in flight: the network's bound


def test_a_deposed_leader_sends_on_only_where_the_scope_says_so():
    s = commit_kill(placed(), 0)
    on = Bounds(machines=2, indices=1, incarnations=2, epochs=2, syncs_per_epoch=3, in_flight=2, deposed_send=True)
    both = elect(s, 1, bounds=on)
    assert [ld.epoch for ld in both.leaders] == [1, 2]
    assert send_sync(both, 1, 0, bounds=on).network == (Sync(1, 1, 2, 0, ()),)
    assert [ld.epoch for ld in elect(s, 1, bounds=B).leaders] == [2]
    assert elect(both, 0, bounds=on) is None  # no epoch left


def test_prune_drops_only_syncs_refused_forever():
    late, fresh = Sync(1, 1, 1, 0, (X,)), Sync(1, 3, 2, 0, ())
    s = with_borglet(placed(), Borglet(fence=Fence(1, 2, 2, 2))).with_(network=(late, fresh))
    assert prune(s, NEW_RULES).network == (fresh,)
    assert prune(s, OLD_RULES).network == (late, fresh)  # the old fence would apply it


# --- the invariants --------------------------------------------------------------------------


def test_invariants_fire():
    twice = ProtocolState((), (), (), (), Ghost(started=((X, 0), (X, 0))))
    assert incarnation_started_at_most_once(twice) == ["0#0 was started 2 times (on m0, m0)"]
    before = ProtocolState((), (), (), (), Ghost(started=((X, 0),), killed=((X, 0),)))
    assert killed_incarnation_never_starts_again(before, None, twice) == [
        "0#0 starts on m0 after it was killed"
    ]
    # 0#0 killed at rev2, 0#1 placed on m1 at rev3; m0 applied rev3 yet 0#0 runs there
    s = commit_place(commit_kill(placed(), 0), 0, 1, bounds=B)
    s = with_borglet(s, Borglet(fence=Fence(1, 3, 3, 3), tasks=((X, Phase.RUNNING),)), 0)
    s = with_borglet(s, Borglet(fence=Fence(1, 2, 3, 3), tasks=((Y, Phase.RUNNING),)), 1)
    assert len(one_process_per_index(s)) == 1
    window = with_borglet(s, Borglet(fence=Fence(1, 1, 1, 1), tasks=((X, Phase.RUNNING),)), 0)
    assert one_process_per_index(window) == []  # m0 has not heard of the kill: the window


# --- the explorer ----------------------------------------------------------------------------


def test_old_rules_start_an_incarnation_twice_in_a_short_trace():
    v = explore(SMALL, OLD_RULES).violation
    assert v is not None and "incarnation_started_at_most_once" in v.invariants
    assert len(v.trace) <= 12
    steps = [step for step, _ in v.trace]
    assert steps[-1].action == "start_next"
    m, x = steps[-1].args
    # the borglet forgot x (a tombstone), then dropped the tombstone...
    forgot = next(i for i, (_, after) in enumerate(v.trace) if after.borglets[m].tombstone(x) is not None)
    dropped = steps.index(Step("drop_tombstone", (m, x)))
    # ...and then applied a sync older than one it had applied already, which listed x again
    late = [i for i in range(len(steps)) if steps[i].action == "deliver" and _applied_out_of_order(v.trace, i)]
    assert late and forgot < dropped < late[-1], "\n".join(map(str, steps))
    assert x in steps[late[-1]].args[0].desired


def _applied_out_of_order(trace, i: int) -> bool:
    step, after = trace[i]
    msg = step.args[0]
    before = trace[i - 1][1] if i > 0 else None
    if before is None:
        return False
    fence = before.borglets[msg.machine].fence
    applied = after.borglets[msg.machine].fence != fence
    return applied and ((msg.epoch, msg.seq) < (fence.epoch, fence.seq) or msg.revision < fence.top_revision)


def test_new_rules_hold_exhaustively():
    fired: set[str] = set()
    for bounds in NEW_SCOPES:
        res = explore(bounds, NEW_RULES)
        assert res.complete and res.violation is None, bounds
        assert res.states > 5000  # neither scope is trivially small
        fired |= set(res.actions_fired)
    assert fired == set(ACTIONS)  # every action, faults included, was taken somewhere


def test_the_revision_fence_is_what_keeps_tombstones_safe():
    three_syncs = NEW_SCOPES[1]
    # the GC rule alone does not save the epoch-only fence: a late sync starts 0#0 on m0 after
    # m0 applied the revision that placed 0#1 on m1 (the defect as first seen)...
    v = explore(three_syncs, EPOCH_FENCE_WITH_GC_RULE).violation
    assert v is not None and v.invariants == ["one_process_per_index"] and len(v.trace) <= 11
    # ...while under the revision fence even a tombstone dropped at any time is safe
    res = explore(three_syncs, REVISION_FENCE_WITH_FREE_GC)
    assert res.complete and res.violation is None


@pytest.mark.parametrize("rules", [OLD_RULES, NEW_RULES], ids=lambda r: r.name)
def test_symmetry_reduction_saves_states_and_keeps_the_verdict(rules):
    reduced = explore(SMALL, rules, symmetry=True)
    full = explore(SMALL, rules, symmetry=False)
    assert (reduced.violation is None) == (full.violation is None)
    if rules is NEW_RULES:
        assert reduced.states < full.states
        assert reduced.complete and full.complete
    else:  # BFS: both report a shortest trace, so of the same length
        assert len(reduced.violation.trace) == len(full.violation.trace)


def test_symmetry_over_indices_divides_by_up_to_four():
    two = Bounds(machines=2, indices=2, incarnations=1, epochs=1, syncs_per_epoch=1, in_flight=2)
    reduced, full = explore(two, NEW_RULES), explore(two, NEW_RULES, symmetry=False)
    assert reduced.violation is None and full.violation is None
    assert full.states > 3 * reduced.states  # 2! machines x 2! indices; fixed points keep it under 4


@pytest.mark.parametrize("rules", [OLD_RULES, NEW_RULES], ids=lambda r: r.name)
def test_pruning_saves_states_and_keeps_the_verdict(rules):
    pruned = explore(SMALL, rules, pruning=True)
    kept = explore(SMALL, rules, pruning=False)
    assert (pruned.violation is None) == (kept.violation is None)
    if rules is NEW_RULES:
        assert pruned.states < kept.states


def test_symmetry_maps_a_state_onto_its_class():
    s = deliver(send_sync(placed(), 1, 0, bounds=B), Sync(1, 1, 1, 0, (X,)), rules=NEW_RULES)
    swapped = permute(s, (1, 0), (0,))
    assert swapped.borglets[1] == s.borglets[0] and swapped.cell[0].machine == 1
    assert canonical(swapped) == canonical(s)


def test_report_prints_the_trace_step_by_step(capsys):
    assert main(["--rules", "old", "--machines", "1", "--epochs", "1", "--syncs-per-epoch", "2",
                 "--expect-violation"]) == 0
    out = capsys.readouterr().out
    assert "VIOLATION of" in out and "trace (" in out and "  1. " in out and "m0: applied" in out
    res = explore(SMALL, NEW_RULES)
    assert "violations: 0" in report(res, SMALL, NEW_RULES, symmetry=True)


def test_step_reads_as_words():
    assert str(Step("start_next", (1, (0, 1)))) == "start_next: m1 starts queued 0#1"
    assert str(Step("deliver", (Sync(2, 1, 3, 0, ((0, 1),)),))) == \
        "deliver: sync(e2 seq1 rev3 -> m0: 0#1) arrives"
