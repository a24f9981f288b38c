"""What the report shows, read from ledgers (pure): every record as a row, and each figure as a series across pins.

A ledger holds one record per gate run, each naming its pin, profile and build key; the gates' figures are in its
metrics, their floors in its criteria and properties. Pins are ordered by their first record, so a chart reads left
to right as the pin moved; a pin's point is its newest record of that gate and profile (a later failure overrides an
earlier pass, as ship reads it). A try's records (build key ``try:...``) are shown as their own pins.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ci.files import shown
from ci.gates import registry
from ci.gates.perf.gate import check_floors
from ci.release import ledger as ledger_mod

TRY_DIR = Path("build") / "try"  # where nox -s try keeps each commit's folder (ci.commands.try_fork)
TRY_PREFIX = "try:"  # a try record's build key: never a build's, so ship never counts it
BISECT_PREFIX = "bisect:"
LEG_RE = re.compile(r"^(?:(?P<leg>[a-z0-9_]+)\.)?(?P<metric>acceptance|tokens_per_step)$")


@dataclass(frozen=True)
class Row:
    """One record, as the table shows it."""

    source: str  # the ledger's name as given
    line: int
    gate: str
    verdict: str
    pin: str
    profile: str
    build_key: str
    time: str
    summary: str
    counts: Mapping[str, int]
    metrics: Mapping[str, float]
    properties: Mapping[str, str]
    criteria: Mapping[str, Any]
    seconds: float | None
    kind: str  # "release", "try" or "bisect"

    @property
    def pin_label(self) -> str:
        short = self.pin[:7] if self.pin else "no pin"
        return f"{short} (try)" if self.kind == "try" else f"{short} (bisect)" if self.kind == "bisect" else short


@dataclass(frozen=True)
class Point:
    pin: str  # the pin's label
    value: float
    low: float | None = None  # the 95% interval, where the figure has one
    high: float | None = None
    floor: float | None = None
    verdict: str = ""
    line: str = ""  # where the record is: ledger:line


@dataclass(frozen=True)
class Series:
    name: str
    points: tuple[Point, ...]


@dataclass(frozen=True)
class Chart:
    """One figure across pins: its series (a profile, a leg, a gate), each point a pin's newest record."""

    id: str
    title: str
    unit: str
    series: tuple[Series, ...]
    pins: tuple[str, ...]  # the x axis, in order
    note: str = ""


@dataclass(frozen=True)
class Report:
    rows: tuple[Row, ...]
    pins: tuple[str, ...]  # labels, in order of their first record
    charts: tuple[Chart, ...]
    sources: tuple[tuple[str, int, tuple[str, ...]], ...] = ()  # (ledger, records, notes)
    tables: tuple[tuple[str, str, tuple[Row, ...]], ...] = field(default=())  # (pin label, profile, rows)


# -- reading ---------------------------------------------------------------------------------------------------------


def kind_of(build_key: str) -> str:
    return "try" if build_key.startswith(TRY_PREFIX) else "bisect" if build_key.startswith(BISECT_PREFIX) else "release"


def _number(value: object) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if math.isfinite(value) else None


def _seconds(data: Mapping[str, Any], root: Path | None) -> float | None:
    """The gate's seconds: the record's own when it has them, else its JSON artefact's (gpu_tests writes both)."""
    own = _number(data.get("seconds"))
    if own is not None:
        return own
    artefact = (data.get("artefacts") or {}).get("json") if isinstance(data.get("artefacts"), dict) else None
    if not artefact or root is None:
        return None
    try:
        return _number(json.loads((root / str(artefact)).read_text(encoding="utf-8")).get("seconds"))
    except (OSError, ValueError, AttributeError):
        return None


