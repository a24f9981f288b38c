"""The self-test's adapter: ``nox -s gate_selftest``, planted faults, each gate catching its own. A session of its own
(it plants faults and rebuilds), so gpu_tests never runs it; ship requires its record when pins.yaml's release.require
names it, on the committed faults of the profile."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from ci.errors import Refused
from ci.gates.protocol import Flags, GateBase, Requirement
from ci.gates.selftest import NAME

if TYPE_CHECKING:
    from ci.gates.results import GateResult
    from ci.gates.target import BuildUnderTest, GateOptions
    from ci.pin.pins import Pins


class SelftestGate(GateBase):
    name = NAME
    flags = Flags(requirement=Requirement.WHEN_NAMED, own_session=True)

    def run(self, target: BuildUnderTest, options: GateOptions, out: Path) -> GateResult:
        raise Refused(f"{self.name} runs in its own session: nox -s gate_selftest")

    def criteria(self, pins: Pins, profile: str) -> dict[str, Any]:
        from ci.gates.selftest.faults import committed_faults_sha256

        return {"faults_sha256": committed_faults_sha256(profile)}

    def judged(self, result: GateResult, pins: Pins, profile: str) -> dict[str, Any]:
        """The fault set it planted."""
        return {"faults_sha256": dict(result.properties).get("faults_sha256", "")}


GATE = SelftestGate()
