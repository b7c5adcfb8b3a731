"""Mutation testing of spec/, reference/scheduler/ and the master's transition code, in a temp copy of the tree.

`python -m harness.mutation.run [--sample N] [--seed S]` generates AST mutants (comparison,
boolean, arithmetic and constant changes, negated conditions, dropped returns), samples N
per package, runs the package's killer tests against each mutant in a temp copy of the
repository (so the working tree is never touched), and writes the kill rate per package
into reports/conformance.md. mutmut 3 installs here but wants its config in setup.cfg or
pyproject.toml and runs its own test selection; this driver keeps the killer command
explicit per package and the sample bounded, which a two-core host needs.
"""

from __future__ import annotations

import argparse
import ast
import json
import random
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PYTEST = [sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider", "-o", "addopts="]
#: Every unit test of the scheduler and of the master: a file's name says what it tests. The
#: scheduler's include its benchmark's (bench/tests), which run whole passes over synthetic cells.
SCHED_TESTS = sorted(
    str(p.relative_to(ROOT)) for d in ("tests/unit", "bench/tests") for p in (ROOT / d).glob("test_scheduler_*.py")
)
MASTER_TESTS = sorted(str(p.relative_to(ROOT)) for p in (ROOT / "tests" / "unit").glob("test_master_*.py"))
#: package -> (files to mutate, killer tests). The live stateful test is too slow to run per
#: mutant (minutes each), so the killers are the unit tests and the harness's own tests.
PACKAGES: dict[str, tuple[list[str], list[str]]] = {
    "spec": (["spec/fmap.py", "spec/model.py", "spec/actions.py", "spec/invariants.py"], ["spec/tests", "harness/tests"]),
    "reference/scheduler": (
        [f"reference/scheduler/{n}.py" for n in ("engine", "feasibility", "policies", "queue", "classes", "admission", "plan", "cellview", "adapter")],
        SCHED_TESTS,
    ),
    "reference/master (cell, reports)": (
        ["reference/master/cell.py", "reference/master/reports.py"],
        MASTER_TESTS,
    ),
}
TIMEOUT_S = 120

SWAP_CMP = {ast.Lt: ast.LtE, ast.LtE: ast.Lt, ast.Gt: ast.GtE, ast.GtE: ast.Gt, ast.Eq: ast.NotEq,
            ast.NotEq: ast.Eq, ast.Is: ast.IsNot, ast.IsNot: ast.Is, ast.In: ast.NotIn, ast.NotIn: ast.In}  # fmt: skip
SWAP_BIN = {ast.Add: ast.Sub, ast.Sub: ast.Add, ast.Mult: ast.FloorDiv, ast.FloorDiv: ast.Mult}


@dataclass(frozen=True)
class Mutant:
    path: str
    line: int
    kind: str
    index: int  # which node of that kind, in walk order

    def label(self) -> str:
        return f"{self.path}:{self.line} {self.kind}"


def _targets(tree: ast.AST) -> list[tuple[ast.AST, str]]:
    out: list[tuple[ast.AST, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare) and type(node.ops[0]) in SWAP_CMP:
            out.append((node, "compare"))
        elif isinstance(node, ast.BoolOp):
            out.append((node, "boolop"))
        elif isinstance(node, ast.BinOp) and type(node.op) in SWAP_BIN:
            out.append((node, "binop"))
        elif isinstance(node, ast.Constant) and type(node.value) is int:
            out.append((node, "number"))
        elif isinstance(node, ast.Constant) and type(node.value) is bool:
            out.append((node, "bool"))
        elif isinstance(node, ast.If | ast.While):
            out.append((node, "negate"))
        elif isinstance(node, ast.Return) and node.value is not None:
            out.append((node, "return_none"))
    return out


def _skipped(node: ast.AST, parents: dict[ast.AST, ast.AST]) -> bool:
    """Docstrings, annotations and `return None` (whose mutant would be equivalent)."""
    p = parents.get(node)
    if isinstance(node, ast.Return) and isinstance(node.value, ast.Constant) and node.value.value is None:
        return True
    return isinstance(p, ast.Expr) or isinstance(p, ast.AnnAssign) and p.annotation is node


def enumerate_mutants(path: str) -> list[Mutant]:
    tree = ast.parse((ROOT / path).read_text())
    parents = {c: p for p in ast.walk(tree) for c in ast.iter_child_nodes(p)}
    return [
        Mutant(path, getattr(n, "lineno", 0), kind, i)
        for i, (n, kind) in enumerate(_targets(tree))
        if not _skipped(n, parents)
    ]


def mutate(source: str, m: Mutant) -> str:
    tree = ast.parse(source)
    node, kind = _targets(tree)[m.index]
    if kind == "compare":
        node.ops[0] = SWAP_CMP[type(node.ops[0])]()  # type: ignore[attr-defined]
    elif kind == "boolop":
        node.op = ast.Or() if isinstance(node.op, ast.And) else ast.And()  # type: ignore[attr-defined]
    elif kind == "binop":
        node.op = SWAP_BIN[type(node.op)]()  # type: ignore[attr-defined]
    elif kind == "number":
        node.value = node.value + 1  # type: ignore[attr-defined]
    elif kind == "bool":
        node.value = not node.value  # type: ignore[attr-defined]
    elif kind == "negate":
        node.test = ast.UnaryOp(ast.Not(), node.test)  # type: ignore[attr-defined]
    elif kind == "return_none":
        node.value = ast.Constant(None)  # type: ignore[attr-defined]
    return ast.unparse(ast.fix_missing_locations(tree))


def draw(files: list[str], rng: random.Random, sample: int) -> tuple[list[Mutant], list[Mutant]]:
    """Every mutant of `files`, and the sample of them a run with this generator tests."""
    everyone = [m for f in files for m in enumerate_mutants(f)]
    return everyone, everyone if sample <= 0 or sample >= len(everyone) else rng.sample(everyone, sample)


def try_mutant(work: Path, m: Mutant, tests: list[str]) -> tuple[bool, float]:
    """Apply `m` in the copy at `work`, run the killers, put the file back: (killed, seconds)."""
    target = work / m.path
    original = (ROOT / m.path).read_text()
    target.write_text(mutate(original, m))
    try:
        return run_killer(work, tests)
    finally:
        target.write_text(original)


def copy_tree(tmp: str) -> Path:
    """A copy of the repository to mutate, without what a run does not need."""
    work = Path(tmp) / "tree"
    shutil.copytree(ROOT, work, ignore=shutil.ignore_patterns(".git", "__pycache__", ".tox", "*.egg-info", "mutants", ".venv"))
    return work


def run_killer(work: Path, tests: list[str]) -> tuple[bool, float]:
    """(killed, seconds): a mutant is killed when the tests fail or time out."""
    t0 = time.monotonic()
    try:
        r = subprocess.run(PYTEST + tests, cwd=work, capture_output=True, timeout=TIMEOUT_S)
        killed = r.returncode != 0
    except subprocess.TimeoutExpired:
        killed = True
    return killed, time.monotonic() - t0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m harness.mutation.run")
    p.add_argument("--sample", type=int, default=40, help="mutants per package (0: all)")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--package", action="append", help="only these packages (names as in the report)")
    p.add_argument("--report", default=str(ROOT / "reports" / "conformance.md"))
    p.add_argument("--json", default=str(ROOT / "reports" / "mutation.json"))
    args = p.parse_args(argv)
    rng = random.Random(args.seed)
    results = {}
    with tempfile.TemporaryDirectory(prefix="minborg-mutation-") as tmp:
        work = copy_tree(tmp)
        for pkg, (files, tests) in PACKAGES.items():
            if args.package and pkg not in args.package:
                continue
            tests = [t for t in tests if (work / t).exists()]
            everyone, chosen = draw(files, rng, args.sample)
            killed, survivors, secs = 0, [], 0.0
            for m in chosen:
                k, s = try_mutant(work, m, tests)
                secs += s
                killed += k
                if not k:
                    survivors.append(m.label())
                print(f"{pkg}: {'killed ' if k else 'SURVIVED'} {m.label()} ({s:.1f}s)", flush=True)
            results[pkg] = {
                "total_mutants": len(everyone), "sampled": len(chosen), "killed": killed,
                "rate": killed / len(chosen) if chosen else 0.0, "survivors": survivors,
                "seconds": round(secs), "killer": " ".join(["pytest -x -q", *tests]),
            }  # fmt: skip
    Path(args.json).write_text(json.dumps(results, indent=2) + "\n")
    from harness.report import write_mutation_section

    write_mutation_section(args.report, section(results, args))
    return 0


def section(results: dict[str, dict], args: argparse.Namespace) -> str:
    lines = [
        "## Mutation testing",
        "",
        f"Command: `python -m harness.mutation.run --sample {args.sample} --seed {args.seed}` "
        "(AST mutants: comparisons, and/or, arithmetic, integer and boolean constants, negated "
        "conditions, returns replaced by None; each run against its package's killer tests in a temp copy). "
        "The live stateful test is not a killer: one run of it takes minutes, too slow per mutant.",
        "",
        "| package | mutants | sampled | killed | kill rate | killer |",
        "|---|---:|---:|---:|---:|---|",
    ]
    for pkg, r in results.items():
        lines.append(
            f"| {pkg} | {r['total_mutants']} | {r['sampled']} ({r['sampled'] / max(1, r['total_mutants']):.0%}) | "
            f"{r['killed']} | {r['rate']:.0%} | `{r['killer']}` |"
        )
    lines += ["", "Surviving mutants:", ""]
    for pkg, r in results.items():
        lines += [f"- {pkg}: {s}" for s in r["survivors"]] or []
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
