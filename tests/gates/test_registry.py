"""One registry of gates: a toy gate added in a test is one class and one line in ``registry.GATES``, and then
gpu_tests runs it, the ledger records it, pins.yaml's release.require may name it and ship requires it. Every gate
declares the criteria its record is bound to, and nothing outside ci/gates/ dispatches on a gate's name."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from ci.commands import gpu_tests
from ci.gates import registry
from ci.gates.protocol import Flags, GateBase, Requirement
from ci.gates.results import CaseResult, GateResult, Status, case_counts
from ci.gates.target import BuildUnderTest, GateOptions
from ci.pin import pins
from ci.release import ledger, ship
from ci.release import standings as release_standings
from tests.support.build import build_cpu, manifest
from tests.support.messages import said
from tests.support.project import Project

WIDTH = len("equivalence")  # ship's table pads each gate's name to the longest one's (route, backend_ops, equivalence, toy)


class ToyGate(GateBase):
    """The whole of a new gate: its name, when ship requires it, how it judges a build and against what."""

    name = "toy"
    flags = Flags(requirement=Requirement.WHEN_NAMED)

    def criteria(self, pins: pins.Pins, profile: str) -> dict[str, str]:
        return {"judges": "build.json is there"}

    def run(self, target: BuildUnderTest, options: GateOptions, out: Path) -> GateResult:
        ok = (target.build.build_dir / "build.json").is_file()
        cases = (CaseResult("build.json", Status.PASSED if ok else Status.FAILED),)
        return GateResult(self.name, cases[0].status, f"build {target.build.key[:12]} has its manifest", cases, counts=case_counts(cases))


def test_a_toy_gate_is_one_class_and_one_registry_line(make_build_project: Callable[..., Project], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(registry, "GATES", (*registry.GATES, ToyGate()))  # the one line
    project = make_build_project("release:\n  require: [toy]\n")  # pins.yaml may name it: the registry says so
    assert build_cpu(project).code == 0
    r = project.ci("ship", "--profile", "cpu", "--check")
    assert r.code == 7
    assert ship.TABLE_ROW.format(gate="toy".ljust(WIDTH), state="MISSING", detail=release_standings.NO_RECORD) in r.out
    r = project.ci("gpu-tests", "--profile", "cpu", "--gate", "toy")
    assert r.code == 0, r.out + r.err
    assert said(gpu_tests.GATE_DONE, r.out, gate="toy", status="passed", summary=f"build {manifest(project)['key'][:12]} has its manifest")
    (rec,) = ledger.read(project.root / "build" / "results" / "ledger.jsonl").records
    assert (rec.gate, rec.verdict, rec.build_key) == ("toy", "passed", manifest(project)["key"])
    assert said(ship.TABLE_ROW, project.ci("ship", "--profile", "cpu", "--check").out, gate="toy".ljust(WIDTH), state="passed")
    assert registry.required(pins.load(project.pins)) == ("route", "backend_ops", "equivalence", "toy")


REPO_PINS = Path(__file__).resolve().parents[2] / "pins.yaml"


def test_every_gate_declares_the_criteria_its_record_is_bound_to() -> None:
    """A gate with no criteria would let any record of it count (binding.py once fell back to {} for archs)."""
    loaded = pins.load(REPO_PINS)
    for gate in registry.GATES:
        assert gate.criteria(loaded, "cpu"), gate.name


def test_a_gate_that_declares_no_criteria_is_refused() -> None:
    class Bare(GateBase):
        name = "bare"

    with pytest.raises(NotImplementedError, match="the bare gate declares no criteria"):
        Bare().criteria(pins.load(REPO_PINS), "cpu")


def test_no_string_dispatch_on_a_gate_name_outside_the_gates() -> None:
    """What a gate is and does lives in its package: no ``gate ==`` / ``.gate !=`` on a name, no gate's name compared
    as a constant, and no ``getattr`` on a gate, anywhere in ci/ outside ci/gates/."""
    import re

    ci = Path(registry.__file__).resolve().parents[1]
    # a literal, a constant (not SHIP: ship's own record, which no gate writes), a module's GATE or NAME
    name = r"(?:[\"']|(?!SHIP\b)[A-Z][A-Z_]{2,}\b|\w+\.(?:GATE|NAME)\b)"
    pattern = re.compile(rf"gate\s*[!=]=\s*{name}|{name}\s*[!=]=\s*\w*\.?gate\b|getattr\(\s*\w*gate\b|\bin\s+[A-Z_]*GATES\b")
    found = [
        f"{path.relative_to(ci.parent)}:{n}: {line.strip()}"
        for path in sorted(ci.rglob("*.py"))
        if "gates" not in path.relative_to(ci).parts[:1]
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if pattern.search(line)
    ]
    assert found == []
