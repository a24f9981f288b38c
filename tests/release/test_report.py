"""nox -s report: ledgers written by the records module from real gate results (the perf, oracle and equivalence
judges' own), across three pins and two profiles, read back as tables and charts; the page opened in a real headless
Chromium (Debian's package, driven by Playwright): no console error, a row per record, every chart drawn."""

from __future__ import annotations

import itertools
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from ci.commands import report as report_cmd
from ci.gates.equivalence.engine_path import combine
from ci.gates.oracle import judge as oracle
from ci.gates.perf import judge as perf
from ci.gates.results import CaseResult, GateResult, Status, case_counts
from ci.pin.claims import parse_check
from ci.release import figures, ledger, records, site
from tests.support.messages import said

CHROMIUM = Path("/usr/bin/chromium")
PINS = ("8abd563db5a3666adbd6eaa50c6826dfbe9abfef", "b82c8b8000000000000000000000000000000000", "c14872f8407f5b0642f3c395439b929021df753a")
CHECKS = ("prompt(draft) / prompt(base) >= 0.2", "tokens_per_step(draft, code) >= 3.5")


def perf_result(pin: str, shift: float) -> GateResult:
    checks = [parse_check(text, "measured here", 0.1, "pins.yaml: expect.perf.tiny") for text in CHECKS]
    ratios = [0.44, 0.47, 0.48, 0.50, 0.46, 0.45, 0.49, 0.47]  # 8 rounds: a 95% interval of the median needs 6 or more
    steps = [4.5, 4.7, 4.6, 4.8, 4.4, 4.55, 4.65, 4.75]
    values = {checks[0].name: [v + shift for v in ratios], checks[1].name: [v + shift for v in steps]}
    judged = [perf.judge_look(c, values[c.name], None, pin, perf.FIRST_LEVEL) for c in checks]
    return perf.result(judged, None, pin, "tiny", 17.2, rounds=8)


def oracle_result(output_db: float, slots_db: float) -> GateResult:
    floors = oracle.Floors(120.0, 100.0)
    cases = []
    for name, extra in (("gdn-gate-one", 0.0), ("gdn-beta-zero", 3.0)):
        score = oracle.Score(output_db + extra, (slots_db + extra, slots_db + extra + 1), 0, 0)
        cases.append((CaseResult(name, Status.PASSED, name), score))
    return oracle.judge(cases, floors, "CPU", 20.8)


def leg(acceptance: float, tokens_per_step: float) -> GateResult:
    return GateResult("equivalence", Status.PASSED, "PASSED: 3 prompts", (CaseResult("code", Status.PASSED),), counts=case_counts([CaseResult("code", Status.PASSED)]),
                      metrics=(("acceptance", acceptance), ("tokens_per_step", tokens_per_step)), seconds=15.0)  # fmt: skip


def simple(gate: str, status: Status, summary: str, seconds: float) -> GateResult:
    cases = (CaseResult("a", status),)
    return GateResult(gate, status, summary, cases, () if status.ok else (summary,), case_counts(cases), seconds=seconds)


@dataclass(frozen=True)
class Ledgers:
    root: Path
    release: Path
    tried: Path
    records: int


def write_record(root: Path, book: Path, result: GateResult, pin: str, profile: str, key: str, criteria: Mapping[str, Any]) -> None:
    context = ledger.BuildContext(key, pin, "e3b0c442", profile, "CPU" if profile == "cpu" else "Vulkan0", "f" * 64, judged=lambda r: dict(criteria))
    out = book.parent / key.replace(":", "-")[:16]
    out.mkdir(parents=True, exist_ok=True)
    records.record(result, out, {"build_key": key, "profile": profile}, ledger_path=book, build=context, root=root)


