"""The oracle gate's adapter: the pinned fork's own GGML_OP_GATED_DELTA_NET, run through the build's own ggml libraries
on the profile's device, against a float64 reference of the op's definition; every output and every snapshot slot
judged (a non-finite value fails, an SNR under the profile's floor fails), and the op's time per timed case compared
with the last release's. Required where pins.yaml declares ``expect.oracle`` (its floors, per profile, each with
where it comes from)."""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ci.gates.oracle import NAME
from ci.gates.protocol import Flags, GateBase, Requirement

if TYPE_CHECKING:
    from ci.gates.oracle.judge import Floors
    from ci.gates.results import GateResult
    from ci.gates.target import BuildUnderTest, GateOptions
    from ci.pin.pins import Pins

DEFAULT = "default"  # expect.oracle's floors for a profile it does not name
# Messages, shared with the tests that match on them (tests/support/messages.py)
NO_FLOORS = "pins.yaml: expect.oracle: no floors for the {profile} profile and no default; declare {profile}: {{output_db: N, slots_db: N, measured: WHERE}}"


@dataclasses.dataclass(frozen=True)
class Expectation:
    """pins.yaml's expect.oracle for one profile: the floors, the kernel-time tolerance, and where they come from."""

    output_db: float
    slots_db: float
    time_tolerance: float
    measured: str


class OracleGate(GateBase):
    name = NAME
    # its kernel-time checks compare with the last release's record of it
    flags = Flags(requirement=Requirement.WHEN_DECLARED, expects=True, compares_with_release=True)

    def declared(self, pins: Pins) -> bool:
        return pins.gate_section(NAME) is not None

    def check_expect(self, pins: Pins) -> None:
        expectations(pins)

    def expectation(self, pins: Pins, profile: str) -> Expectation:
        found = expectations(pins)
        if profile in found:
            return found[profile]
        if DEFAULT in found:
            return found[DEFAULT]
        from ci.errors import ConfigError

        raise ConfigError(NO_FLOORS.format(profile=profile))

    def run(self, target: BuildUnderTest, options: GateOptions, out: Path) -> GateResult:
        from ci.gates.oracle import run, timing

        manifest = target.build.manifest
        expectation = self.expectation(target.pins, manifest.profile)
        return run.run_gate(
            target.build.build_dir / "bin",
            target.root / target.pins.submodule / "ggml" / "include",
            manifest.device,
            floors_of(expectation),
            out / "oracle",
            properties=(("cases_sha256", cases_sha256()), ("time_tolerance", f"{expectation.time_tolerance:g}")),
            timed=timing.TIMED,
            released=_released_metrics(target.released(NAME)),
            time_tolerance=expectation.time_tolerance,
        )

    def figures(self, metrics: Mapping[str, float], properties: Mapping[str, Any], criteria: Mapping[str, Any]) -> list[str]:
        """The worst case's SNR of the outputs and of the snapshot slots, against their floors."""
        return [
            f"{key.replace('_', ' ')} {metrics[key]:.1f} (floor {properties.get(floor, '?')})"
            for key, floor in (("worst_output_db", "floor_output_db"), ("worst_slots_db", "floor_slots_db"))
            if key in metrics
        ]

    def criteria(self, pins: Pins, profile: str) -> dict[str, Any]:
        e = self.expectation(pins, profile)
        return {"floors": f"output {e.output_db:g} dB, slots {e.slots_db:g} dB", "time_tolerance": f"{e.time_tolerance:g}", "cases_sha256": cases_sha256()}

    def judged(self, result: GateResult, pins: Pins, profile: str) -> dict[str, Any]:
        """The floors, tolerance and cases the run used (read back from its result)."""
        props = dict(result.properties)
        floors = f"output {props.get('floor_output_db', '')} dB, slots {props.get('floor_slots_db', '')} dB"
        return {"floors": floors, "time_tolerance": props.get("time_tolerance", ""), "cases_sha256": props.get("cases_sha256", "")}


def expectations(pins: Pins) -> dict[str, Expectation]:
    """pins.yaml's expect.oracle, per profile (and ``default``): ``{output_db, slots_db, measured[, time_tolerance]}``."""
    section = pins.gate_section(NAME)
    if section is None:
        return {}
    out = {}
    for profile, _ in section.items():
        s = section.required_section(profile)
        out[profile] = Expectation(
            output_db=s.number("output_db", minimum=0.0),
            slots_db=s.number("slots_db", minimum=0.0),
            time_tolerance=s.number("time_tolerance", required=False, default=0.25, minimum=0.0),
            measured=s.string("measured"),
        )
        s.done()
    return out


def floors_of(expectation: Expectation) -> Floors:
    from ci.gates.oracle.judge import Floors

    return Floors(expectation.output_db, expectation.slots_db)


def cases_sha256() -> str:
    """One digest of the cases as data (ids, seeds, shapes, draws): a record judged on other cases does not count."""
    from ci.gates.oracle.cases import CASES

    return hashlib.sha256(json.dumps([dataclasses.asdict(c) for c in CASES], sort_keys=True, default=str).encode()).hexdigest()


def _released_metrics(found: tuple[str, Any] | None) -> tuple[str, dict[str, float]] | None:
    if found is None:
        return None
    pin, data = found
    return pin, {str(k): float(v) for k, v in (data.get("metrics") or {}).items()}


GATE = OracleGate()
