"""The perf gate's adapter: the seeds' performance claims (pins.yaml expect.perf), measured by the bench on the build's
llama-server through 1bit serve, required when pins.yaml declares claims; each check's figures shown by gpu_tests."""

from __future__ import annotations

import contextlib
import math
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ci import defaults
from ci.gates.perf import NAME
from ci.gates.protocol import Flags, GateBase, Requirement

if TYPE_CHECKING:
    from ci.gates.results import GateResult
    from ci.gates.target import BuildUnderTest, GateOptions
    from ci.pin.pins import Pins

ENOUGH_ROUNDS = "at least {rounds}"  # the perf gate's rounds as a criterion
# how its verdicts were reached (ci/gates/perf/judge.py): a record judged another way judged other criteria
LOOKS = "the order-statistic interval of the median: {first_level:g}% at {first} rounds, then {later_level:g}% every {step} more"


class PerfGate(GateBase):
    name = NAME
    # it measures speed, not what a planted fault breaks; its verdict compared the build with the last release
    # it measures speed: a fault it catches is one that slows the build and breaks nothing (the self-test's
    # prompt-path fault, on the real-shaped set); its verdict compared the build with the last release
    flags = Flags(requirement=Requirement.WHEN_DECLARED, expects=True, shows_cases=True, on_models=True, compares_with_release=True)

    def declared(self, pins: Pins) -> bool:
        from ci.gates.perf import spec

        return bool(spec.expectations(pins))

    def check_expect(self, pins: Pins) -> None:
        from ci.gates.perf import spec

        spec.expectations(pins)

    def run(self, target: BuildUnderTest, options: GateOptions, out: Path) -> GateResult:
        from ci.gates.perf import run

        return run.run(target, options, out)

    def criteria(self, pins: Pins, profile: str) -> dict[str, Any]:
        from ci.gates.perf import spec
        from ci.gates.serving.launcher import launcher_sha256

        sets = spec.expectations(pins).sets
        checks = {models: [[c.text, c.floor, c.tolerance] for c in checks] for models, checks in sets if not models.startswith(spec.REAL_SHAPE) or models == spec.real_shape_key(profile)}
        # its figures are of llama-servers started through 1bit serve, with the launcher's recipes
        from ci.gates.perf import judge

        looks = LOOKS.format(first_level=100 * judge.FIRST_LEVEL, first=judge.MIN_ROUNDS, later_level=100 * judge.LATER_LEVEL, step=judge.STEP)
        rounds = ENOUGH_ROUNDS.format(rounds=defaults.PERF_ROUNDS)
        return {"checks": checks, "rounds": rounds, "looks": looks, "launcher_sha256": launcher_sha256()}

    def judged(self, result: GateResult, pins: Pins, profile: str) -> dict[str, Any]:
        """The rounds it measured: enough, or how few."""
        rounds = dict(result.properties).get("rounds", "")
        enough = rounds.isdigit() and int(rounds) >= defaults.PERF_ROUNDS
        return {**self.criteria(pins, profile), "rounds": ENOUGH_ROUNDS.format(rounds=defaults.PERF_ROUNDS) if enough else rounds}


    def figures(self, metrics: Mapping[str, float], properties: Mapping[str, Any], criteria: Mapping[str, Any]) -> list[str]:
        """Each check's median, its interval and the floor it was judged against."""
        floors = check_floors(criteria)
        out = []
        for key in sorted(k for k in metrics if k.endswith(".median")):
            name = key[: -len(".median")]
            low, high = metrics.get(f"{name}.low"), metrics.get(f"{name}.high")
            interval = f" [{low:.3g}, {high:.3g}]" if low is not None and high is not None else ""
            floor = next((f" (floor {f:g})" for text, f in floors.items() if name.endswith(text) and math.isfinite(f)), "")
            out.append(f"{name} {metrics[key]:.3g}{interval}{floor}")
        return out


GATE = PerfGate()


def check_floors(criteria: Mapping[str, Any]) -> dict[str, float]:
    """Each perf check's floor by its name, from the criteria a record was judged against (``checks``: each check as
    written, ``NAME >= FLOOR``); NaN where none is written."""
    floors: dict[str, float] = {}
    checks = criteria.get("checks")
    for items in checks.values() if isinstance(checks, dict) else []:
        for item in items if isinstance(items, list) else []:
            name, sep, floor = str(item[0] if isinstance(item, list) and item else item).rpartition(">=")
            with contextlib.suppress(ValueError):
                floors[name.strip()] = float(floor) if sep else math.nan
    return floors
