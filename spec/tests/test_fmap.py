"""FMap's derived indexes: kept from the changed keys, they always equal an index built from
scratch; `changed_since` names exactly the keys one step changed."""

from __future__ import annotations

import pickle
import random

import pytest

from spec import fmap
from spec.fmap import FMap


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


def test_groups_are_not_part_of_equality_hashing_or_pickling() -> None:
    a: FMap[int, str] = FMap({1: "a", 2: "ab"})
    a.group(parity)
    b: FMap[int, str] = FMap({2: "ab", 1: "a"})
    assert a == b and hash(a) == hash(b)
    c = pickle.loads(pickle.dumps(a.set(3, "x")))
    assert c == FMap({1: "a", 2: "ab", 3: "x"}) and dict(c.group(parity)) == scratch(c)