@pytest.fixture
def ledgers(tmp_path: Path) -> Ledgers:
    root = tmp_path / "project"
    release = root / "build" / "results" / "ledger.jsonl"
    tried = root / "build" / "try" / "c14872f8407f" / "results" / "ledger.jsonl"
    n = 0
    perf_criteria = {"checks": {"tiny": [[text, float(text.rsplit(">=", 1)[1]), 0.1] for text in CHECKS]}}
    for i, pin in enumerate(PINS[:2]):
        for profile in ("cpu", "vulkan"):
            key = f"{i}{profile}".ljust(64, "0")
            write_record(root, release, simple("route", Status.PASSED, "PASSED: 160 tests", 4.0 + i), pin, profile, key, {})
            bo = Status.FAILED if (i, profile) == (1, "vulkan") else Status.PASSED
            write_record(root, release, simple("backend_ops", bo, "GATED_DELTA_NET: 54 expected, 36 ran" if not bo.ok else "PASSED 54/54", 2.6), pin, profile, key, {"expected": {"GATED_DELTA_NET": 54}})
            write_record(root, release, oracle_result(134.6 - i, 128.8 - 2 * i), pin, profile, key, {"floors": "output 120 dB, slots 100 dB"})
            write_record(root, release, perf_result(pin, 0.02 * i), pin, profile, key, perf_criteria)
            write_record(root, release, combine([("near", leg(0.51 - 0.01 * i, 4.6)), ("dflash", leg(0.42, 5.3 + 0.1 * i))]), pin, profile, key, {})
            n += 5
    key = "try:" + "2cpu".ljust(64, "0")
    for result in (simple("route", Status.PASSED, "PASSED", 4.2), oracle_result(134.0, 128.1), perf_result(PINS[2], -0.05)):
        write_record(root, tried, result, PINS[2], "cpu", key, perf_criteria if result.gate == "perf" else {})
        n += 1
    return Ledgers(root, release, tried, n)


def test_the_ledgers_records_become_rows_and_each_figure_a_chart_across_pins(ledgers: Ledgers) -> None:
    found = figures.read_ledgers([ledgers.release, ledgers.tried], ledgers.root)
    assert len(found.rows) == ledgers.records
    assert found.pins == (PINS[0][:7], PINS[1][:7], f"{PINS[2][:7]} (try)")
    assert [(pin, profile, len(rows)) for pin, profile, rows in found.tables] == [
        (PINS[0][:7], "cpu", 5), (PINS[0][:7], "vulkan", 5), (PINS[1][:7], "cpu", 5), (PINS[1][:7], "vulkan", 5), (f"{PINS[2][:7]} (try)", "cpu", 3),
    ]  # fmt: skip
    charts = {c.id: c for c in found.charts}
    ratio = next(c for c in found.charts if c.title == "perf: prompt(draft) / prompt(base)")
    cpu = next(s for s in ratio.series if s.name == "cpu")
    assert [p.pin for p in cpu.points] == list(found.pins)
    for p in cpu.points:
        assert p.floor == 0.2
        assert p.low is not None
        assert p.high is not None
        assert p.low <= p.value <= p.high
    assert {s.name for s in charts["oracle-cpu"].series} == {"worst output", "worst slots"}
    output = next(s for s in charts["oracle-cpu"].series if s.name == "worst output")
    assert [(p.value, p.floor) for p in output.points] == [(134.6, 120.0), (133.6, 120.0), (134.0, 120.0)]
    assert {s.name for s in charts["legs-acceptance"].series} == {"cpu near", "cpu dflash", "vulkan near", "vulkan dflash"}
    assert [p.value for p in next(s for s in charts["legs-tokens_per_step"].series if s.name == "cpu dflash").points] == pytest.approx([5.3, 5.4])
    seconds = {s.name: s for s in charts["seconds-cpu"].series}
    assert [p.value for p in seconds["route"].points] == [4.0, 5.0, 4.2]  # read from each record's JSON artefact
    failed = next(r for r in found.rows if r.verdict == "failed")
    assert (failed.gate, failed.pin, failed.profile) == ("backend_ops", PINS[1], "vulkan")


def test_the_page_holds_a_row_per_record_and_an_svg_per_chart(ledgers: Ledgers, tmp_path: Path) -> None:
    lines: list[str] = []
    index = report_cmd.session(ledgers.root, [], tmp_path / "site", "the gates across pins", lines.append)  # the default ledgers: release and tries
    text = index.read_text()
    found = figures.read_ledgers([ledgers.release, ledgers.tried], ledgers.root)
    assert text.count('<tr class="record"') == ledgers.records
    assert text.count('<svg class="chart"') == len(found.charts)
    for chart in found.charts:
        assert (tmp_path / "site" / f"{chart.id}.svg").read_text().startswith("<?xml")
    assert "http://" not in text.replace('xmlns="http://www.w3.org/2000/svg"', "")  # nothing fetched from elsewhere
    assert "https://" not in text
    assert said(report_cmd.WROTE, lines[0], records=ledgers.records, pins=3, charts=len(found.charts))


