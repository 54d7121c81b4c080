"""Charts drawn on the server as SVG: no script, readable by a screen reader (each chart
is an image with a label; the page shows the numbers beside it), scaled to the width of
the screen by its viewBox."""

from __future__ import annotations

from datetime import date
from html import escape

from markupsafe import Markup

WIDTH = 640
BAR_HEIGHT = 22
GAP = 8
LABEL_WIDTH = 170
COLORS = ("#1f5fbf", "#b3461a", "#2e7d32", "#6a3fb5", "#8a6d00", "#00707a")


def _svg(width: int, height: int, label: str, body: str) -> Markup:
    return Markup(f'<svg class="chart" viewBox="0 0 {width} {height}" role="img" aria-label="{escape(label)}" '
                  f'preserveAspectRatio="xMinYMin meet" xmlns="http://www.w3.org/2000/svg">'
                  f"<title>{escape(label)}</title>{body}</svg>")


def _number(value: float) -> str:
    return f"{value:,.0f}" if float(value).is_integer() else f"{value:,.2f}"


def bars(items: list[tuple[str, float]], *, label: str, unit: str = "") -> Markup:
    """Horizontal bars, one a row: `items` are (label, value)."""
    if not items:
        return Markup("")
    top = max(v for _, v in items) or 1
    room = WIDTH - LABEL_WIDTH - 80
    rows = []
    for i, (name, value) in enumerate(items):
        y = i * (BAR_HEIGHT + GAP)
        w = max(1.0, room * value / top) if value else 0
        rows.append(f'<text x="{LABEL_WIDTH - 8}" y="{y + BAR_HEIGHT * 0.7:.1f}" text-anchor="end" '
                    f'class="chart-label">{escape(str(name))}</text>'
                    f'<rect x="{LABEL_WIDTH}" y="{y}" width="{w:.1f}" height="{BAR_HEIGHT}" '
                    f'fill="{COLORS[i % len(COLORS)]}"/>'
                    f'<text x="{LABEL_WIDTH + w + 6:.1f}" y="{y + BAR_HEIGHT * 0.7:.1f}" '
                    f'class="chart-value">{_number(value)}{escape(unit)}</text>')
    return _svg(WIDTH, len(items) * (BAR_HEIGHT + GAP), label, "".join(rows))


def stacked(items: list[tuple[str, list[float]]], parts: list[str], *, label: str) -> Markup:
    """Horizontal stacked bars: each item is (label, one value per part), with a legend."""
    if not items:
        return Markup("")
    top = max(sum(values) for _, values in items) or 1
    room = WIDTH - LABEL_WIDTH - 60
    rows = [_legend(parts, 0)]
    for i, (name, values) in enumerate(items):
        y = 28 + i * (BAR_HEIGHT + GAP)
        x = float(LABEL_WIDTH)
        rows.append(f'<text x="{LABEL_WIDTH - 8}" y="{y + BAR_HEIGHT * 0.7:.1f}" text-anchor="end" '
                    f'class="chart-label">{escape(str(name))}</text>')
        for j, value in enumerate(values):
            w = room * value / top
            if w > 0:
                rows.append(f'<rect x="{x:.1f}" y="{y}" width="{w:.1f}" height="{BAR_HEIGHT}" '
                            f'fill="{COLORS[j % len(COLORS)]}"/>')
            x += w
        rows.append(f'<text x="{x + 6:.1f}" y="{y + BAR_HEIGHT * 0.7:.1f}" class="chart-value">'
                    f'{_number(sum(values))}</text>')
    return _svg(WIDTH, 28 + len(items) * (BAR_HEIGHT + GAP), label, "".join(rows))


def _legend(names: list[str], y: int) -> str:
    out, x = [], 0
    for i, name in enumerate(names):
        out.append(f'<rect x="{x}" y="{y + 4}" width="12" height="12" fill="{COLORS[i % len(COLORS)]}"/>'
                   f'<text x="{x + 16}" y="{y + 15}" class="chart-label">{escape(name)}</text>')
        x += 24 + 8 * len(name)
    return "".join(out)


