"""A persistent map for the cell state: immutable and hashable, it knows which keys one step changed and keeps group indexes up to date from them.

The master's writer holds a cell of thousands of tasks in these maps: `changed_since` tells
it what a step changed without comparing every entry, and `group` answers "the tasks of this
job" at the cost of that job, not of the cell. The spec's explorer uses the same maps, small
enough to keep no index at all.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any, Generic, TypeVar

K = TypeVar("K")
V = TypeVar("V")
GROUP_MIN = 64  # maps smaller than this keep no index: a scan is as cheap, and memory is not spent


class FMap(Mapping[K, V], Generic[K, V]):
    """An immutable, hashable mapping. `set`, `update` and `remove` return a new map, which
    remembers (weakly) the map it was made from and the keys that changed: `changed_since`
    lets a user of many large maps (the master's writer) see what a step changed without
    comparing every entry. `group` indexes the keys by a function of each entry; a map made
    from one with an index gets the index updated from the changed keys, so the queries of
    a cell of thousands of tasks cost what one job or machine holds, not the whole cell."""

    __slots__ = ("_d", "_h", "_parent", "_changed", "_groups", "_sums", "__weakref__")

    def __init__(self, items: Mapping[K, V] | Iterable[tuple[K, V]] = ()) -> None:
        self._d: dict[K, V] = dict(items)
        self._h: int | None = None
        self._parent: weakref.ref[FMap[K, V]] | None = None
        self._changed: tuple[K, ...] = ()
        self._groups: dict[Callable[[K, V], Any], dict[Any, frozenset[K]]] | None = None
        self._sums: dict[tuple[Callable[[K, V], Any], Callable[[K, V], Any]], dict[Any, Any]] | None = None

    def _derived(self, d: dict[K, V], changed: tuple[K, ...]) -> FMap[K, V]:
        out: FMap[K, V] = FMap.__new__(FMap)
        out._d, out._h, out._parent, out._changed = d, None, weakref.ref(self), changed
        out._groups = out._sums = None
        if self._groups:
            out._groups = {by: _regroup(groups, by, self._d, d, changed) for by, groups in self._groups.items()}
        if self._sums:
            out._sums = {key: _resum(sums, *key, self._d, d, changed) for key, sums in self._sums.items()}
        return out

    def group(self, by: Callable[[K, V], Any]) -> Mapping[Any, frozenset[K]]:
        """The keys grouped by `by(key, value)` (None: in no group). `by` must be one
        module-level function (its identity names the index) that depends only on the entry."""
        groups = self._groups.get(by) if self._groups is not None else None
        if groups is None:
            built: dict[Any, set[K]] = {}
            for k, v in self._d.items():
                g = by(k, v)
                if g is not None:
                    built.setdefault(g, set()).add(k)
            groups = {g: frozenset(ks) for g, ks in built.items()}
            if len(self._d) >= GROUP_MIN:  # small maps (the explorer's) are grouped afresh
                if self._groups is None:
                    self._groups = {}
                self._groups[by] = groups
        return groups

    def sums(self, by: Callable[[K, V], Any], weigh: Callable[[K, V], Any]) -> Mapping[Any, Any]:
        """For each group of `group(by)`, the sum of `weigh(key, value)` over its entries
        (values that add and subtract, such as `Resources`; a group whose entries weigh
        nothing may be absent). Kept up to date from the changed keys like the groups, so
        "what the tasks on this machine reserve" costs one lookup, not one pass over them."""
        key = (by, weigh)
        sums = self._sums.get(key) if self._sums is not None else None
        if sums is None:
            built: dict[Any, Any] = {}
            for k, v in self._d.items():
                g = by(k, v)
                if g is not None:
                    w = weigh(k, v)
                    built[g] = built[g] + w if g in built else w
            sums = built
            if len(self._d) >= GROUP_MIN:
                if self._sums is None:
                    self._sums = {}
                self._sums[key] = sums
        return sums

    def changed_since(self, other: FMap[K, V]) -> tuple[K, ...] | None:
        """The keys whose entries may differ from `other`'s, when this map was made from
        `other` by one `set`, `update` or `remove`; None when that is not known."""
        if self is other:
            return ()
        if self._parent is not None and self._parent() is other:
            return self._changed
        return None

    def __getitem__(self, key: K) -> V:
        return self._d[key]

    def __iter__(self) -> Iterator[K]:
        return iter(self._d)

    def __len__(self) -> int:
        return len(self._d)

    # Direct dict views: the Mapping defaults go through __getitem__ per key, and the
    # explorer spends most of its time iterating these maps.
    def __contains__(self, key: object) -> bool:
        return key in self._d

    def get(self, key: K, default: Any = None) -> Any:
        return self._d.get(key, default)

    def keys(self):  # type: ignore[override]
        return self._d.keys()

    def values(self):  # type: ignore[override]
        return self._d.values()

    def items(self):  # type: ignore[override]
        return self._d.items()

    def __hash__(self) -> int:
        if self._h is None:
            self._h = hash(frozenset(self._d.items()))
        return self._h

    def __eq__(self, other: object) -> bool:
        if isinstance(other, FMap):
            return self._d == other._d
        return NotImplemented

    def __repr__(self) -> str:
        return f"FMap({self._d!r})"

    def __reduce__(self) -> tuple[Any, ...]:
        return (FMap, (self._d,))  # the entries only: a weak reference does not pickle

    def set(self, key: K, value: V) -> FMap[K, V]:
        d = dict(self._d)
        d[key] = value
        return self._derived(d, (key,))

    def update(self, items: Mapping[K, V]) -> FMap[K, V]:
        d = dict(self._d)
        d.update(items)
        return self._derived(d, tuple(items))

    def remove(self, key: K) -> FMap[K, V]:
        d = dict(self._d)
        d.pop(key, None)
        return self._derived(d, (key,))

    def successor(self, items: dict[K, V], changed: Iterable[K]) -> FMap[K, V]:
        """A map of `items` (a dict the caller hands over and no longer changes) that differs
        from this one only at the `changed` keys: it gets this map's indexes updated."""
        return self._derived(items, tuple(changed))

    def edit(self, put: Mapping[K, V], remove: Iterable[K] = ()) -> FMap[K, V]:
        """`update(put)` and then `remove` of each key in `remove`, as one step."""
        d = dict(self._d)
        d.update(put)
        gone = tuple(remove)
        for key in gone:
            d.pop(key, None)
        return self._derived(d, tuple(dict.fromkeys((*put, *gone))))


_MISSING: Any = object()


def _regroup(
    groups: dict[Any, frozenset[K]], by: Callable[[K, V], Any], old: dict[K, V], new: dict[K, V],
    changed: tuple[K, ...],
) -> dict[Any, frozenset[K]]:  # fmt: skip
    """An index of `old` updated to `new`, which differ only at the `changed` keys. Each
    group that changed is copied once, whatever number of its keys moved: a job of 10,000
    tasks placed 50 at a time costs one copy of its set per view, not 50."""
    out = dict(groups)
    moves: dict[Any, tuple[set[K], set[K]]] = {}  # group -> (keys leaving, keys joining)
    for k in dict.fromkeys(changed):
        was, now = old.get(k, _MISSING), new.get(k, _MISSING)
        g0 = None if was is _MISSING else by(k, was)
        g1 = None if now is _MISSING else by(k, now)
        if g0 == g1:
            continue
        if g0 is not None:
            moves.setdefault(g0, (set(), set()))[0].add(k)
        if g1 is not None:
            moves.setdefault(g1, (set(), set()))[1].add(k)
    for g, (leaving, joining) in moves.items():
        keys = (out.get(g, frozenset()) - leaving) | joining
        if keys:
            out[g] = keys
        else:
            out.pop(g, None)
    return out


def _resum(
    sums: dict[Any, Any], by: Callable[[K, V], Any], weigh: Callable[[K, V], Any], old: dict[K, V], new: dict[K, V],
    changed: tuple[K, ...],
) -> dict[Any, Any]:  # fmt: skip
    """A sums index of `old` updated to `new`, which differ only at the `changed` keys."""
    out = dict(sums)
    for k in dict.fromkeys(changed):
        was, now = old.get(k, _MISSING), new.get(k, _MISSING)
        if was is now:
            continue
        if was is not _MISSING:
            g = by(k, was)
            if g is not None:
                out[g] = out[g] - weigh(k, was)
        if now is not _MISSING:
            g = by(k, now)
            if g is not None:
                w = weigh(k, now)
                out[g] = out[g] + w if g in out else w
    return out
