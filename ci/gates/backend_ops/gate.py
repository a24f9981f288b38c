"""The backend_ops gate's adapter: test-backend-ops on the profile's device, required for every build, judged against
the pin's case counts (pins.yaml expect.backend_ops)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from ci.gates.backend_ops import NAME
from ci.gates.protocol import Flags, GateBase

if TYPE_CHECKING:
    from ci.gates.results import GateResult
    from ci.gates.target import BuildUnderTest, GateOptions
    from ci.pin.pins import Pins


class BackendOpsGate(GateBase):
    name = NAME
    flags = Flags()

    def run(self, target: BuildUnderTest, options: GateOptions, out: Path) -> GateResult:
        from ci.gates.backend_ops import run
        from ci.gates.backend_ops.spec import DirtyRule

        manifest = target.build.manifest
        # ggml's build commit says -dirty exactly when the checkout's ggml/ differs from the pin: the series touches it
        dirty = DirtyRule.DIRTY if target.ggml_touched else DirtyRule.CLEAN
        if options.planted:
            dirty = DirtyRule.PLANTED
        return run.run_gate(
            manifest.binary(target.build.build_dir, "test-backend-ops"),
            manifest.device,
            target.pins.expected_cases(),
            target.pins.fork.commit,
            target.patched,
            options.timeout,
            out / "backend_ops-logs",
            manifest.key,
            dirty=dirty,
        )

    def criteria(self, pins: Pins, profile: str) -> dict[str, Any]:
        return {"expected": dict(sorted(pins.expected_cases().items()))}


GATE = BackendOpsGate()
