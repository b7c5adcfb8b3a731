"""Sigma's usage charts: a series of samples as a small inline SVG line chart, pure (no script, nothing fetched)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from html import escape

from reference.master.sigma.history import Point

WIDTH, HEIGHT, PAD = 520, 120, 4


def chart(
    title: str, points: Sequence[Point], value: Callable[[Point], float], label: Callable[[float], str],
    now: float, window_s: float, limit: float | None = None, limit_name: str = "limit",
) -> str:  # fmt: skip
    """A line of `value(point)` over the last `window_s` to `now`, scaled to its peak (a quarter
    above it), with `limit` (a request or a capacity) dashed when it falls within; the latest
    value, the peak and the limit in the caption. Scaled to the data, not to the limit: a task
    using 9m of a 4000m machine still draws a line that moves."""
    if not points:
        return f'<figure class="chart"><figcaption>{escape(title)}: no samples yet</figcaption></figure>'
    values = [value(p) for p in points]
    top = max(max(values) * 1.25, 1e-9)
    # The span drawn: the window, or less while the history is younger (a new replica's
    # first minutes would be a line against the right edge).
    window_s = min(window_s, max(60.0, now - points[0].at))

    def xy(at: float, v: float) -> str:
        x = PAD + (WIDTH - 2 * PAD) * max(0.0, min(1.0, 1 - (now - at) / window_s))
        y = HEIGHT - PAD - (HEIGHT - 2 * PAD) * v / top
        return f"{x:.1f},{y:.1f}"

    line = " ".join(xy(p.at, v) for p, v in zip(points, values, strict=True))
    dots = "" if len(points) > 1 else '<circle cx="{}" cy="{}" r="2.5" class="line"/>'.format(*xy(points[0].at, values[0]).split(","))
    dashed = ""
    if limit and limit <= top:
        y = HEIGHT - PAD - (HEIGHT - 2 * PAD) * limit / top
        dashed = f'<line x1="{PAD}" x2="{WIDTH - PAD}" y1="{y:.1f}" y2="{y:.1f}" class="limit"/>'
    caption = f"{title}: now {label(values[-1])}, peak {label(max(values))}" + (f", {limit_name} {label(limit)}" if limit else "")
    span = f"-{window_s / 60:.0f} min" if window_s >= 120 else f"-{window_s:.0f} s"
    return (
        f'<figure class="chart"><figcaption>{escape(caption)}</figcaption>'
        f'<svg viewBox="0 0 {WIDTH} {HEIGHT}" width="{WIDTH}" height="{HEIGHT}" role="img" aria-label="{escape(caption)}">'
        f'<rect x="0" y="0" width="{WIDTH}" height="{HEIGHT}" class="frame"/>{dashed}'
        f'<polyline points="{line}" class="line"/>{dots}</svg>'
        f'<div class="axis"><span>{span}</span><span>{len(points)} samples</span><span>now</span></div></figure>'
    )
