"""The build under test: what a gate judges (the compile stage's build) and what it judges it against, as values the
command resolved once (pins.yaml, the project's root, the profile's serve device, the series' shape, the last
release's perf figures); and the options of a run of gates."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ci import defaults
from ci.errors import ConfigError, Refused
from ci.files import sha256_cached

if TYPE_CHECKING:  # the types alone: resolving a job must not import the gates' servers and numpy
    from ci.compile.stage import CurrentBuild
    from ci.gates.perf import judge as perf
    from ci.pin.pins import Pins

# Messages, shared with the tests that match on them (tests/support/messages.py)
MODEL_MISSING = "pins.yaml: equivalence.{key}.path: {path}: no such file; put the model there or fix the path"
MODEL_OTHER_FILE = "pins.yaml: equivalence.{key}: {path} has sha256 {sha256}, not {pinned}: another file than the release's"


@dataclass(frozen=True)
class GateOptions:
    timeout: float = defaults.TIMEOUT  # seconds per test-backend-ops run
    rounds: int = defaults.PERF_MAX_ROUNDS  # the most rounds of the perf gate (it stops once every check is settled)
    model: Path | None = None  # the equivalence gate's target; default pins.yaml, else tiny models
    drafter: Path | None = None
    tokens: int | None = None
    planted: bool = False  # a gate_selftest build: a fault planted in a copy of the checkout (DirtyRule.PLANTED)


def _no_release(models: str) -> perf.Released | None:
    return None


def _no_record(gate: str) -> tuple[str, Mapping[str, Any]] | None:
    return None


@dataclass(frozen=True)
class BuildUnderTest:
    """The build a gate judges (the compile stage's :class:`CurrentBuild`) and what it is judged against: pins.yaml,
    the project's root, the profile's serve device, the series' shape, and the last release's perf figures."""

    build: CurrentBuild
    root: Path
    pins: Pins
    serve_device: str
    patched: bool  # the series has patches
    ggml_touched: bool  # a patch touches ggml/ (its build commit says -dirty)
    last_release: Callable[[str], perf.Released | None] = _no_release  # per model set; the release stage's ledger
    # per gate: the last release's pin and its record of that gate (the release stage's ledger), for a gate whose
    # verdict compares with it (the oracle's kernel times)
    released: Callable[[str], tuple[str, Mapping[str, Any]] | None] = _no_record


def equivalence_models(target: BuildUnderTest, options: GateOptions) -> tuple[Path, Path, str]:
    """The target and drafter the equivalence gate runs, and what they are: ``--model``/``--drafter``, else the
    release models pins.yaml names (each checked against its sha256), else the tiny generated ones (the near drafter)."""
    from ci.gates.equivalence import plan as eq_plan
    from ci.gates.tiny import models as tinymodels

    config = target.pins.equivalence
    if options.model is not None and options.drafter is not None:
        return options.model, options.drafter, eq_plan.GIVEN_MODELS
    if config.model is not None and config.drafter is not None:
        paths = []
        for key, ref in (("model", config.model), ("drafter", config.drafter)):
            path = target.root / ref.path
            if not path.is_file():
                raise ConfigError(MODEL_MISSING.format(key=key, path=ref.path))
            if ref.sha256 is not None and (digest := sha256_cached(path)) != ref.sha256:
                raise Refused(MODEL_OTHER_FILE.format(key=key, path=ref.path, sha256=digest[:12], pinned=ref.sha256[:12]))
            paths.append(path)
        return paths[0], paths[1], eq_plan.RELEASE_MODELS
    models = tinymodels.write_tiny_models(target.build.build_dir / "tiny-models")
    return models.target, models.near_drafter, eq_plan.TINY_MODELS
