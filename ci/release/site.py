"""The report as a static site: one ``index.html`` with every chart drawn inline as SVG and the records' tables, and
each chart again as its own ``.svg`` file. Self-contained: no script, no font, no stylesheet from elsewhere (the
machines that build it and the browsers that open it from an artefact may have no network)."""

from __future__ import annotations

import html
import itertools
import math
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

from ci.files import write_atomic
from ci.release.figures import Chart, Report, Row, figures_of

WIDTH, HEIGHT = 720, 280
LEFT, RIGHT, TOP, BOTTOM = 64, 160, 30, 56
COLOURS = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#17becf", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22")
INDEX = "index.html"

STYLE = """
body { font-family: system-ui, sans-serif; margin: 2em; color: #222; max-width: 1200px; }
h1 { font-size: 1.5em; } h2 { margin-top: 2em; border-bottom: 1px solid #ccc; } h3 { margin-bottom: .3em; }
table { border-collapse: collapse; margin: .5em 0 1.5em; font-size: .9em; }
th, td { border: 1px solid #ddd; padding: .25em .5em; text-align: left; vertical-align: top; }
th { background: #f4f4f4; }
td.passed { color: #1a7f37; } td.failed, td.error { color: #cf222e; font-weight: bold; } td.skipped { color: #9a6700; }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
figure { margin: 1em 0 2em; } figcaption { font-size: .85em; color: #555; }
svg.chart { display: block; background: #fff; border: 1px solid #eee; }
.muted { color: #666; font-size: .85em; }
"""


def _e(text: object) -> str:
    return html.escape(str(text), quote=True)


def _ticks(low: float, high: float, count: int = 5) -> list[float]:
    """Round tick values spanning [low, high]."""
    if high <= low:
        high = low + 1.0
    step = 10 ** math.floor(math.log10((high - low) / count))
    for factor in (1, 2, 2.5, 5, 10):
        if (high - low) / (step * factor) <= count:
            step *= factor
            break
    first = math.floor(low / step) * step
    return [first + i * step for i in range(math.ceil((high - first) / step) + 1)]


def svg(chart: Chart) -> str:
    """The chart as an SVG element: x the pins in order, y the figure; intervals as bars, floors dashed."""
    values = [v for s in chart.series for p in s.points for v in (p.value, p.low, p.high, p.floor) if v is not None]
    low, high = (min(values), max(values)) if values else (0.0, 1.0)
    pad = (high - low) * 0.08 or abs(high) * 0.1 or 1.0
    ticks = _ticks(low - pad if low - pad >= 0 or low < 0 else 0.0, high + pad)  # seconds, dB, ratios: no axis below 0
    y0, y1 = ticks[0], ticks[-1]
    plot_w, plot_h = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM
    n = max(len(chart.pins), 1)

    spread = min(8.0, plot_w / n / (2 * max(len(chart.series), 1)))  # the series side by side at a pin, none hidden

    def x(pin: str, i: int | None = None) -> float:
        at = LEFT + plot_w * (chart.pins.index(pin) + 0.5) / n
        return at if i is None else at + spread * (i - (len(chart.series) - 1) / 2)

    def y(value: float) -> float:
        return TOP + plot_h * (1 - (value - y0) / (y1 - y0))

    out = [
        f'<svg class="chart" id="{_e(chart.id)}" xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{HEIGHT}" viewBox="0 0 {WIDTH} {HEIGHT}" role="img" aria-label="{_e(chart.title)}">',
        f"<title>{_e(chart.title)}</title>",
        f'<text x="{LEFT}" y="18" font-size="13" font-weight="bold">{_e(chart.title)}</text>',
    ]
    for t in ticks:
        out.append(f'<line x1="{LEFT}" x2="{WIDTH - RIGHT}" y1="{y(t):.1f}" y2="{y(t):.1f}" stroke="#eee"/>')
        out.append(f'<text x="{LEFT - 6}" y="{y(t) + 4:.1f}" font-size="11" text-anchor="end">{t:.4g}</text>')
    out.append(f'<line x1="{LEFT}" x2="{LEFT}" y1="{TOP}" y2="{TOP + plot_h}" stroke="#888"/>')
    out.append(f'<line x1="{LEFT}" x2="{WIDTH - RIGHT}" y1="{TOP + plot_h}" y2="{TOP + plot_h}" stroke="#888"/>')
    if chart.unit:
        out.append(f'<text x="14" y="{TOP + plot_h / 2:.1f}" font-size="11" transform="rotate(-90 14 {TOP + plot_h / 2:.1f})" text-anchor="middle">{_e(chart.unit)}</text>')
    for pin in chart.pins:
        out.append(f'<text x="{x(pin):.1f}" y="{TOP + plot_h + 16}" font-size="11" text-anchor="middle">{_e(pin)}</text>')
    out.append(f'<text x="{LEFT + plot_w / 2:.1f}" y="{HEIGHT - 8}" font-size="11" text-anchor="middle">pin (in the order each was first gated)</text>')
    for i, series in enumerate(chart.series):
        colour = COLOURS[i % len(COLOURS)]
        pts = [p for p in series.points if p.pin in chart.pins]
        floors = [p for p in pts if p.floor is not None]
        for a, b in itertools.pairwise(floors):
            out.append(f'<line class="floor" x1="{x(a.pin):.1f}" x2="{x(b.pin):.1f}" y1="{y(a.floor or 0):.1f}" y2="{y(b.floor or 0):.1f}" stroke="{colour}" stroke-dasharray="5 4"/>')
        for p in floors:
            half = plot_w / n / 3
            out.append(f'<line class="floor" x1="{x(p.pin) - half:.1f}" x2="{x(p.pin) + half:.1f}" y1="{y(p.floor or 0):.1f}" y2="{y(p.floor or 0):.1f}" stroke="{colour}" stroke-dasharray="5 4"><title>{_e(series.name)} floor {p.floor:g} at {_e(p.pin)}</title></line>')
        if len(pts) > 1:
            line = " ".join(f"{x(p.pin, i):.1f},{y(p.value):.1f}" for p in pts)
            out.append(f'<polyline points="{line}" fill="none" stroke="{colour}" stroke-width="1.5"/>')
        for p in pts:
            if p.low is not None and p.high is not None:
                out.append(f'<line class="interval" x1="{x(p.pin, i):.1f}" x2="{x(p.pin, i):.1f}" y1="{y(p.low):.1f}" y2="{y(p.high):.1f}" stroke="{colour}" stroke-width="3" opacity=".45"/>')
            fill = colour if p.verdict in ("passed", "") else "#fff"
            tip = f"{series.name} at {p.pin}: {p.value:.4g}" + (f" [{p.low:.4g}, {p.high:.4g}]" if p.low is not None and p.high is not None else "")
            tip += (f", floor {p.floor:g}" if p.floor is not None else "") + (f", {p.verdict}" if p.verdict else "") + (f" ({p.line})" if p.line else "")
            out.append(f'<circle class="point" cx="{x(p.pin, i):.1f}" cy="{y(p.value):.1f}" r="4" fill="{fill}" stroke="{colour}" stroke-width="1.5"><title>{_e(tip)}</title></circle>')
        ly = TOP + 14 * i + 6
        out.append(f'<rect x="{WIDTH - RIGHT + 12}" y="{ly - 8}" width="10" height="10" fill="{colour}"/>')
        out.append(f'<text x="{WIDTH - RIGHT + 26}" y="{ly + 1}" font-size="11">{_e(series.name)}</text>')
    out.append("</svg>")
    return "\n".join(out)