def lines(days: list[date], series: dict[str, list[float | None]], *, label: str, top: float = 100) -> Markup:
    """One line per series over days (a gap where a day has no value), 0..top."""
    if not days:
        return Markup("")
    left, right, upper, lower = 40, 10, 30, 30
    height = 240
    plot_w, plot_h = WIDTH - left - right, height - upper - lower
    step = plot_w / max(1, len(days) - 1)
    out = [_legend(list(series), 0)]
    for tick in (0, top / 2, top):
        y = upper + plot_h * (1 - tick / top)
        out.append(f'<line x1="{left}" x2="{WIDTH - right}" y1="{y:.1f}" y2="{y:.1f}" class="chart-grid"/>'
                   f'<text x="{left - 6}" y="{y + 4:.1f}" text-anchor="end" class="chart-label">{_number(tick)}</text>')
    for i in sorted({0, len(days) // 2, len(days) - 1}):
        x = left + step * i
        anchor = "start" if i == 0 else "end" if i == len(days) - 1 else "middle"
        out.append(f'<text x="{x:.1f}" y="{height - 8}" text-anchor="{anchor}" class="chart-label">'
                   f'{days[i].strftime("%d %b")}</text>')
    for j, values in enumerate(series.values()):
        for run in _runs(values):
            points = " ".join(f"{left + step * i:.1f},{upper + plot_h * (1 - min(v, top) / top):.1f}" for i, v in run)
            if len(run) == 1:
                (i, v), = run
                out.append(f'<circle cx="{left + step * i:.1f}" cy="{upper + plot_h * (1 - min(v, top) / top):.1f}" '
                           f'r="3" fill="{COLORS[j]}"/>')
            else:
                out.append(f'<polyline points="{points}" fill="none" stroke="{COLORS[j]}" stroke-width="2.5"/>')
    return _svg(WIDTH, height, label, "".join(out))


def _runs(values: list[float | None]) -> list[list[tuple[int, float]]]:
    runs, current = [], []
    for i, v in enumerate(values):
        if v is None:
            if current:
                runs.append(current)
            current = []
        else:
            current.append((i, v))
    if current:
        runs.append(current)
    return runs


def intervals(items: list[tuple[str, float, float | None, float | None]], *, label: str) -> Markup:
    """Estimates with their interval around a zero line: (label, estimate, low, high),
    as differences of rates (-1..1)."""
    if not items:
        return Markup("")
    lo = min(-0.05, *(low for _, _, low, _ in items if low is not None), *(e for _, e, _, _ in items))
    hi = max(0.05, *(high for _, _, _, high in items if high is not None), *(e for _, e, _, _ in items))
    room = WIDTH - LABEL_WIDTH - 60

    def x(v: float) -> float:
        return LABEL_WIDTH + room * (v - lo) / (hi - lo)

    out = [f'<line x1="{x(0):.1f}" x2="{x(0):.1f}" y1="0" y2="{len(items) * (BAR_HEIGHT + GAP)}" class="chart-grid"/>']
    for i, (name, estimate, low, high) in enumerate(items):
        y = i * (BAR_HEIGHT + GAP) + BAR_HEIGHT / 2
        out.append(f'<text x="{LABEL_WIDTH - 8}" y="{y + 5:.1f}" text-anchor="end" class="chart-label">'
                   f'{escape(name)}</text>')
        if low is not None and high is not None:
            out.append(f'<line x1="{x(low):.1f}" x2="{x(high):.1f}" y1="{y:.1f}" y2="{y:.1f}" '
                       f'stroke="{COLORS[0]}" stroke-width="3"/>')
        out.append(f'<circle cx="{x(estimate):.1f}" cy="{y:.1f}" r="5" fill="{COLORS[1]}"/>'
                   f'<text x="{x(max(estimate, high if high is not None else estimate)) + 8:.1f}" y="{y + 5:.1f}" '
                   f'class="chart-value">{estimate:+.1%}</text>')
    return _svg(WIDTH, len(items) * (BAR_HEIGHT + GAP), label, "".join(out))