def rows_of(book: ledger_mod.Ledger, source: str, root: Path | None = None) -> list[Row]:
    rows = []
    for rec in book.records:
        d = rec.data
        metrics = {str(k): float(v) for k, v in (d.get("metrics") or {}).items() if _number(v) is not None}
        rows.append(
            Row(
                source=source, line=rec.line, gate=rec.gate, verdict=rec.verdict, pin=str(d.get("pin", "")), profile=str(d.get("profile", "")),
                build_key=rec.build_key, time=str(d.get("time", "")), summary=str(d.get("summary", "")),
                counts={str(k): int(v) for k, v in (d.get("counts") or {}).items() if isinstance(v, int)}, metrics=metrics,
                properties={str(k): str(v) for k, v in (d.get("properties") or {}).items()}, criteria=dict(d.get("criteria") or {}),
                seconds=_seconds(d, root), kind=kind_of(rec.build_key),
            )
        )  # fmt: skip
    return rows


def read_ledgers(paths: Sequence[Path], root: Path | None = None, key: bytes | None = None) -> Report:
    """Every record of ``paths`` (each read and checked as ship reads it), as the report's rows, tables and charts;
    each ledger named relative to ``root`` where it lies inside it (a published page names no machine's path)."""
    rows: list[Row] = []
    sources = []
    for path in paths:
        book = ledger_mod.read(path, key)
        name = shown(path, root) if root is not None else str(path)
        found = rows_of(book, name, root)
        rows += found
        sources.append((name, len(found), book.notes))
    return report_of(rows, tuple(sources))


def report_of(rows: Sequence[Row], sources: tuple[tuple[str, int, tuple[str, ...]], ...] = ()) -> Report:
    ordered = sorted(rows, key=lambda r: (r.time, r.source, r.line))
    pins: list[str] = []
    for r in ordered:
        if r.pin_label not in pins:
            pins.append(r.pin_label)
    tables = []
    for pin in pins:
        for profile in sorted({r.profile for r in ordered if r.pin_label == pin}):
            tables.append((pin, profile, tuple(r for r in ordered if r.pin_label == pin and r.profile == profile)))
    return Report(tuple(ordered), tuple(pins), charts(ordered, pins), sources, tuple(tables))


# -- the figures -----------------------------------------------------------------------------------------------------


def newest(rows: Iterable[Row], gate: str) -> dict[tuple[str, str], Row]:
    """(pin label, profile) -> the newest record of ``gate`` there."""
    out: dict[tuple[str, str], Row] = {}
    for r in rows:
        if r.gate == gate:
            out[(r.pin_label, r.profile)] = r  # rows are in time order: the last one stands
    return out


def perf_floors(row: Row) -> dict[str, float]:
    """Each perf check's floor, from the criteria the record was judged against; checks with none written left out."""
    return {name: floor for name, floor in check_floors(row.criteria).items() if math.isfinite(floor)}


def _where(r: Row) -> str:
    return f"{r.source}:{r.line}"


def charts(rows: Sequence[Row], pins: Sequence[str]) -> tuple[Chart, ...]:
    out: list[Chart] = []
    out += _perf_charts(rows, pins)
    out += _oracle_charts(rows, pins)
    out += _leg_charts(rows, pins)
    out += _seconds_charts(rows, pins)
    return tuple(out)


def _perf_charts(rows: Sequence[Row], pins: Sequence[str]) -> list[Chart]:
    stood = newest(rows, "perf")
    names = sorted({k[: -len(".median")] for r in stood.values() for k in r.metrics if k.endswith(".median")})
    out = []
    for i, name in enumerate(names):
        series = []
        for profile in sorted({p for (_, p) in stood}):
            points = []
            for pin in pins:
                r = stood.get((pin, profile))
                if r is None or f"{name}.median" not in r.metrics:
                    continue
                m = r.metrics
                points.append(Point(pin, m[f"{name}.median"], m.get(f"{name}.low"), m.get(f"{name}.high"), perf_floors(r).get(name), r.verdict, _where(r)))
            if points:
                series.append(Series(profile, tuple(points)))
        out.append(Chart(f"perf-{i + 1}", f"perf: {name}", "ratio" if "/" in name else "", tuple(series), tuple(pins), "median of the rounds, its 95% interval, the floor dashed"))
    return out