def _table(rows: Sequence[Row]) -> str:
    head = "<tr><th>gate</th><th>verdict</th><th>figures</th><th>seconds</th><th>time</th><th>summary</th><th>record</th></tr>"
    body = []
    for r in rows:
        seconds = f"{r.seconds:.1f}" if r.seconds is not None else ""
        body.append(
            f'<tr class="record" data-gate="{_e(r.gate)}"><td>{_e(r.gate)}</td><td class="{_e(r.verdict)}">{_e(r.verdict)}</td>'
            f"<td>{_e(figures_of(r))}</td><td class=\"num\">{seconds}</td><td>{_e(r.time)}</td><td>{_e(r.summary)}</td>"
            f'<td class="muted">{_e(r.source)}:{r.line}</td></tr>'
        )
    return "<table>" + head + "".join(body) + "</table>"


def page(report: Report, title: str, drawn: Mapping[str, str] | None = None) -> str:
    """The whole report as one HTML document; ``drawn``: each chart's SVG by its id, when drawn already."""
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f"<title>{_e(title)}</title>",
        f"<style>{STYLE}</style></head><body>",
        f"<h1>{_e(title)}</h1>",
        f'<p class="muted">{len(report.rows)} records of {len(report.pins)} pins, written {_e(time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()))} by nox -s report. '
        "A pin's point is its newest record of the gate and profile; a hollow point did not pass.</p>",
        "<ul>" + "".join(f"<li>{_e(s)}: {n} records" + "".join(f" ({_e(note)})" for note in notes) + "</li>" for s, n, notes in report.sources) + "</ul>",
        "<h2>Figures across pins</h2>",
    ]
    if not report.charts:
        parts.append('<p class="muted">No record carries a figure yet.</p>')
    for chart in report.charts:
        parts.append(f'<figure>{drawn[chart.id] if drawn else svg(chart)}<figcaption>{_e(chart.note)}; <a href="{_e(chart.id)}.svg">{_e(chart.id)}.svg</a></figcaption></figure>')
    parts.append("<h2>Records, per pin and profile</h2>")
    for pin, profile, rows in report.tables:
        parts.append(f'<h3 id="{_e(pin)}-{_e(profile)}">{_e(pin)}, {_e(profile or "no profile")}</h3>')
        parts.append(_table(rows))
    parts.append("</body></html>")
    return "\n".join(parts) + "\n"


def write(report: Report, out: Path, title: str) -> Path:
    """``out/index.html`` and one SVG file per chart; the page is written last, so a reader never sees a page whose
    charts are missing."""
    out.mkdir(parents=True, exist_ok=True)
    drawn = {chart.id: svg(chart) for chart in report.charts}  # each drawn once, for its file and the page
    for chart_id, drawing in drawn.items():
        write_atomic(out / f"{chart_id}.svg", '<?xml version="1.0" encoding="UTF-8"?>\n' + drawing + "\n")
    index = out / INDEX
    write_atomic(index, page(report, title, drawn))
    return index
