"""The route gate's adapter: the launcher's own tests, required for every build, bound to the launcher and the files
that decide which of its tests run."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from ci.gates.protocol import Flags, GateBase
from ci.gates.route import NAME

if TYPE_CHECKING:
    from ci.gates.results import GateResult
    from ci.gates.target import BuildUnderTest, GateOptions
    from ci.pin.pins import Pins


class RouteGate(GateBase):
    name = NAME
    flags = Flags(plantable=False)  # the launcher's own tests: no planted fault of the fork can reach them

    def run(self, target: BuildUnderTest, options: GateOptions, out: Path) -> GateResult:
        from ci.gates.route import run

        return run.route_gate(out)

    def criteria(self, pins: Pins, profile: str) -> dict[str, Any]:
        """The launcher its tests judged is the one ship puts in the wheel, by the tests there now."""
        from ci.gates.route.run import route_tests_sha256
        from ci.gates.serving.launcher import launcher_sha256

        return {"launcher_sha256": launcher_sha256(), "route_tests_sha256": route_tests_sha256()}

    def judged(self, result: GateResult, pins: Pins, profile: str) -> dict[str, Any]:
        """The launcher and route tests as the tests started (a conftest planted for the run and put back before the
        record was written would otherwise record the clean digest)."""
        props = dict(result.properties)
        return {k: props.get(k, "") for k in ("launcher_sha256", "route_tests_sha256")}


GATE = RouteGate()
