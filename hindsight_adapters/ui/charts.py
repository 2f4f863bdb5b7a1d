"""Two tiny inline SVG charts, drawn on the server (no JavaScript, no CDN).

Only numbers and escaped labels go into the markup; colours come from
presentation attributes so the page's Content-Security-Policy needs no inline styles.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from datetime import UTC, date, datetime, timedelta

from markupsafe import Markup, escape

from hindsight_core.memory.inspection import ActivityPoint, DecayCurve

KIND_COLOURS = {"used": "#2f855a", "unhelpful": "#c53030", "merged": "#3182ce"}
OTHER_COLOUR = "#a0aec0"


def _svg(width: int, height: int, label: str, body: Iterable[str]) -> Markup:
    return Markup(
        f'<svg class="chart" viewBox="0 0 {width} {height}" width="{width}" height="{height}" '
        f'role="img" aria-label="{escape(label)}" xmlns="http://www.w3.org/2000/svg">'
        + "".join(body)
        + "</svg>"
    )


def _text(x: float, y: float, text: str, anchor: str = "start", cls: str = "axis") -> str:
    return (
        f'<text x="{x:.1f}" y="{y:.1f}" text-anchor="{anchor}" class="{cls}" '
        f'font-size="10" fill="#4a5568">{escape(text)}</text>'
    )


def decay_chart(curve: DecayCurve, width: int = 560, height: int = 170) -> Markup:
    """The record's score over time: past since last use, then projected; the eviction
    line and "now" marked."""
    left, right, top, bottom = 34, 10, 10, 24
    pts = curve.points
    t0, t1 = pts[0].at.timestamp(), pts[-1].at.timestamp()
    span = max(t1 - t0, 1.0)
    y_max = max(1.0, max(p.score for p in pts), curve.evict_below) * 1.05
    plot_w, plot_h = width - left - right, height - top - bottom

    def x(ts: float) -> float:
        return left + (ts - t0) / span * plot_w

    def y(v: float) -> float:
        return top + (1 - v / y_max) * plot_h

    line = " ".join(f"{x(p.at.timestamp()):.1f},{y(p.score):.1f}" for p in pts)
    now_x = x(curve.now.timestamp())
    body = [
        f'<line x1="{left}" y1="{top + plot_h}" x2="{left + plot_w}" y2="{top + plot_h}" '
        'stroke="#cbd5e0"/>',
        f'<line x1="{left}" y1="{top}" x2="{left}" y2="{top + plot_h}" stroke="#cbd5e0"/>',
    ]
    for v in (0.0, 0.5, 1.0):
        body.append(_text(left - 4, y(v) + 3, f"{v:.1f}", "end"))
    ev = y(curve.evict_below)
    body.append(
        f'<line x1="{left}" y1="{ev:.1f}" x2="{left + plot_w}" y2="{ev:.1f}" '
        'stroke="#c53030" stroke-dasharray="4 3"/>'
    )
    body.append(_text(left + plot_w, ev - 3, f"archived below {curve.evict_below:g}", "end"))
    body.append(
        f'<line x1="{now_x:.1f}" y1="{top}" x2="{now_x:.1f}" y2="{top + plot_h}" '
        'stroke="#718096" stroke-dasharray="2 2"/>'
    )
    body.append(_text(now_x + 3, top + 9, "now"))
    body.append(f'<polyline points="{line}" fill="none" stroke="#2b6cb0" stroke-width="2"/>')
    body.append(_text(left, height - 2, pts[0].at.date().isoformat()))
    body.append(_text(left + plot_w, height - 2, pts[-1].at.date().isoformat(), "end"))
    label = "score after decay over time" + (" (critical: never decays)" if curve.critical else "")
    return _svg(width, height, label, body)


def activity_chart(
    points: list[ActivityPoint], *, days: int, today: date, width: int = 900, height: int = 130
) -> Markup:
    """Events per day (stacked by kind) over the last ``days`` days."""
    left, right, top, bottom = 28, 10, 8, 34
    per_day: dict[date, dict[str, int]] = defaultdict(dict)
    for p in points:
        per_day[p.day][p.kind] = per_day[p.day].get(p.kind, 0) + p.count
    first = today - timedelta(days=days - 1)
    plot_w, plot_h = width - left - right, height - top - bottom
    peak = max([sum(v.values()) for v in per_day.values()] + [1])
    bar_w = plot_w / days
    body = [
        f'<line x1="{left}" y1="{top + plot_h}" x2="{left + plot_w}" y2="{top + plot_h}" '
        'stroke="#cbd5e0"/>',
        _text(left - 4, top + 8, str(peak), "end"),
        _text(left - 4, top + plot_h, "0", "end"),
    ]
    kinds_seen: list[str] = []
    for i in range(days):
        day = first + timedelta(days=i)
        base: float = top + plot_h
        for kind, n in sorted(per_day.get(day, {}).items()):
            if kind not in kinds_seen:
                kinds_seen.append(kind)
            h = n / peak * plot_h
            base -= h
            colour = KIND_COLOURS.get(kind, OTHER_COLOUR)
            body.append(
                f'<rect x="{left + i * bar_w + 1:.1f}" y="{base:.1f}" '
                f'width="{max(bar_w - 2, 1):.1f}" height="{h:.1f}" fill="{colour}">'
                f"<title>{escape(f'{day.isoformat()}: {n} {kind}')}</title></rect>"
            )
    body.append(_text(left, top + plot_h + 12, first.isoformat()))
    body.append(_text(left + plot_w, top + plot_h + 12, today.isoformat(), "end"))
    legend_x = left
    for kind in kinds_seen or ["used", "unhelpful"]:
        colour = KIND_COLOURS.get(kind, OTHER_COLOUR)
        body.append(
            f'<rect x="{legend_x}" y="{height - 10}" width="8" height="8" fill="{colour}"/>'
        )
        body.append(_text(legend_x + 11, height - 2, kind))
        legend_x += 14 + 7 * len(kind) + 10
    total = sum(p.count for p in points)
    return _svg(width, height, f"{total} events in the last {days} days", body)


def utc_today(now: datetime) -> date:
    """Today's date in UTC for a timezone-aware ``now``."""
    return now.astimezone(UTC).date()