def test_no_ledger_is_one_line(tmp_path: Path) -> None:
    from ci.errors import ConfigError

    with pytest.raises(ConfigError) as caught:
        report_cmd.session(tmp_path, [], tmp_path / "site", "t", lambda _: None)
    assert said(report_cmd.NO_LEDGER, caught.value.message)
    assert not (tmp_path / "site").exists()


def test_a_damaged_ledger_is_refused_naming_its_line(ledgers: Ledgers, tmp_path: Path) -> None:
    from ci.errors import ConfigError

    lines = ledgers.release.read_text().splitlines(keepends=True)
    lines[2] = lines[2].replace('"passed"', '"failed"', 1)
    ledgers.release.write_text("".join(lines))
    with pytest.raises(ConfigError) as caught:
        report_cmd.session(ledgers.root, [ledgers.release], tmp_path / "site", "t", lambda _: None)
    assert "ledger.jsonl:3" in caught.value.message


@pytest.mark.parametrize(("low", "high"), [(0.41, 0.52), (100.0, 135.0), (3.9, 5.6), (2.0, 2.0)])
def test_ticks_are_round_and_span_the_values(low: float, high: float) -> None:
    ticks = site._ticks(low, high)
    assert ticks[0] <= low
    assert ticks[-1] >= high
    assert 2 <= len(ticks) <= 7
    steps = {round(b - a, 9) for a, b in itertools.pairwise(ticks)}
    assert len(steps) == 1
    (step,) = steps
    assert any(abs(step / m - round(step / m)) < 1e-6 and round(step / m) in (1, 2, 5, 10, 25) for m in (1e-3, 1e-2, 1e-1, 1.0, 10.0))


@pytest.mark.skipif(not CHROMIUM.is_file(), reason="Debian's chromium is not installed here: apt-get install -y chromium chromium-driver")
def test_the_report_opens_in_a_real_browser_every_chart_drawn(ledgers: Ledgers, tmp_path: Path) -> None:
    from playwright.sync_api import sync_playwright

    out = tmp_path / "site"
    index = report_cmd.session(ledgers.root, [ledgers.release, ledgers.tried], out, "the gates across pins", lambda _: None)
    found = figures.read_ledgers([ledgers.release, ledgers.tried], ledgers.root)
    errors: list[str] = []
    flags = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update", "--disable-sync", "--no-first-run"]
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=str(CHROMIUM), args=flags)
        try:
            page = browser.new_page(viewport={"width": 1280, "height": 900})
            page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
            page.on("pageerror", lambda e: errors.append(str(e)))
            page.on("requestfailed", lambda r: errors.append(f"request failed: {r.url}"))
            page.goto(index.as_uri(), wait_until="load")
            assert page.locator("tr.record").count() == ledgers.records
            charts = page.locator("svg.chart")
            assert charts.count() == len(found.charts)
            for i in range(charts.count()):
                box = charts.nth(i).bounding_box()
                assert box is not None, found.charts[i].id
                assert box["width"] > 100, found.charts[i].id
                assert box["height"] > 100, found.charts[i].id
                assert charts.nth(i).locator("circle.point").count() > 0
            gates = page.locator("tr.record td:first-child").all_inner_texts()
            assert sorted(gates) == sorted(r.gate for r in found.rows)
            page.screenshot(path=str(out / "report.png"), full_page=True)
        finally:
            browser.close()
    assert errors == []
    assert (out / "report.png").stat().st_size > 10_000


def test_the_page_names_ledgers_by_their_place_in_the_project_and_no_axis_goes_below_zero(ledgers: Ledgers, tmp_path: Path) -> None:
    index = report_cmd.session(ledgers.root, [], tmp_path / "site", "t", lambda _: None)
    text = index.read_text()
    assert str(ledgers.root) not in text  # a published page names no machine's path
    assert "build/results/ledger.jsonl: 20 records" in text
    seconds = (tmp_path / "site" / "seconds-cpu.svg").read_text()
    assert 'text-anchor="end">-' not in seconds
