"""Draws a run's timeline (PNG): API operations per second, hello_world calls, leader, faults shaded."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files only: no display on CI or a server
import matplotlib.pyplot as plt  # noqa: E402

from chaos import events  # noqa: E402
from chaos.analysis import RunData  # noqa: E402
from chaos.history import Outcome  # noqa: E402


def timeline(root: Path, title: str, out: Path) -> Path:
    data = RunData.load(root)
    t0 = data.t0
    ok: Counter[int] = Counter()
    bad: Counter[int] = Counter()
    for op in data.ops:
        (ok if op.outcome == Outcome.OK else bad)[int(op.invoke_t - t0)] += 1
    hello_ok: Counter[int] = Counter()
    hello_bad: Counter[int] = Counter()
    for h in data.hello:
        (hello_ok if h["ok"] else hello_bad)[int(h["t"] - t0)] += 1
    fig, axes = plt.subplots(3, 1, figsize=(11, 7), sharex=True)
    seconds = sorted(set(ok) | set(bad)) or [0]
    axes[0].bar(seconds, [ok[s] for s in seconds], width=1.0, color="tab:green", label="ok")
    axes[0].bar(seconds, [bad[s] for s in seconds], width=1.0, bottom=[ok[s] for s in seconds],
                color="tab:red", label="failed/unknown")  # fmt: skip
    axes[0].set_ylabel("API ops/s")
    axes[0].legend(loc="upper right", fontsize=8)
    hs = sorted(set(hello_ok) | set(hello_bad)) or [0]
    axes[1].bar(hs, [hello_ok[s] for s in hs], width=1.0, color="tab:blue", label="ok")
    axes[1].bar(hs, [hello_bad[s] for s in hs], width=1.0, bottom=[hello_ok[s] for s in hs],
                color="tab:red", label="failed")  # fmt: skip
    axes[1].set_ylabel("hello_world/s")
    axes[1].legend(loc="upper right", fontsize=8)
    names = sorted({str(s.get("leader")) for s in data.timeline})
    axes[2].step([s["t"] - t0 for s in data.timeline], [names.index(str(s.get("leader"))) for s in data.timeline],
                 where="post", label="leader (API)")  # fmt: skip
    axes[2].set_yticks(range(len(names)), names)
    down = [s.get("machines_down") or 0 for s in data.timeline]
    twin = axes[2].twinx()
    twin.plot([s["t"] - t0 for s in data.timeline], down, color="tab:orange", label="machines down")
    twin.set_ylabel("machines down")
    axes[2].set_xlabel("seconds since the load started")
    for kind, start, end in events.fault_windows(data.events):
        for ax in axes:
            ax.axvspan(start - t0, end - t0, color="grey", alpha=0.25)
        axes[0].text(start - t0, axes[0].get_ylim()[1] * 0.9, kind, fontsize=7)
    fig.suptitle(title)
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=90)
    plt.close(fig)
    return out
