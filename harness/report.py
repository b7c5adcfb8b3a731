"""Writes the run's results: JUnit XML for CI and the Markdown coverage table in reports/conformance.md."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from pathlib import Path

from harness.coverage import Coverage
from harness.faults import HARNESS, injected_by
from spec.invariants import INVARIANTS

#: Actions the HTTP API v1 gives no way to cause, with why: none since alloc sets are in it.
NOT_IN_API: dict[str, str] = {}
TARGET = 100
MUTATION_BEGIN = "<!-- mutation:begin -->"
MUTATION_END = "<!-- mutation:end -->"


@dataclass
class RunResult:
    target: str
    replicas: int | None
    examples: int
    seed: int | None
    seconds: float
    coverage: Coverage
    failure: str | None = None
    history_details: list[str] = field(default_factory=list)
    history_ok: bool = True
    command: str = ""


def write_junit(path: str | Path, r: RunResult) -> None:
    cases: list[tuple[str, str | None]] = [("stateful_conformance", r.failure), ("history_check", None if r.history_ok else "; ".join(r.history_details[:10]))]
    for inv in INVARIANTS:
        fails = r.coverage.invariant_failures[inv.name]
        cases.append((f"invariant.{inv.name}", f"{fails} violation(s)" if fails else None))
    suite = ET.Element("testsuite", name="minborg-conformance", tests=str(len(cases)),
                       failures=str(sum(1 for _, f in cases if f)), time=f"{r.seconds:.1f}")  # fmt: skip
    for name, failure in cases:
        case = ET.SubElement(suite, "testcase", classname="harness", name=name)
        if failure:
            ET.SubElement(case, "failure", message=failure[:500]).text = failure
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    ET.ElementTree(suite).write(path, encoding="utf-8", xml_declaration=True)


def markdown(r: RunResult) -> str:
    c = r.coverage
    lines = [
        "# Conformance report",
        "",
        f"Command: `{r.command}`  ",
        f"Target: {r.target} (replicas: {r.replicas or 'external'}), examples: {r.examples}, "
        f"seed: {r.seed}, wall time: {r.seconds:.0f} s  ",
        f"Result: **{'PASS' if not r.failure and r.history_ok else 'FAIL'}**",
        "",
    ]
    if r.failure:
        lines += ["## Failure", "", "```", r.failure.strip()[:4000], "```", ""]
    lines += [
        "## Spec actions exercised",
        "",
        "Observed: the action is a step of a spec path that explains a change the harness saw "
        "(a task index's move, once per job and poll for a job's own steps, a machine that appeared, "
        "went down, came back or left, a running task's reservation). Model: the action was applied "
        "to the spec model beside the cell (API operations). The two overlap (an API operation is "
        "also seen in the cell), so the total is the larger of them.",
        "",
        "| action | observed | model | total | target met |",
        "|---|---:|---:|---:|---|",
    ]
    for name in c.action_names():
        tot = c.action_total(name)
        met = "yes" if tot >= TARGET else ("n/a: " + NOT_IN_API[name] if name in NOT_IN_API else "no")
        lines.append(f"| {name} | {c.actions_observed[name]} | {c.actions_model[name]} | {tot} | {met} |")
    lines += [
        "",
        "## Faults injected",
        "",
        "The faults of the catalogue (`harness/faults.py`) that the harness injects: how often, "
        "the steps that ended them and how often each ran, and the spec actions they exercise.",
        "",
        "| fault | injected | undone by | spec actions |",
        "|---|---:|---|---|",
    ]
    for f in injected_by(HARNESS):
        undone = ", ".join(f"{step} {c.faults[step]}" for step in f.undo) or "-"
        lines.append(f"| {f.name} | {c.faults[f.name]} | {undone} | {', '.join(f.spec)} |")
    lines += [
        "",
        "## Invariants checked",
        "",
        "State invariants are checked on every observed state; step invariants on every pair of "
        "consecutive observations. `admitted_jobs_fit_quota` judges the quotas read from "
        f"`GET /v1/quotas` ({c.quota_judged} user-and-band judgements against a quota); "
        "`alloc_tasks_within_alloc` judges the allocs read from `GET /v1/allocs` and the jobs that name their sets "
        f"({c.alloc_judged} judgements of a running task in an alloc).",
        "",
        "| invariant | checks | violations |",
        "|---|---:|---:|",
    ]
    for inv in INVARIANTS:
        lines.append(f"| {inv.name} | {c.invariant_checks[inv.name]} | {c.invariant_failures[inv.name]} |")
    extra = sorted(set(c.invariant_failures) - {i.name for i in INVARIANTS})
    for name in extra:
        lines.append(f"| {name} (harness) | - | {c.invariant_failures[name]} |")
    lines += [
        "",
        "## Run",
        "",
        f"- observations: {c.observations}, explained task transitions: {c.transitions}, "
        f"convergence checks: {c.convergence_checks}, preemptions judged: {c.api_ops['preemptions_judged']}",
        f"- API operations: {dict(sorted((k, v) for k, v in c.api_ops.items() if k != 'preemptions_judged'))}",
        f"- lost windows: {c.lost_windows} (of them {c.declared_downs} opened by the cell's events: a machine declared down between two reads)",
        f"- history: {c.history_ops} operations, {c.task_intervals} task process intervals; "
        f"{'no problem found' if r.history_ok else 'PROBLEMS:'}",
    ]
    lines += [f"  - {d}" for d in r.history_details[:20]]
    return "\n".join(lines) + "\n"


def write_markdown(path: str | Path, r: RunResult) -> None:
    """Rewrite the report, keeping the mutation section (written by harness/mutation) in place."""
    p = Path(path)
    kept = ""
    if p.exists():
        old = p.read_text()
        if MUTATION_BEGIN in old and MUTATION_END in old:
            kept = old[old.index(MUTATION_BEGIN) : old.index(MUTATION_END) + len(MUTATION_END)] + "\n"
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(markdown(r) + ("\n" + kept if kept else ""))


def write_mutation_section(path: str | Path, body: str) -> None:
    p = Path(path)
    text = p.read_text() if p.exists() else "# Conformance report\n"
    section = f"{MUTATION_BEGIN}\n{body.rstrip()}\n{MUTATION_END}\n"
    if MUTATION_BEGIN in text and MUTATION_END in text:
        text = text[: text.index(MUTATION_BEGIN)] + section + text[text.index(MUTATION_END) + len(MUTATION_END) + 1 :]
    else:
        text = text.rstrip() + "\n\n" + section
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(text)
