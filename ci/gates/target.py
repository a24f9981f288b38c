"""The build under test: what a gate judges (the compile stage's build) and what it judges it against, as values the
command resolved once (pins.yaml, the project's root, the profile's serve device, the series' shape, the last
release's record of each gate); and the options of a run of gates."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ci import defaults

if TYPE_CHECKING:  # the types alone: resolving a job must not import the gates' servers and numpy
    from ci.compile.stage import CurrentBuild
    from ci.pin.pins import Pins


@dataclass(frozen=True)
class GateOptions:
    timeout: float = defaults.TIMEOUT  # seconds per test-backend-ops run
    rounds: int = defaults.PERF_MAX_ROUNDS  # the most rounds of the perf gate (it stops once every check is settled)
    model: Path | None = None  # the target the gates serve (ci.gates.serving.model_sets); default pins.yaml, else tiny models
    drafter: Path | None = None
    tokens: int | None = None
    planted: bool = False  # a gate_selftest build: a fault planted in a copy of the checkout (DirtyRule.PLANTED)


def _no_record(gate: str) -> tuple[str, Mapping[str, Any]] | None:
    return None


@dataclass(frozen=True)
class BuildUnderTest:
    """The build a gate judges (the compile stage's :class:`CurrentBuild`) and what it is judged against: pins.yaml,
    the project's root, the profile's serve device, the series' shape, and the last release's record of each gate."""

    build: CurrentBuild
    root: Path
    pins: Pins
    serve_device: str
    patched: bool  # the series has patches
    ggml_touched: bool  # a patch touches ggml/ (its build commit says -dirty)
    # per gate: the last release's pin and its record of that gate (the release stage's ledger), for a gate whose
    # verdict compares with it (the oracle's kernel times, perf's figures)
    released: Callable[[str], tuple[str, Mapping[str, Any]] | None] = _no_record