def _oracle_charts(rows: Sequence[Row], pins: Sequence[str]) -> list[Chart]:
    stood = newest(rows, "oracle")
    out = []
    for profile in sorted({p for (_, p) in stood}):
        series = []
        for metric, floor_key, label in (("worst_output_db", "floor_output_db", "worst output"), ("worst_slots_db", "floor_slots_db", "worst slots")):
            points = []
            for pin in pins:
                r = stood.get((pin, profile))
                if r is None or metric not in r.metrics:
                    continue
                floor = _number_of(r.properties.get(floor_key))
                points.append(Point(pin, r.metrics[metric], floor=floor, verdict=r.verdict, line=_where(r)))
            if points:
                series.append(Series(label, tuple(points)))
        if series:
            out.append(Chart(f"oracle-{profile}", f"oracle SNR, {profile}", "dB", tuple(series), tuple(pins), "the worst case's SNR of the outputs and of the snapshot slots, the floors dashed"))
    return out


def _number_of(text: str | None) -> float | None:
    try:
        return float(text) if text not in (None, "") else None
    except ValueError:
        return None


def _leg_charts(rows: Sequence[Row], pins: Sequence[str]) -> list[Chart]:
    stood = newest(rows, "equivalence")
    out = []
    for metric, title in (("acceptance", "acceptance per drafter leg"), ("tokens_per_step", "tokens per step per drafter leg")):
        legs: dict[tuple[str, str], list[Point]] = {}
        for pin in pins:
            for (p, profile), r in sorted(stood.items()):
                if p != pin:
                    continue
                for key, value in r.metrics.items():
                    m = LEG_RE.match(key)
                    if m and m.group("metric") == metric:
                        legs.setdefault((profile, m.group("leg") or "drafter"), []).append(Point(pin, value, verdict=r.verdict, line=_where(r)))
        series = tuple(Series(f"{profile} {leg}", tuple(points)) for (profile, leg), points in sorted(legs.items()))
        if series:
            out.append(Chart(f"legs-{metric}", title, "" if metric == "acceptance" else "tokens", series, tuple(pins), "the equivalence gate's drafter legs"))
    return out


def _seconds_charts(rows: Sequence[Row], pins: Sequence[str]) -> list[Chart]:
    out = []
    for profile in sorted({r.profile for r in rows if r.profile}):
        mine = [r for r in rows if r.profile == profile]
        series = []
        build: list[Point] = []
        for pin in pins:
            at = [r for r in mine if r.pin_label == pin]
            seconds = [_number_of(r.properties.get("build_seconds")) for r in at]
            known = [s for s in seconds if s is not None]
            if known:
                build.append(Point(pin, known[-1], line=_where(at[-1])))
        if build:
            series.append(Series("build", tuple(build)))
        for gate in sorted({r.gate for r in mine}):
            stood = newest(mine, gate)
            points = tuple(Point(pin, r.seconds, verdict=r.verdict, line=_where(r)) for pin in pins if (r := stood.get((pin, profile))) is not None and r.seconds is not None)
            if points:
                series.append(Series(gate, points))
        if series:
            out.append(Chart(f"seconds-{profile}", f"build and gate seconds, {profile}", "s", tuple(series), tuple(pins), "each gate's newest record per pin"))
    return out


def figures_of(row: Row) -> str:
    """The record's figures in a few words, for its table row."""
    parts = []
    counted = [f"{v} {k}" for k, v in row.counts.items() if v]
    if counted:
        parts.append(", ".join(counted))
    gate = registry.by_name(row.gate)
    if gate is not None:  # what a gate measured is its own to say (ci/gates/<gate>/gate.py figures)
        parts += gate.figures(row.metrics, row.properties, row.criteria)
    return "; ".join(parts)
