"""Histories of a true atomic register per job, made up for the checker's tests and timings.

Each key is written and read by a few clients at once; every operation takes effect at a
random instant inside its interval, so the history is linearizable by construction. A few
writes end unknown (applied or not, at random) or failed (not applied). Values are unique
per key, as the chaos load's are.

    .venv/bin/python -m harness.tests.simulated            # time check() on a soak-sized history
    .venv/bin/python -m harness.tests.simulated --checker /tmp/old_history.py  # another version of harness/history.py
"""

from __future__ import annotations

import argparse
import importlib.util
import random
import sys
import time
from types import ModuleType
from typing import Any

from harness import history as hh


def simulated_history(
    keys: int = 9, ops_per_key: int = 704, clients: int = 3, seed: int = 0,
    unknown: float = 0.002, failed: float = 0.002, history: ModuleType = hh,
) -> Any:
    """A `history.History` of `keys` keys, about `ops_per_key` operations each (a submit, then
    updates and reads half and half), `clients` clients per key."""
    rng = random.Random(seed)
    h = history.History()
    for k in range(keys):
        key = f"chaos/k{k}"
        planned: list[tuple[float, float, float, str, Any, str]] = [(0.0, 0.01, 0.005, "submit", {"cpu": 0}, "ok")]
        clock = [0.02 + rng.random() * 0.01 for _ in range(clients)]
        for n in range(1, ops_per_key):
            c = n % clients
            t0 = clock[c]
            t1 = t0 + rng.uniform(0.002, 0.03)
            clock[c] = t1 + rng.uniform(0.0, 0.02)
            kind = "update" if rng.random() < 0.5 else "read"
            outcome = "ok"
            if kind == "update" and (x := rng.random()) < unknown + failed:
                outcome = "unknown" if x < unknown else "failed"
            at = rng.uniform(t0, t1)
            if outcome == "unknown" and rng.random() < 0.5:
                at = -1.0  # never applied
            planned.append((t0, t1, at, kind, {"cpu": n} if kind == "update" else None, outcome))
        state = None
        results: dict[int, Any] = {}
        for i in sorted(range(len(planned)), key=lambda i: planned[i][2]):
            t0, t1, at, kind, value, outcome = planned[i]
            if at < 0 or outcome == "failed":
                continue
            if kind == "submit":
                state = dict(value)
            elif kind == "update":
                state = {**state, **value}
            else:
                results[i] = None if state is None else dict(state)
        for i in sorted(range(len(planned)), key=lambda i: planned[i][0]):
            t0, t1, _, kind, value, outcome = planned[i]
            op = h.invoke(kind, key, value, at=t0)
            h.complete(op, outcome, results.get(i), at=t1)
    return h


def load_checker(path: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location("checker_under_test", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--checker", help="a history.py to time instead of harness.history")
    parser.add_argument("--keys", type=int, default=9)
    parser.add_argument("--ops-per-key", type=int, default=704)
    parser.add_argument("--clients", type=int, default=3)
    args = parser.parse_args()
    module = load_checker(args.checker) if args.checker else hh
    h = simulated_history(args.keys, args.ops_per_key, args.clients, history=module)
    by_key: dict[str, list[Any]] = {}
    for o in h.ops:
        by_key.setdefault(o.key, []).append(o)
    t = time.perf_counter()
    lost = sum(len(module.lost_writes(ops)) for ops in by_key.values())
    lost_s = time.perf_counter() - t
    t = time.perf_counter()
    verdicts = [module.linearizable(ops) for ops in by_key.values()]
    search_s = time.perf_counter() - t
    print(f"{len(h.ops)} ops on {len(by_key)} keys ({args.clients} clients a key): "
          f"lost-write check {lost_s:.2f} s ({lost} lost), linearizability {search_s:.2f} s ({verdicts.count(True)} keys linearizable)")


if __name__ == "__main__":
    main()
