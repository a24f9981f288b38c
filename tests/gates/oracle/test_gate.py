"""The oracle gate's adapter: its section of pins.yaml (floors per profile, a default, each with where it comes from)
read and checked when the job resolves, the criteria its record is bound to, and what a run judged against."""

from __future__ import annotations

from pathlib import Path

import pytest

from ci.errors import ConfigError
from ci.gates import registry
from ci.gates.oracle import gate as oracle_gate
from ci.gates.results import GateResult, Status
from ci.pin import pins

REPO_PINS = Path(__file__).resolve().parents[3] / "pins.yaml"


def with_expect(tmp_path: Path, old: str, new: str) -> pins.Pins:
    text = REPO_PINS.read_text(encoding="utf-8")
    assert old in text
    path = tmp_path / "pins.yaml"
    path.write_text(text.replace(old, new, 1), encoding="utf-8")
    return pins.load(path)


def test_the_repositorys_floors_are_read_per_profile_with_a_default() -> None:
    loaded = pins.load(REPO_PINS)
    registry.check_expect(loaded)
    cpu = oracle_gate.GATE.expectation(loaded, "cpu")
    assert (cpu.output_db, cpu.slots_db, cpu.time_tolerance) == (120.0, 120.0, 0.5)
    assert "c14872f" in cpu.measured
    assert oracle_gate.GATE.expectation(loaded, "gfx1151").output_db == 100.0  # the default, saying it is not measured there
    assert oracle_gate.GATE.required(loaded)
    assert oracle_gate.GATE.criteria(loaded, "cpu") == {"floors": "output 120 dB, slots 120 dB", "time_tolerance": "0.5", "cases_sha256": oracle_gate.cases_sha256()}


def test_a_misspelt_section_is_refused_naming_the_gate(tmp_path: Path) -> None:
    loaded = with_expect(tmp_path, "  oracle:\n", "  oracel:\n")
    with pytest.raises(ConfigError) as exc:
        registry.check_expect(loaded)
    assert exc.value.message.startswith('pins.yaml: expect.oracel: unknown key (did you mean "oracle"?); known: archs, backend_ops, oracle, perf')


def test_a_floor_that_is_not_a_number_is_refused_when_the_job_resolves(tmp_path: Path) -> None:
    loaded = with_expect(tmp_path, "      output_db: 120\n", "      output_db: high\n")
    with pytest.raises(ConfigError, match=r"pins.yaml: expect.oracle.cpu.output_db: .*high.* is not a number"):
        registry.check_expect(loaded)


def test_a_profile_with_no_floors_and_no_default_is_refused(tmp_path: Path) -> None:
    text = REPO_PINS.read_text(encoding="utf-8")
    start = text.index("    default:\n")
    end = text.index("\n\n", start)
    path = tmp_path / "pins.yaml"
    path.write_text(text[:start] + text[end + 1 :], encoding="utf-8")
    loaded = pins.load(path)
    with pytest.raises(ConfigError) as exc:
        oracle_gate.GATE.criteria(loaded, "gfx1100")
    assert exc.value.message == oracle_gate.NO_FLOORS.format(profile="gfx1100")


def test_without_the_section_the_gate_is_not_required(tmp_path: Path) -> None:
    text = REPO_PINS.read_text(encoding="utf-8")
    start = text.index("  # The oracle gate")
    end = text.index("\n\n", start)
    path = tmp_path / "pins.yaml"
    path.write_text(text[:start] + text[end + 1 :], encoding="utf-8")
    assert not oracle_gate.GATE.required(pins.load(path))


def test_what_a_run_judged_against_is_read_back_from_its_result() -> None:
    loaded = pins.load(REPO_PINS)
    props = (("floor_output_db", "120"), ("floor_slots_db", "120"), ("time_tolerance", "0.5"), ("cases_sha256", oracle_gate.cases_sha256()))
    result = GateResult("oracle", Status.PASSED, "PASSED", properties=props)
    assert oracle_gate.GATE.judged(result, loaded, "cpu") == oracle_gate.GATE.criteria(loaded, "cpu")
    lower = GateResult("oracle", Status.PASSED, "PASSED", properties=(("floor_output_db", "60"), *props[1:]))
    assert oracle_gate.GATE.judged(lower, loaded, "cpu") != oracle_gate.GATE.criteria(loaded, "cpu")  # a lower bar does not count
