"""FMap's derived indexes: kept from the changed keys, they always equal an index built from
scratch; `changed_since` names exactly the keys one step changed."""

from __future__ import annotations

import pickle
import random

import pytest

from spec import fmap
from spec.actions import submit
from spec.fmap import FMap
from spec.model import CellState, Job

from .fixtures import SMALL, cell_with_job


@pytest.fixture(autouse=True)
def index_every_map(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(fmap, "GROUP_MIN", 0)  # these maps are small: keep their indexes


def parity(key: int, value: str) -> int | None:
    return None if value == "none" else (key + len(value)) % 3


def scratch(m: FMap[int, str]) -> dict[int | None, frozenset[int]]:
    out: dict[int | None, set[int]] = {}
    for k, v in m.items():
        g = parity(k, v)
        if g is not None:
            out.setdefault(g, set()).add(k)
    return {g: frozenset(ks) for g, ks in out.items()}


def test_groups_follow_every_kind_of_step() -> None:
    for seed in range(200):
        rng = random.Random(seed)
        m: FMap[int, str] = FMap({k: "ab" for k in range(rng.randrange(6))})
        assert dict(m.group(parity)) == scratch(m)
        for _ in range(30):
            values = ["a", "ab", "abc", "none"]
            kind = rng.randrange(4)
            before = m
            if kind == 0:
                m = m.set(rng.randrange(8), rng.choice(values))
            elif kind == 1:
                m = m.update({rng.randrange(8): rng.choice(values) for _ in range(rng.randrange(4))})
            elif kind == 2:
                m = m.remove(rng.randrange(8))
            else:
                put = {rng.randrange(8): rng.choice(values) for _ in range(rng.randrange(3))}
                m = m.edit(put, [rng.randrange(8) for _ in range(rng.randrange(3))] + list(put)[:1])
            changed = m.changed_since(before)
            assert changed is not None
            assert {k for k in set(m) | set(before) if m.get(k) != before.get(k)} <= set(changed)
            if rng.random() < 0.2:
                m = FMap(dict(m.items()))  # a fresh map: its index is built anew
            assert dict(m.group(parity)) == scratch(m), seed


def weight(key: int, value: str) -> int:
    return len(value) * 10 + key


def scratch_sums(m: FMap[int, str]) -> dict[int, int]:
    out: dict[int, int] = {}
    for k, v in m.items():
        g = parity(k, v)
        if g is not None:
            out[g] = out.get(g, 0) + weight(k, v)
    return out


def test_sums_follow_every_kind_of_step() -> None:
    for seed in range(200):
        rng = random.Random(seed)
        m: FMap[int, str] = FMap({k: "ab" for k in range(rng.randrange(6))})
        m.sums(parity, weight)
        for _ in range(30):
            values = ["a", "ab", "abc", "none"]
            kind = rng.randrange(3)
            if kind == 0:
                m = m.set(rng.randrange(8), rng.choice(values))
            elif kind == 1:
                m = m.remove(rng.randrange(8))
            else:
                put = {rng.randrange(8): rng.choice(values) for _ in range(rng.randrange(3))}
                m = m.edit(put, [rng.randrange(8) for _ in range(rng.randrange(3))])
            kept = {g: w for g, w in m.sums(parity, weight).items() if w or g in scratch_sums(m)}
            assert kept == scratch_sums(m), seed


def test_a_machines_reservation_is_the_sum_over_its_tasks_after_every_step() -> None:
    # The indexed sum must equal the plain one: place, grow and kill tasks of a job many times.
    from spec.actions import kill, reserve, restart, schedule
    from spec.model import Machine, Resources, TaskState, total

    state = cell_with_job(6)
    state = state.with_(machines=state.machines.set("m1", Machine("m1", Resources.of(cpu=4000))))
    rng = random.Random(3)
    for _ in range(300):
        tasks = list(state.tasks.values())
        t = rng.choice(tasks)
        if t.state is TaskState.PENDING:
            nxt = schedule(state, t.id, rng.choice(sorted(state.machines)))
        elif t.state is TaskState.RUNNING and rng.random() < 0.5:
            nxt = reserve(state, t.id, Resources.of(cpu=rng.randrange(1, 500)))
        elif t.state is TaskState.RUNNING:
            nxt = kill(state, t.id)
        else:
            nxt = restart(state, t.id)
        state = nxt or state
        for name in state.machines:
            plain = total(x.reserved for x in state.tasks.values() if x.state is TaskState.RUNNING and x.machine == name)
            assert state.machine_reserved(name) == plain


def test_groups_are_not_part_of_equality_hashing_or_pickling() -> None:
    a: FMap[int, str] = FMap({1: "a", 2: "ab"})
    a.group(parity)
    b: FMap[int, str] = FMap({2: "ab", 1: "a"})
    assert a == b and hash(a) == hash(b)
    c = pickle.loads(pickle.dumps(a.set(3, "x")))
    assert c == FMap({1: "a", 2: "ab", 3: "x"}) and dict(c.group(parity)) == scratch(c)


# --- the map's own views, and the indexes of large maps -----------------------------------


def test_fmap_keys_are_its_keys() -> None:
    # FMap.keys: returning None instead of the dict view survived.
    m = FMap({"a": 1, "b": 2})
    assert sorted(m.keys()) == ["a", "b"]


def test_indexes_of_large_maps_follow_their_changes() -> None:
    # The index update (_regroup; maps of 64 entries or more keep indexes): returning None
    # from it survived, since the other spec tests use small cells.
    s = cell_with_job(70)
    assert len(s.tasks_of("u/j")) == 70
    s2 = submit(s, Job("u", "k", 100, 3, SMALL))
    assert s2 is not None
    assert len(s2.tasks_of("u/k")) == 3 and len(s2.tasks_of("u/j")) == 70


def _parity(key: int, value: int) -> str:
    _parity.calls += 1  # type: ignore[attr-defined]
    return "even" if value % 2 == 0 else "odd"


_parity.calls = 0  # type: ignore[attr-defined]


def test_a_derived_maps_index_is_updated_from_the_changed_keys_not_rebuilt() -> None:
    # _regroup returning None: the derived map still answered right (a lost index is
    # rebuilt on the next read), so only the cost shows it.
    m = FMap({i: i for i in range(100)})
    assert len(m.group(_parity)["even"]) == 50
    _parity.calls = 0  # type: ignore[attr-defined]
    m2 = m.set(3, 4)  # one changed key: its old and new entries are looked at, nothing else
    assert m2.group(_parity)["even"] == m.group(_parity)["even"] | {3}
    assert 3 not in m2.group(_parity)["odd"]
    assert _parity.calls <= 2  # type: ignore[attr-defined]


# --- layered maps: large maps share their predecessor's entries -------------------------------


def test_a_layered_map_reads_iterates_and_orders_as_a_dict_changed_the_same_way(monkeypatch: pytest.MonkeyPatch) -> None:
    # Every map here is "large" (LAYER_MIN 0): each step keeps its change in a layer, merged
    # once past the square root of the size. A plain dict changed alike is the model: the same
    # entries, the same order, and indexes equal to ones built from scratch, after every step
    # and whatever the chain's predecessors see.
    monkeypatch.setattr(fmap, "LAYER_MIN", 0)
    for seed in range(150):
        rng = random.Random(seed)
        size = rng.choice([0, 5, 200])
        model = {k: rng.choice(["a", "ab", "abc"]) for k in range(size)}
        m: FMap[int, str] = FMap(model)
        m.group(parity)
        m.sums(parity, weight)
        kept: list[tuple[FMap[int, str], dict[int, str]]] = []
        for _ in range(120):
            values = ["a", "ab", "abc", "none"]
            kind, key = rng.randrange(4), rng.randrange(size + 20)
            before = m
            if kind == 0:
                v = rng.choice(values)
                m, model = m.set(key, v), {**model, key: v}
            elif kind == 1:
                m = m.remove(key)
                model = {k: v for k, v in model.items() if k != key}
            elif kind == 2:
                put = {rng.randrange(size + 20): rng.choice(values) for _ in range(rng.randrange(4))}
                m, model = m.update(put), {**model, **put}
            else:
                put = {rng.randrange(size + 20): rng.choice(values) for _ in range(rng.randrange(3))}
                gone = [rng.randrange(size + 20) for _ in range(rng.randrange(3))]
                m = m.edit(put, gone)
                model = {**model, **put}
                for k in gone:
                    model.pop(k, None)
            changed = m.changed_since(before)
            assert changed is not None
            assert len(m) == len(model) and all((k in m) == (k in model) for k in range(size + 20)), seed
            assert all(m.get(k, "?") == model.get(k, "?") for k in range(size + 20)), seed
            if rng.random() < 0.3:  # a bulk read merges the layer; the chain goes on from it
                assert list(m.items()) == list(model.items()), seed
            if rng.random() < 0.1:
                kept.append((m, dict(model)))
            assert dict(m.group(parity)) == scratch(m), seed
            sums = {g: w for g, w in m.sums(parity, weight).items() if w or g in scratch_sums(m)}
            assert sums == scratch_sums(m), seed
        assert list(m) == list(model) and m == FMap(model) and hash(m) == hash(FMap(model))
        assert pickle.loads(pickle.dumps(m)) == m
        for old, was in kept:  # an earlier map of the chain is unchanged by what came after it
            assert list(old.items()) == list(was.items()), seed


def test_a_step_on_a_large_map_copies_its_layer_not_its_entries() -> None:
    # 100,000 entries: a chain of 1,000 one-key steps reads right and never copies the whole
    # map per step (the layer is merged about every sqrt(N) steps: a few dozen merges).
    m: FMap[int, int] = FMap({i: i for i in range(100_000)})
    merges = 0
    real_flat = fmap.Layered.flat

    def counting_flat(self: fmap.Layered) -> dict:  # type: ignore[type-arg]
        nonlocal merges
        merges += self._over is not None
        return real_flat(self)

    fmap.Layered.flat = counting_flat  # type: ignore[method-assign]
    try:
        for i in range(1_000):
            m = m.set(i * 97 % 100_000, -i)
    finally:
        fmap.Layered.flat = real_flat  # type: ignore[method-assign]
    assert 2 <= merges <= 20, merges
    assert m[97] == -1 and m[0] == 0 and len(m) == 100_000


def test_cell_state_with_changes_only_the_fields_named_and_refuses_others() -> None:
    s = CellState()
    t = s.with_(jobs=FMap({"a/b": 1}))
    assert t.jobs == FMap({"a/b": 1}) and t.machines is s.machines and t.tasks is s.tasks
    assert t.allocs is s.allocs and t.quotas is s.quotas
    with pytest.raises(TypeError, match="no field 'job'"):
        s.with_(job=FMap())


# --- indexes added while a map is derived from ----------------------------------------------


def _by_mod3(key: int, value: int) -> int:
    return value % 3


def _by_mod5(key: int, value: int) -> int:
    return value % 5


def _weight(key: int, value: int) -> int:
    return value


def test_an_index_added_while_a_map_is_derived_from_it_does_not_break_the_derivation() -> None:
    """A leader's writer derived the next cell from a task map while a reader thread asked the
    same map for an index it did not keep yet: the reader's insertion into the map's index
    dict, in the middle of the writer's loop over it, failed a 10,000-task submission with
    "dictionary changed size during iteration" (an HTTP 500). Here the other thread's call is
    made from inside the loop, at the step where the GIL let it in: `group` and `sums` must
    replace the dicts, never change them in place."""
    m = FMap({i: i for i in range(100)})
    added: list[str] = []

    def by_parity_adding_more(key: int, value: int) -> int:
        if deriving and not added:  # once, in the middle of `_derived`'s loop over the indexes
            added.append("group")
            m.group(_by_mod3)
            m.sums(_by_mod5, _weight)
        return value % 2

    deriving = False
    m.group(by_parity_adding_more)
    m.sums(by_parity_adding_more, _weight)
    m.group(_by_mod5)
    m.sums(_by_mod3, _weight)  # two of each, so the loops go on after the insertion
    deriving = True
    m2 = m.set(3, 4)
    assert added == ["group"]
    assert m2.group(by_parity_adding_more)[0] == frozenset(k for k, v in m2.items() if v % 2 == 0)
    assert m2.sums(by_parity_adding_more, _weight)[0] == sum(v for v in m2.values() if v % 2 == 0)
    assert m.group(_by_mod3)[1] == frozenset(k for k in range(100) if k % 3 == 1)
