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
# Maps (and index dicts) at least this large keep a step's changes in a layer over their
# predecessor's entries rather than copying them all: a placement in a cell of 100,000 tasks
# costs the layer's size, not the cell's. Smaller maps (the explorer's) are copied as before.
LAYER_MIN = 2048
_GONE: Any = object()  # a layer's mark for a key removed from the entries below it
_NONE: Any = object()


class Layered(Mapping[K, V]):
    """An immutable mapping: a base dict shared with the maps it was made from, and a small
    dict of what changed over it (a removed key marked). Point reads (`get`, `in`, `[]`,
    `len`) look at the layer, then the base; a bulk read (iteration, `items`) first merges the
    layer into a dict of its own, once, in the order a dict changed the same way would have.
    The layer is merged as soon as it grows past the square root of the size, so a chain of n
    one-key steps on a map of N entries costs about n * sqrt(N), not n * N."""

    __slots__ = ("_base", "_over", "_n")

    def __init__(self, base: dict[K, V], over: dict[K, Any] | None, n: int) -> None:
        self._base, self._over, self._n = base, over, n

    def get(self, key: K, default: Any = None) -> Any:
        over = self._over  # the layer first: a merge sets the new base before it drops the layer
        if over is not None:
            v = over.get(key, _NONE)
            if v is not _NONE:
                return default if v is _GONE else v
        return self._base.get(key, default)

    def __getitem__(self, key: K) -> V:
        v = self.get(key, _NONE)
        if v is _NONE:
            raise KeyError(key)
        return v  # type: ignore[no-any-return]

    def __contains__(self, key: object) -> bool:
        return self.get(key, _NONE) is not _NONE  # type: ignore[arg-type]

    def __len__(self) -> int:
        return self._n

    def flat(self) -> dict[K, V]:
        """The entries as one dict (merged once, then kept)."""
        over = self._over
        if over is None:
            return self._base
        # A copy of the base (one C-level copy), then the layer over it: a key the base holds
        # keeps its place, a new one goes last in the layer's order, a removed one goes.
        merged = self._base.copy()
        for k, v in over.items():
            if v is _GONE:
                merged.pop(k, None)
            else:
                merged[k] = v
        self._base = merged
        self._over = None
        return merged

    def __iter__(self) -> Iterator[K]:
        return iter(self.flat())

    def keys(self):  # type: ignore[override]
        return self.flat().keys()

    def values(self):  # type: ignore[override]
        return self.flat().values()

    def items(self):  # type: ignore[override]
        return self.flat().items()

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Layered):
            return self.flat() == other.flat()
        if isinstance(other, dict):
            return self.flat() == other
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"Layered({self.flat()!r})"


def changed(m: Mapping[K, V], put: Mapping[K, V], remove: Iterable[K] = ()) -> Mapping[K, V]:
    """`m` (a dict or a `Layered`, never changed) with `put` set and then `remove` removed, as a
    new mapping: a dict copied whole while small, a `Layered` over `m`'s entries once large."""
    remove = tuple(remove)
    if len(m) + len(put) < LAYER_MIN:
        d = dict(m.flat()) if isinstance(m, Layered) else dict(m)
        d.update(put)
        for key in remove:
            d.pop(key, None)
        return d
    if isinstance(m, Layered):
        layer = m._over  # before the base: a merge elsewhere sets the new base, then drops the layer
        base, n = m._base, m._n
        over = dict(layer) if layer is not None else {}
    else:
        base, over, n = m, {}, len(m)  # type: ignore[assignment]
    for key, value in put.items():
        was = over.get(key, _NONE)
        if was is _GONE and key in base:
            # Removed and now set again: a dict would put it last. Merge the layer first, so
            # the key is new to the base and lands at the end of the order.
            base = Layered(base, over, n).flat()
            over, was = {}, _NONE
        if was is _NONE:
            if key not in base:
                n += 1
        elif was is _GONE:
            n += 1
        over[key] = value
    for key in remove:
        was = over.get(key, _NONE)
        if was is _GONE:
            continue
        if was is _NONE and key not in base:
            continue
        n -= 1
        if key in base:
            over[key] = _GONE
        else:
            del over[key]
    out: Layered[K, V] = Layered(base, over, n)
    if len(over) * len(over) > max(n, 1) and len(over) > 64:
        out.flat()
    return out


