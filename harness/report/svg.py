"""Small inline SVG pictures for the HTML reports: no script, no external resource, readable on a phone.

- :func:`trend`: a card's headline measure (or its duration) over the
  ledger's runs, with its bound as a dashed line, the newest point marked,
  and the first/last values printed; the y axis always includes the bound,
  so the gap between line and dashes is the room left.
- :func:`measure_bars`: for a comparison, each changed measure as two bars
  (before, after) scaled to its bound.

Every picture carries a ``<title>`` and ``role="img"`` with an
``aria-label`` that says in words what it shows, and a viewBox so it scales
with the page (``width: 100%`` up to its natural size).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from html import escape


@dataclass(frozen=True)
class Point:
    label: str  # e.g. the run's date, shown on hover
    value: float | None  # None: not measured in that run (a gap)


def _fmt(v: float) -> str:
    if v == 0:
        return "0"
    if abs(v) >= 1000 or abs(v) < 0.01:
        return f"{v:.2g}"
    return f"{v:.3g}"


def _finite(values: Sequence[float | None]) -> list[float]:
    return [float(v) for v in values if v is not None and isinstance(v, (int, float)) and math.isfinite(v)]


@dataclass(frozen=True)
class _Frame:
    """Where a trend's values go: ``lo``..``hi`` on the y axis, ``n`` points across, inside the padding."""

    lo: float
    hi: float
    n: int
    w: float  # the plot's width and height (the picture's less the padding)
    h: float
    pad_l: int = 4
    pad_t: int = 6

    def x(self, i: int) -> float:
        return self.pad_l + (self.w * i / (self.n - 1) if self.n > 1 else self.w / 2)

    def y(self, v: float) -> float:
        return self.pad_t + self.h - (v - self.lo) / (self.hi - self.lo) * self.h


def trend(
    points: Sequence[Point],
    *,
    bound: tuple[str, float] | None = None,
    unit: str = "",
    title: str = "",
    width: int = 220,
    height: int = 48,
) -> str:
    """A line over ``points`` (oldest first) with the bound dashed; '' when no point has a value."""
    vals = _finite([p.value for p in points])
    if not vals:
        return ""
    limit = None
    if bound is not None and isinstance(bound[1], (int, float)) and math.isfinite(bound[1]):
        limit = float(bound[1])
    frame = _frame(vals, limit, len(points), width, height)
    op = bound[0] if bound is not None else ""
    parts: list[str] = [_bound_line(frame, op, limit)] if limit is not None else []
    parts += _polylines(frame, points)
    parts += _dots(frame, points, unit)
    newest = next((p.value for p in reversed(points) if p.value is not None), None)
    text = f"{_fmt(float(newest))}{unit}" if newest is not None else "–"
    parts += _side_text(frame, text, op, limit, height)
    label = (
        f"{title}: {len(vals)} of {frame.n} runs measured, newest {text}, range {_fmt(min(vals))} to "
        f"{_fmt(max(vals))}{unit}" + (f", bound {op} {_fmt(limit)}" if limit is not None else "")
    )
    return (
        f'<svg class="trend" role="img" aria-label="{escape(label)}" viewBox="0 0 {width} {height}" '
        f'width="{width}" height="{height}" xmlns="http://www.w3.org/2000/svg" '
        f'style="max-width:100%;height:auto"><title>{escape(label)}</title>{"".join(parts)}</svg>'
    )


def _frame(vals: Sequence[float], limit: float | None, n: int, width: int, height: int) -> _Frame:
    """The y axis spans the values and the bound (so the gap between line and dashes is the room left)."""
    lo, hi = min(vals), max(vals)
    if limit is not None:
        lo, hi = min(lo, limit), max(hi, limit)
    if hi == lo:
        hi, lo = hi + (abs(hi) or 1.0) * 0.5, lo - (abs(lo) or 1.0) * 0.5
    pad_l, pad_r, pad_t, pad_b = 4, 60, 6, 6
    return _Frame(lo, hi, n, width - pad_l - pad_r, height - pad_t - pad_b, pad_l, pad_t)


def _bound_line(f: _Frame, op: str, limit: float) -> str:
    """The bound, dashed across the plot."""
    return (
        f'<line class="bound" x1="{f.pad_l}" x2="{f.pad_l + f.w}" y1="{f.y(limit):.1f}" y2="{f.y(limit):.1f}" '
        f'stroke="#b42318" stroke-width="1" stroke-dasharray="4 3"><title>bound: {escape(op)} {_fmt(limit)}'
        f"</title></line>"
    )


