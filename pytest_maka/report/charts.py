"""Inline SVG charts, drawn at render time (no script, no fetch): rates with error bars,
the taxonomy breakdown, cost against pass rate, and durations.

Each function returns SVG markup with every text escaped; colours come from the caller.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from html import escape

from ..core.stats import SubjectSummary
from ..core.taxonomy import Status
from .labels import lowest, place_labels

LABEL_W = 150
PLOT_W = 440
ROW_H = 26
PAD = 28
AXIS = "#8c959f"
INK = "#1f2328"
MUTED = "#59636e"
BAR = "#0969da"


def _svg(width: int, height: int, body: list[str], title: str) -> str:
    return (
        f'<svg class="chart" role="img" viewBox="0 0 {width} {height}" '
        f'width="{width}" height="{height}" aria-label="{escape(title)}">'
        f"<title>{escape(title)}</title>{''.join(body)}</svg>"
    )


def _label(x: float, y: float, text: str, anchor: str = "end", size: int = 12, fill: str = INK) -> str:
    return (
        f'<text x="{x:.1f}" y="{y:.1f}" text-anchor="{anchor}" font-size="{size}" fill="{fill}">{escape(text)}</text>'
    )


def _percent_axis(x0: float, width: float, y_top: float, y_bottom: float) -> list[str]:
    out = []
    for pct in (0, 25, 50, 75, 100):
        x = x0 + width * pct / 100
        out.append(
            f'<line x1="{x:.1f}" y1="{y_top}" x2="{x:.1f}" y2="{y_bottom}" stroke="#d1d9e0" '
            f'stroke-dasharray="{"" if pct in (0, 100) else "2,3"}"/>'
        )
        out.append(_label(x, y_bottom + 14, f"{pct}%", "middle", 11, MUTED))
    return out


def _short(name: str, limit: int = 22) -> str:
    return name if len(name) <= limit else name[: limit - 1] + "…"


def pass_rate_chart(subjects: Sequence[SubjectSummary]) -> str:
    """Official pass rate per subject (bar) with its 95% interval (whisker); strict rate as a diamond."""
    height = PAD + ROW_H * max(1, len(subjects)) + 34
    body = _percent_axis(LABEL_W, PLOT_W, 8, height - 30)
    for i, s in enumerate(subjects):
        y = 12 + i * ROW_H
        mid = y + ROW_H / 2 - 2
        body.append(_label(LABEL_W - 8, mid + 4, _short(s.subject)))
        rate = s.official.value
        if rate is None:
            body.append(_label(LABEL_W + 4, mid + 4, "no official rows", "start", 11, MUTED))
            continue
        tip = f"{s.subject}: official {s.official.text} {s.official.interval_text} · strict {s.strict.text}"
        body.append(
            f"<g><title>{escape(tip)}</title>"
            f'<rect x="{LABEL_W}" y="{y + 4}" width="{PLOT_W * rate:.1f}" height="{ROW_H - 12}" '
            f'fill="{BAR}" opacity="0.78" rx="2"/></g>'
        )
        lo, hi = LABEL_W + PLOT_W * s.official.low, LABEL_W + PLOT_W * s.official.high
        body.append(
            f'<path d="M{lo:.1f},{mid:.1f}H{hi:.1f}M{lo:.1f},{mid - 6:.1f}V{mid + 6:.1f}'
            f'M{hi:.1f},{mid - 6:.1f}V{mid + 6:.1f}" stroke="{INK}" stroke-width="1.6" fill="none"/>'
        )
        sv = s.strict.value
        if sv is not None:
            sx = LABEL_W + PLOT_W * sv
            body.append(
                f'<path d="M{sx:.1f},{mid - 5:.1f}l5,5l-5,5l-5,-5z" fill="#fff" stroke="#cf222e" stroke-width="1.5"/>'
            )
        body.append(_label(LABEL_W + PLOT_W + 8, mid + 4, f"{100 * rate:.1f}%", "start", 12))
    ly = height - 6
    body.append(f'<rect x="{LABEL_W}" y="{ly - 9}" width="14" height="9" fill="{BAR}" opacity="0.78"/>')
    body.append(_label(LABEL_W + 18, ly, "official pass rate, 95% interval", "start", 11, MUTED))
    body.append(f'<path d="M{LABEL_W + 250},{ly - 9}l5,5l-5,5l-5,-5z" fill="#fff" stroke="#cf222e"/>')
    body.append(_label(LABEL_W + 260, ly, "strict pass rate", "start", 11, MUTED))
    return _svg(LABEL_W + PLOT_W + 60, height, body, "Pass rate per subject with 95% intervals")


def taxonomy_chart(subjects: Sequence[SubjectSummary], colours: Mapping[Status, tuple[str, str]]) -> str:
    """One 100% stacked bar per subject: the share of its cells in each class."""
    height = PAD + ROW_H * max(1, len(subjects)) + 14
    body = _percent_axis(LABEL_W, PLOT_W, 8, height - 30)
    for i, s in enumerate(subjects):
        y = 12 + i * ROW_H
        body.append(_label(LABEL_W - 8, y + ROW_H / 2 + 2, _short(s.subject)))
        x = float(LABEL_W)
        for status in Status:
            n = s.counts[status]
            if not n or not s.cells:
                continue
            w = PLOT_W * n / s.cells
            tip = f"{s.subject}: {status.value} {n}/{s.cells}"
            body.append(
                f'<rect x="{x:.1f}" y="{y + 4}" width="{w:.1f}" height="{ROW_H - 12}" '
                f'fill="{colours[status][0]}"><title>{escape(tip)}</title></rect>'
            )
            if w > 26:
                body.append(_label(x + w / 2, y + ROW_H / 2 + 2, str(n), "middle", 11, colours[status][1]))
            x += w
    return _svg(LABEL_W + PLOT_W + 20, height, body, "Taxonomy breakdown per subject")


def cost_chart(subjects: Sequence[SubjectSummary]) -> str | None:
    """Official pass rate (with interval) against mean cost per cell; None when no subject reported a cost."""
    points = [(s, s.spend.cost_per_cell) for s in subjects if s.spend.cost_per_cell is not None]
    points = [(s, c) for s, c in points if s.official.value is not None]
    if not points:
        return None
    width, height, left, bottom, top, right = 600, 300, 56, 40, 14, 130
    max_cost = max(c for _, c in points) or 1.0
    max_cost *= 1.1
    pw, ph = width - left - right, height - top - bottom

    def px(c: float) -> float:
        return left + pw * c / max_cost

    def py(r: float) -> float:
        return top + ph * (1 - r)

    body = []
    for pct in (0, 25, 50, 75, 100):
        y = py(pct / 100)
        body.append(f'<line x1="{left}" y1="{y:.1f}" x2="{left + pw}" y2="{y:.1f}" stroke="#d1d9e0"/>')
        body.append(_label(left - 6, y + 4, f"{pct}%", "end", 11, MUTED))
    for j in range(5):
        c = max_cost * j / 4
        body.append(_label(px(c), top + ph + 16, f"${c:.3g}", "middle", 11, MUTED))
    body.append(f'<line x1="{left}" y1="{top + ph}" x2="{left + pw}" y2="{top + ph}" stroke="{AXIS}"/>')
    body.append(_label(left + pw / 2, height - 4, "mean cost per cell (USD)", "middle", 11, MUTED))
    labels = place_labels(
        [(px(c), py(s.official.value or 0.0), _short(s.subject, 18)) for s, c in points],
        right=width - 4,
        top=top,
        bottom=top + ph,
    )
    for s, c in points:
        x, rate = px(c), s.official.value or 0.0
        lo, hi = py(s.official.low), py(s.official.high)
        tip = f"{s.subject}: {s.official.text} {s.official.interval_text}, ${c:.4f} per cell"
        body.append(
            f"<g><title>{escape(tip)}</title>"
            f'<path d="M{x:.1f},{lo:.1f}V{hi:.1f}M{x - 4:.1f},{lo:.1f}h8M{x - 4:.1f},{hi:.1f}h8" '
            f'stroke="{INK}" stroke-width="1.3"/>'
            f'<circle cx="{x:.1f}" cy="{py(rate):.1f}" r="5.5" fill="{BAR}" stroke="#fff" stroke-width="1.5"/>'
            f"</g>"
        )
    for (s, _), at in zip(points, labels, strict=True):
        if at.moved:
            edge = at.x - 2 if at.anchor == "start" else at.x + 2
            body.append(
                f'<path class="leader" d="M{at.px:.1f},{at.py:.1f}L{edge:.1f},{at.y - 4:.1f}" '
                f'stroke="{AXIS}" stroke-width="0.8" fill="none"/>'
            )
        body.append(
            f'<text class="point-label" x="{at.x:.1f}" y="{at.y:.1f}" text-anchor="{at.anchor}" font-size="12" '
            f'fill="{INK}">{escape(_short(s.subject, 18))}<title>{escape(s.subject)}</title></text>'
        )
    height = max(height, int(lowest(labels)) + 8)
    return _svg(width, height, body, "Official pass rate against cost per cell")


def duration_chart(subjects: Sequence[SubjectSummary]) -> str | None:
    """A box per subject: min, quartiles, median and p90 of the cell durations (seconds)."""
    rows = [(s, s.durations) for s in subjects if s.durations is not None]
    if not rows:
        return None
    top_value = max(d.p90 if d.p90 > 0 else d.maximum for _, d in rows) or 1.0
    top_value *= 1.1
    height = PAD + ROW_H * len(rows) + 14
    body = []
    for j in range(5):
        x = LABEL_W + PLOT_W * j / 4
        body.append(f'<line x1="{x:.1f}" y1="8" x2="{x:.1f}" y2="{height - 30}" stroke="#d1d9e0"/>')
        body.append(_label(x, height - 16, f"{top_value * j / 4:.3g}s", "middle", 11, MUTED))

    def px(v: float) -> float:
        return LABEL_W + PLOT_W * min(v, top_value) / top_value

    for i, (s, d) in enumerate(rows):
        y = 12 + i * ROW_H
        mid = y + ROW_H / 2 - 2
        body.append(_label(LABEL_W - 8, mid + 4, _short(s.subject)))
        tip = (
            f"{s.subject}: n={d.n} min {d.minimum:.3g}s p25 {d.p25:.3g}s median {d.median:.3g}s "
            f"p75 {d.p75:.3g}s p90 {d.p90:.3g}s max {d.maximum:.3g}s"
        )
        body.append(
            f"<g><title>{escape(tip)}</title>"
            f'<path d="M{px(d.minimum):.1f},{mid:.1f}H{px(d.p90):.1f}" stroke="{AXIS}" stroke-width="1.3"/>'
            f'<rect x="{px(d.p25):.1f}" y="{y + 5}" width="{max(1.0, px(d.p75) - px(d.p25)):.1f}" '
            f'height="{ROW_H - 14}" fill="#ddf4ff" stroke="{BAR}"/>'
            f'<path d="M{px(d.median):.1f},{y + 5}V{y + ROW_H - 9}" stroke="{INK}" stroke-width="2"/></g>'
        )
    return _svg(LABEL_W + PLOT_W + 20, height, body, "Cell duration per subject (min, p25, median, p75, p90)")