def _flat(m: Mapping[K, V]) -> dict[K, V]:
    return m.flat() if isinstance(m, Layered) else m  # type: ignore[return-value]


class FMap(Mapping[K, V], Generic[K, V]):
    """An immutable, hashable mapping. `set`, `update` and `remove` return a new map, which
    remembers (weakly) the map it was made from and the keys that changed: `changed_since`
    lets a user of many large maps (the master's writer) see what a step changed without
    comparing every entry. `group` indexes the keys by a function of each entry; a map made
    from one with an index gets the index updated from the changed keys, so the queries of
    a cell of thousands of tasks cost what one job or machine holds, not the whole cell."""

    __slots__ = ("_d", "_h", "_parent", "_changed", "_groups", "_sums", "__weakref__")

    def __init__(self, items: Mapping[K, V] | Iterable[tuple[K, V]] = ()) -> None:
        self._d: Mapping[K, V] = dict(items)  # a dict, or a Layered once large
        self._h: int | None = None
        self._parent: weakref.ref[FMap[K, V]] | None = None
        self._changed: tuple[K, ...] = ()
        self._groups: dict[Callable[[K, V], Any], Mapping[Any, frozenset[K]]] | None = None
        self._sums: dict[tuple[Callable[[K, V], Any], Callable[[K, V], Any]], Mapping[Any, Any]] | None = None

    def _derived(self, d: Mapping[K, V], changed: tuple[K, ...]) -> FMap[K, V]:
        out: FMap[K, V] = FMap.__new__(FMap)
        out._d, out._h, out._parent, out._changed = d, None, weakref.ref(self), changed
        out._groups = out._sums = None
        # `group` and `sums` replace these dicts, never change them, so another thread adding
        # an index to this map meanwhile cannot change them under these loops.
        if groups := self._groups:
            out._groups = {by: _regroup(g, by, self._d, d, changed) for by, g in groups.items()}
        if sums := self._sums:
            out._sums = {key: _resum(s, *key, self._d, d, changed) for key, s in sums.items()}
        return out

    def group(self, by: Callable[[K, V], Any]) -> Mapping[Any, frozenset[K]]:
        """The keys grouped by `by(key, value)` (None: in no group). `by` must be one
        module-level function (its identity names the index) that depends only on the entry."""
        groups: Mapping[Any, frozenset[K]] | None = self._groups.get(by) if self._groups is not None else None
        if groups is None:
            built: dict[Any, set[K]] = {}
            for k, v in self._d.items():
                g = by(k, v)
                if g is not None:
                    built.setdefault(g, set()).add(k)
            groups = {g: frozenset(ks) for g, ks in built.items()}
            if len(self._d) >= GROUP_MIN:  # small maps (the explorer's) are grouped afresh
                # A new dict, not an insertion: a thread deriving a map from this one may be
                # looping over the old one (`_derived`).
                self._groups = {**(self._groups or {}), by: groups}
        return groups

    def sums(self, by: Callable[[K, V], Any], weigh: Callable[[K, V], Any]) -> Mapping[Any, Any]:
        """For each group of `group(by)`, the sum of `weigh(key, value)` over its entries
        (values that add and subtract, such as `Resources`; a group whose entries weigh
        nothing may be absent). Kept up to date from the changed keys like the groups, so
        "what the tasks on this machine reserve" costs one lookup, not one pass over them."""
        key = (by, weigh)
        sums: Mapping[Any, Any] | None = self._sums.get(key) if self._sums is not None else None
        if sums is None:
            built: dict[Any, Any] = {}
            for k, v in self._d.items():
                g = by(k, v)
                if g is not None:
                    w = weigh(k, v)
                    built[g] = built[g] + w if g in built else w
            sums = built
            if len(self._d) >= GROUP_MIN:
                self._sums = {**(self._sums or {}), key: sums}  # a new dict, as in `group`
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

    def __len__(self) -> int:
        return len(self._d)

    # Direct dict views: the Mapping defaults go through __getitem__ per key, and the
    # explorer spends most of its time iterating these maps.
    def __contains__(self, key: object) -> bool:
        return key in self._d

    def get(self, key: K, default: Any = None) -> Any:
        return self._d.get(key, default)

    def keys(self):  # type: ignore[override]
        d = self._d
        return (d if type(d) is dict else d.flat()).keys()  # type: ignore[attr-defined]

    def values(self):  # type: ignore[override]
        d = self._d
        return (d if type(d) is dict else d.flat()).values()  # type: ignore[attr-defined]

    def items(self):  # type: ignore[override]
        d = self._d
        return (d if type(d) is dict else d.flat()).items()  # type: ignore[attr-defined]

    def __iter__(self) -> Iterator[K]:
        d = self._d
        return iter(d if type(d) is dict else d.flat())  # type: ignore[attr-defined]

    def __hash__(self) -> int:
        if self._h is None:
            self._h = hash(frozenset(self.items()))
        return self._h

    def __eq__(self, other: object) -> bool:
        if isinstance(other, FMap):
            return _flat(self._d) == _flat(other._d)
        return NotImplemented

    def __repr__(self) -> str:
        return f"FMap({_flat(self._d)!r})"

    def __reduce__(self) -> tuple[Any, ...]:
        return (FMap, (_flat(self._d),))  # the entries only: a weak reference does not pickle

    def set(self, key: K, value: V) -> FMap[K, V]:
        return self._derived(changed(self._d, {key: value}), (key,))

    def update(self, items: Mapping[K, V]) -> FMap[K, V]:
        return self._derived(changed(self._d, items), tuple(items))

    def remove(self, key: K) -> FMap[K, V]:
        return self._derived(changed(self._d, {}, (key,)), (key,))

    def successor(self, items: dict[K, V], changed: Iterable[K]) -> FMap[K, V]:
        """A map of `items` (a dict the caller hands over and no longer changes) that differs
        from this one only at the `changed` keys: it gets this map's indexes updated."""
        return self._derived(items, tuple(changed))

    def edit(self, put: Mapping[K, V], remove: Iterable[K] = ()) -> FMap[K, V]:
        """`update(put)` and then `remove` of each key in `remove`, as one step."""
        gone = tuple(remove)
        return self._derived(changed(self._d, put, gone), tuple(dict.fromkeys((*put, *gone))))