def _polylines(f: _Frame, points: Sequence[Point]) -> list[str]:
    """The line through the measured points, broken where a run measured nothing."""
    segment: list[str] = []
    segments: list[list[str]] = []
    for i, p in enumerate(points):
        if p.value is None or not math.isfinite(float(p.value)):
            if segment:
                segments.append(segment)
            segment = []
            continue
        segment.append(f"{f.x(i):.1f},{f.y(float(p.value)):.1f}")
    if segment:
        segments.append(segment)
    return [
        f'<polyline fill="none" stroke="#1f6feb" stroke-width="1.5" points="{" ".join(seg)}"/>'
        for seg in segments
        if len(seg) > 1
    ]


def _dots(f: _Frame, points: Sequence[Point], unit: str) -> list[str]:
    """A dot per measured run, with its value on hover; the newest run's larger."""
    out = []
    for i, p in enumerate(points):
        if p.value is None or not math.isfinite(float(p.value)):
            continue
        last = i == f.n - 1
        out.append(
            f'<circle cx="{f.x(i):.1f}" cy="{f.y(float(p.value)):.1f}" r="{2.6 if last else 1.6}" '
            f'fill="{"#1f6feb" if last else "#6e9fe6"}"><title>{escape(p.label)}: {_fmt(float(p.value))}'
            f"{escape(unit)}</title></circle>"
        )
    return out


def _side_text(f: _Frame, text: str, op: str, limit: float | None, height: int) -> list[str]:
    """Right of the plot: the newest value, and under it the bound."""
    out = [
        f'<text x="{f.pad_l + f.w + 6}" y="{f.pad_t + f.h / 2 + 4:.1f}" font-size="11" fill="currentColor">'
        f"{escape(text)}</text>"
    ]
    if limit is not None:
        out.append(
            f'<text x="{f.pad_l + f.w + 6}" y="{height - 2}" font-size="9" fill="#b42318">'
            f"{escape(op)} {_fmt(limit)}</text>"
        )
    return out


@dataclass(frozen=True)
class Bar:
    label: str  # "CARD/witness: key"
    before: float | None
    after: float | None
    limit: float | None
    regression: bool = False


def measure_bars(bars: Sequence[Bar], *, width: int = 420, row: int = 40) -> str:
    """Two bars per measure (before grey, after blue; red when it regressed), each as a fraction of its limit
    (the dashed line), under the measure's name; '' when there is nothing to draw."""
    rows = [b for b in bars if b.before is not None or b.after is not None]
    if not rows:
        return ""
    pad = 6
    bar_w = width - 70
    height = row * len(rows) + pad * 2
    parts: list[str] = []
    for i, b in enumerate(rows):
        top = pad + i * row
        scale_to = max([abs(v) for v in _finite([b.before, b.after, b.limit])] or [1.0]) or 1.0
        parts.append(
            f'<text x="0" y="{top + 10}" font-size="10" fill="currentColor">{escape(b.label[:70])}'
            f"<title>{escape(b.label)}</title></text>"
        )
        for j, (val, color) in enumerate(((b.before, "#9aa4b2"), (b.after, "#b42318" if b.regression else "#1f6feb"))):
            if val is None or not math.isfinite(val):
                continue
            length = max(1.0, abs(val) / scale_to * bar_w)
            parts.append(
                f'<rect x="0" y="{top + 14 + j * 10}" width="{length:.1f}" height="8" fill="{color}">'
                f"<title>{'before' if j == 0 else 'after'}: {_fmt(val)}</title></rect>"
            )
        if b.limit is not None and math.isfinite(b.limit):
            lx = abs(b.limit) / scale_to * bar_w
            parts.append(
                f'<line x1="{lx:.1f}" x2="{lx:.1f}" y1="{top + 12}" y2="{top + 34}" stroke="#b42318" '
                f'stroke-dasharray="3 2"><title>bound {_fmt(b.limit)}</title></line>'
            )
        after = "–" if b.after is None else _fmt(b.after)
        parts.append(f'<text x="{bar_w + 6}" y="{top + 30}" font-size="10" fill="currentColor">{escape(after)}</text>')
    label = f"{len(rows)} measure(s) before (grey) and after (blue, red if regressed), against their bounds"
    return (
        f'<svg class="bars" role="img" aria-label="{escape(label)}" viewBox="0 0 {width} {height}" '
        f'width="{width}" height="{height}" xmlns="http://www.w3.org/2000/svg" '
        f'style="max-width:100%;height:auto"><title>{escape(label)}</title>{"".join(parts)}</svg>'
    )
