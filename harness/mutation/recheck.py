"""Run the survivors of a mutation run again, against the tests as they stand now.

`python -m harness.mutation.recheck --sample N --seed S [--json reports/mutation.json]` draws
the same sample as `harness.mutation.run` with that sample size and seed (the mutated files
must be unchanged since that run), applies each mutant the run left alive (the ones named
in its JSON), runs its package's killers in a temp copy, and prints which are killed now.
"""

from __future__ import annotations

import argparse
import json
import random
import tempfile
from pathlib import Path

from harness.mutation.run import PACKAGES, ROOT, copy_tree, draw, try_mutant


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m harness.mutation.recheck")
    p.add_argument("--sample", type=int, default=40)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--json", default=str(ROOT / "reports" / "mutation.json"))
    args = p.parse_args(argv)
    survivors = {pkg: set(r["survivors"]) for pkg, r in json.loads(Path(args.json).read_text()).items()}
    rng = random.Random(args.seed)  # drawn package by package, as the run draws them
    with tempfile.TemporaryDirectory(prefix="minborg-recheck-") as tmp:
        work = copy_tree(tmp)
        for pkg, (files, tests) in PACKAGES.items():
            _, chosen = draw(files, rng, args.sample)
            alive = [m for m in chosen if m.label() in survivors.get(pkg, set())]
            still = 0
            for m in alive:
                killed, _ = try_mutant(work, m, [t for t in tests if (work / t).exists()])
                still += not killed
                print(f"{pkg}: {'killed now' if killed else 'still alive'} {m.label()}", flush=True)
            print(f"{pkg}: {len(chosen) - still} of {len(chosen)} killed with today's tests", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