_MISSING: Any = object()


def _regroup(
    groups: Mapping[Any, frozenset[K]], by: Callable[[K, V], Any], old: Mapping[K, V], new: Mapping[K, V],
    keys: tuple[K, ...],
) -> Mapping[Any, frozenset[K]]:  # fmt: skip
    """An index of `old` updated to `new`, which differ only at the `keys` given. Each
    group that changed is copied once, whatever number of its keys moved: a job of 10,000
    tasks placed 50 at a time costs one copy of its set per view, not 50."""
    moves: dict[Any, tuple[set[K], set[K]]] = {}  # group -> (keys leaving, keys joining)
    for k in dict.fromkeys(keys):
        was, now = old.get(k, _MISSING), new.get(k, _MISSING)
        g0 = None if was is _MISSING else by(k, was)
        g1 = None if now is _MISSING else by(k, now)
        if g0 == g1:
            continue
        if g0 is not None:
            moves.setdefault(g0, (set(), set()))[0].add(k)
        if g1 is not None:
            moves.setdefault(g1, (set(), set()))[1].add(k)
    if not moves:
        return groups
    put: dict[Any, frozenset[K]] = {}
    emptied = []
    for g, (leaving, joining) in moves.items():
        members = (groups.get(g, frozenset()) - leaving) | joining
        if members:
            put[g] = members
        else:
            emptied.append(g)
    return changed(groups, put, emptied)


def _resum(
    sums: Mapping[Any, Any], by: Callable[[K, V], Any], weigh: Callable[[K, V], Any], old: Mapping[K, V],
    new: Mapping[K, V], keys: tuple[K, ...],
) -> Mapping[Any, Any]:  # fmt: skip
    """A sums index of `old` updated to `new`, which differ only at the `keys` given."""
    put: dict[Any, Any] = {}
    for k in dict.fromkeys(keys):
        was, now = old.get(k, _MISSING), new.get(k, _MISSING)
        if was is now:
            continue
        if was is not _MISSING:
            g = by(k, was)
            if g is not None:
                put[g] = (put[g] if g in put else sums[g]) - weigh(k, was)
        if now is not _MISSING:
            g = by(k, now)
            if g is not None:
                w = weigh(k, now)
                if g in put:
                    put[g] = put[g] + w
                elif g in sums:
                    put[g] = sums[g] + w
                else:
                    put[g] = w
    return changed(sums, put) if put else sums
