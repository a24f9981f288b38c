"""One registry of gates: a toy gate added in a test is one class and one line in ``registry.GATES``, and then
gpu_tests runs it, the ledger records it, pins.yaml's release.require may name it and ship requires it."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from ci.commands import gpu_tests
from ci.gates import registry
from ci.gates.results import CaseResult, GateResult, Status, case_counts
from ci.gates.target import BuildUnderTest, GateOptions
from ci.pin import pins
from ci.release import ledger, ship
from tests.support.build import build_cpu, manifest
from tests.support.messages import said
from tests.support.project import Project

WIDTH = len("equivalence")  # ship's table pads each gate's name to the longest one's (route, backend_ops, equivalence, toy)


class ToyGate(registry.WhenRequired):
    """The whole of a new gate: its name, when ship requires it, and how it judges a build."""

    name = "toy"

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
    assert ship.TABLE_ROW.format(gate="toy".ljust(WIDTH), state="MISSING", detail=ship.NO_RECORD) in r.out
    r = project.ci("gpu-tests", "--profile", "cpu", "--gate", "toy")
    assert r.code == 0, r.out + r.err
    assert said(gpu_tests.GATE_DONE, r.out, gate="toy", status="passed", summary=f"build {manifest(project)['key'][:12]} has its manifest")
    (rec,) = ledger.read(project.root / "build" / "results" / "ledger.jsonl").records
    assert (rec.gate, rec.verdict, rec.build_key) == ("toy", "passed", manifest(project)["key"])
    assert said(ship.TABLE_ROW, project.ci("ship", "--profile", "cpu", "--check").out, gate="toy".ljust(WIDTH), state="passed")
    assert registry.required(pins.load(project.pins)) == ("route", "backend_ops", "equivalence", "toy")
