"""Chart label placement: labels beside their points that never overlap one another.

Widths are estimated from the character count with a generous per-character width, so a
placement that is clear here is clear in a browser too (tests/browser measures it).
"""

from __future__ import annotations

from dataclasses import dataclass

#: Width of one character of a 12 px system-ui label, rounded up (digits and lower case are ~6.7 px).
CHAR_W = 7.4
LINE_H = 15.0
GAP = 2.0
#: Distance from a point to its label.
OFFSET = 9.0


@dataclass(frozen=True)
class Placed:
    """Where one label goes: its text anchor point, side and whether it moved off its point."""

    x: float
    y: float
    anchor: str
    moved: bool
    #: The point the label belongs to (for a leader line when it moved).
    px: float
    py: float

    @property
    def top(self) -> float:
        return self.y - LINE_H + 4


def text_width(text: str, char_w: float = CHAR_W) -> float:
    return len(text) * char_w


def place_labels(points: list[tuple[float, float, str]], *, right: float, top: float, bottom: float) -> list[Placed]:
    """A position for each ``(x, y, text)`` label, in input order.

    A label sits right of its point (left when it would cross ``right``), its baseline 4 px
    below the point. Labels whose boxes would overlap are pushed down (then, if that runs
    past ``bottom``, the stack is pushed back up), each keeping a leader to its point. The
    labels never overlap; when they cannot fit between ``top`` and ``bottom`` the last ones
    go below ``bottom`` (see :func:`lowest`).
    """
    n = len(points)
    xs0: list[float] = []
    xs1: list[float] = []
    anchors: list[str] = []
    for x, _, text in points:
        w = text_width(text)
        if x + OFFSET + w <= right:
            xs0.append(x + OFFSET)
            xs1.append(x + OFFSET + w)
            anchors.append("start")
        else:
            xs0.append(x - OFFSET - w)
            xs1.append(x - OFFSET)
            anchors.append("end")
    natural = [y + 4 for _, y, _ in points]
    order = sorted(range(n), key=lambda i: (natural[i], points[i][0]))
    ys = list(natural)
    low, high = top + LINE_H - 4, bottom
    _sweep(order, xs0, xs1, ys, floor=low, step=LINE_H + GAP)
    if max(ys, default=low) > high:  # past the bottom: push the stack back up from there
        _sweep(order[::-1], xs0, xs1, ys, floor=-high, step=-(LINE_H + GAP))
        if min(ys, default=low) < low:  # too many for the height: down again; the caller grows the chart
            _sweep(order, xs0, xs1, ys, floor=low, step=LINE_H + GAP)
    return [
        Placed(
            x=xs0[i] if anchors[i] == "start" else xs1[i],
            y=ys[i],
            anchor=anchors[i],
            moved=abs(ys[i] - natural[i]) > 1,
            px=points[i][0],
            py=points[i][1],
        )
        for i in range(n)
    ]


def _sweep(order: list[int], xs0: list[float], xs1: list[float], ys: list[float], *, floor: float, step: float) -> None:
    """Place labels in ``order``, each moved by ``step`` past the labels it would overlap.

    ``step`` > 0 sweeps down (``floor`` is the top bound); < 0 sweeps up (``-floor`` the bottom bound).
    """
    placed: list[int] = []
    for i in order:
        ys[i] = max(ys[i], floor) if step > 0 else min(ys[i], -floor)
        while True:
            clash = [j for j in placed if _overlap(xs0, xs1, ys, i, j)]
            if not clash:
                break
            ys[i] = max(ys[j] for j in clash) + step if step > 0 else min(ys[j] for j in clash) + step
        placed.append(i)


def _overlap(xs0: list[float], xs1: list[float], ys: list[float], i: int, j: int) -> bool:
    horizontal = xs0[i] < xs1[j] + GAP and xs0[j] < xs1[i] + GAP
    return horizontal and abs(ys[i] - ys[j]) < LINE_H + GAP - 0.01  # a label moved to exactly one step away is clear


def lowest(placed: list[Placed]) -> float:
    """The lowest baseline of the placed labels (0 for none)."""
    return max((p.y for p in placed), default=0.0)
