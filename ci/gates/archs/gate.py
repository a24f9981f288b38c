"""The archs gate's adapter: the fork's whole-model check, test-llama-archs, per architecture of pins.yaml
expect.archs, required when release.require names it."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from ci.gates.archs import NAME
from ci.gates.protocol import Flags, GateBase, Requirement

if TYPE_CHECKING:
    from ci.gates.results import GateResult
    from ci.gates.target import BuildUnderTest, GateOptions
    from ci.pin.pins import Pins


class ArchsGate(GateBase):
    name = NAME
    flags = Flags(requirement=Requirement.WHEN_NAMED)

    def run(self, target: BuildUnderTest, options: GateOptions, out: Path) -> GateResult:
        from ci.gates.archs import run

        m, build_dir = target.build.manifest, target.build.build_dir
        return run.gate(m.binary(build_dir, "test-llama-archs"), m.binary(build_dir, "llama-server"), m.device, target.pins.archs, min(options.timeout, run.TIMEOUT), out, m.key)

    def criteria(self, pins: Pins, profile: str) -> dict[str, Any]:
        from ci.gates.archs.judge import THRESHOLD
        from ci.gates.archs.run import SEED

        return {"archs": ",".join(dict.fromkeys(pins.archs)), "seed": str(SEED), "threshold": f"{THRESHOLD:g}"}

    def judged(self, result: GateResult, pins: Pins, profile: str) -> dict[str, Any]:
        """The architectures it ran, with its seed and threshold."""
        props = dict(result.properties)
        return {k: props.get(k, "") for k in ("archs", "seed", "threshold")}


GATE = ArchsGate()
