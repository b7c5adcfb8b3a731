"""Writes one experiment's section of reports/borg-section5.md, and its plot, from its rows.

A section sits between `<!-- begin NAME -->` and `<!-- end NAME -->` lines (NAME is the
experiment and the workload); writing it again replaces that block and leaves the rest of the
file, the hand-written discussion included, as it was. A new section goes at the end.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from .experiments import overhead  # noqa: E402

# What section 5 of the paper found, per experiment, and the figure to compare with.
PAPER = {
    "segregation": "segregating prod and non-prod work would need 20-30% more machines in the median cell (figure 5)",
    "subcells": "subdividing cells into smaller ones would require significantly more machines, more as the subcells shrink (2, 5, 10 subcells; figure 7)",
    "bucketing": "bucketing CPU and RAM requests to the next power of two would need 30-50% more resources in the median case (figure 9)",
    "reclamation": "about 20% of the workload runs in reclaimed resources in a median cell (figure 10)",
}
TITLES = {
    "segregation": "Cell sharing: segregated vs shared prod and non-prod",
    "subcells": "Cell size: one cell vs 2, 5, 10 subcells",
    "bucketing": "Fine-grained requests vs power-of-two buckets",
    "reclamation": "Resource reclamation",
}
HEADER = """# Borg's section-5 utilization experiments

Cell compaction (Verma et al., EuroSys 2015, section 5) of this cell's scheduler on two
workloads; the method, workload model and fit rule are in `bench/section5/` (module
docstrings) and docs/decisions.md. Each section below is written by the command it names.
"""


def _fmt(x: float | int | None) -> str:
    return "does not fit" if x is None else f"{x:g}"


def _pct(x: float | None) -> str:
    return "" if x is None else f"{x:+.0%}"


def paired(row: dict, base: dict) -> str:
    """In how many trials `row` needed more and fewer machines than `base` (the same seeds)."""
    pairs = [(x, y) for x, y in zip(row["each"], base["each"], strict=True) if x is not None and y is not None]
    more = sum(x > y for x, y in pairs)
    fewer = sum(x < y for x, y in pairs)
    return f"more machines in {more} of {len(pairs)} trials, fewer in {fewer}"


def comparisons(experiment: str, rows: Sequence[dict]) -> list[tuple[str, float | None, str]]:
    """(what is compared, relative change of the p90, trial by trial): the figures set beside the paper's."""
    if experiment == "segregation":
        pairs = [(rows[i + 1], rows[i]) for i in range(0, len(rows) - 1, 2)]
    else:
        pairs = [(r, rows[0]) for r in rows[1:]]
    out = []
    for r, base in pairs:
        change = None if not base["p90"] or r["p90"] is None else r["p90"] / base["p90"] - 1
        verb = "vs" if experiment == "reclamation" else "over"
        out.append((f"{r['label']} {verb} {base['label']}", change, paired(r, base)))
    return out


def table(experiment: str, rows: Sequence[dict]) -> list[str]:
    extra = {"reclamation": " CPU / RAM in reclaimed resources |", "bucketing": " CPU / RAM requested (cores / GiB) |"}.get(experiment, "")
    lines = [f"| setting | machines, p90 | min | max | vs first row |{extra}", "|---|---|---|---|---|" + ("---|" if extra else "")]
    ref = overhead(rows)
    for r, o in zip(rows, ref, strict=True):
        cells = f"| {r['label']} | {_fmt(r['p90'])} | {_fmt(r['min'])} | {_fmt(r['max'])} | {_pct(o)} |"
        if experiment == "reclamation":
            s = r["reclaimed_share"]
            cells += f" {_pct_plain(s['cpu'])} / {_pct_plain(s['ram'])} |"
        elif experiment == "bucketing":
            q = r["requested"]
            cells += f" {q['cpu'] / 1000:,.0f} / {q['ram'] / 2**30:,.0f} |"
        lines.append(cells)
    return lines


def _pct_plain(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.1%}"


def section(experiment: str, workload: str, rows: Sequence[dict], about: str, command: str, plot: str | None) -> str:
    lines = [f"## {TITLES[experiment]}: {workload} workload", "", f"Regenerate: `{command}`", "", about, ""]
    lines += table(experiment, rows)
    lines += ["", f"The paper: {PAPER[experiment]}.", ""]
    lines += [
        f"- {what}: {_pct(change) or 'not comparable (a row does not fit)'} at the p90; {trials}"
        for what, change, trials in comparisons(experiment, rows)
    ]
    if experiment == "reclamation":
        lines += [f"- {r['label']}: CPU {_pct_plain(r['reclaimed_share']['cpu'])}, RAM {_pct_plain(r['reclaimed_share']['ram'])} of the placed requests run in reclaimed resources (median over trials, at the compacted size)" for r in rows[1:]]
    if plot:
        lines += ["", f"![{experiment}, {workload}]({plot})"]
    return "\n".join(lines) + "\n"


def write_section(report: Path, name: str, text: str) -> None:
    """Puts `text` between the `name` markers of `report`, replacing what was there, or at the end."""
    begin, end = f"<!-- begin {name} -->", f"<!-- end {name} -->"
    old = report.read_text() if report.exists() else HEADER
    block = f"{begin}\n{text}{end}\n"
    if begin in old and end in old:
        head, rest = old.split(begin, 1)
        new = head + block + rest.split(end, 1)[1].lstrip("\n")
    else:
        new = old.rstrip("\n") + "\n\n" + block
    report.parent.mkdir(parents=True, exist_ok=True)
    report.write_text(new)


def plot(experiment: str, workload: str, rows: Sequence[dict], out: Path) -> None:
    """Bars: each setting's p90 machines, whiskers from the min to the max trial."""
    out.parent.mkdir(parents=True, exist_ok=True)
    labels = [r["label"] for r in rows]
    p90 = [r["p90"] if r["p90"] is not None else float("nan") for r in rows]
    low = [p - r["min"] if r["min"] is not None and r["p90"] is not None else 0 for p, r in zip(p90, rows, strict=True)]
    high = [r["max"] - p if r["max"] is not None and r["p90"] is not None else 0 for p, r in zip(p90, rows, strict=True)]
    fig, ax = plt.subplots(figsize=(max(6, 1.6 * len(rows)), 4.2))
    ax.bar(range(len(rows)), p90, yerr=[low, high], capsize=6, color="#4878a8")
    for i, p in enumerate(p90):
        if p == p:
            ax.annotate(f"{p:g}", (i, p), textcoords="offset points", xytext=(12, 3), fontsize=9)
    ax.set_xticks(range(len(rows)), labels, rotation=15, ha="right")
    ax.set_ylabel("machines needed (p90 of trials; bars: min-max)")
    ax.set_title(f"{TITLES[experiment]} ({workload})", fontsize=10)
    fig.tight_layout()
    fig.savefig(out, dpi=100)
    plt.close(fig)


def relative(path: Path, start: Path) -> str:
    return os.path.relpath(path, start)
