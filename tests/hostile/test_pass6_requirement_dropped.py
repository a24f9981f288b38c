"""Hostile pass 6: a gate that FAILED for this build stops counting once pins.yaml, edited in the working tree after
the gates and never committed, no longer requires it.

ship reads ``release.require`` from pins.yaml as it lies, and no record's criteria hold it: the archs gate FAILED on
this build's binaries (a failure is evidence, docs/release.md), ``archs`` is taken out of ``release.require`` in the
working tree, and ship writes the wheel; release.json names no archs gate and nothing of the edit (the build key, the
pin verification and every other gate's criteria read no ``release.require``).
"""

from __future__ import annotations

from collections.abc import Callable

from ci.gates.results import Status
from ci.pin import pins as pins_mod
from ci.release import ship as ship_mod
from tests.release.test_ship import GATES, built, record, ship
from tests.release.test_ship_attacks import ARCHS_PINS, archs_result
from tests.support.messages import said
from tests.support.project import Project


def test_a_failed_required_gate_dropped_from_an_uncommitted_pins_yaml_does_not_ship(make_build_project: Callable[..., Project]) -> None:
    project = make_build_project(ARCHS_PINS)
    m = built(project)
    listed = ",".join(pins_mod.load(project.root / "pins.yaml").archs)
    record(project, m, GATES.route, GATES.backend_ops, GATES.equivalence, archs_result(listed, Status.FAILED))
    assert ship(project, "--check").code == 7  # the build's own binaries fail archs

    project.pins.write_text(project.pins.read_text().replace("require: [archs]", "require: []"))  # not committed
    r = ship(project)
    assert r.code != 0, r.out + r.err
    assert said(ship_mod.NOT_REQUIRED_NOW, r.out, gate="archs"), r.out + r.err
    assert not (project.root / "dist").exists() or not any((project.root / "dist").iterdir())
