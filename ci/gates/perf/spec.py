"""The perf gate's section of pins.yaml, ``expect.perf``, read by the gate itself: per model set, its checks.

    expect:
      perf:
        tiny: [CHECK, ...]   # the tiny generated models
        cuda: [CHECK, ...]   # a profile: the release models
        real-shape:          # the real-shaped set, per profile
          cuda: [CHECK, ...]

A CHECK is ``{check: "METRIC(CONFIG[, PROMPT]) [/ ...] >= FLOOR", measured: "...", tolerance: 0.1}``
(:mod:`ci.pin.claims`). The real-shaped set's configs are its legs; a check a generated model cannot make honestly
is refused here, before anything runs.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ci.errors import ConfigError
from ci.gates.perf import NAME, real_shape
from ci.pin.claims import CONFIGS, Check, parse_check
from ci.schema import Section

if TYPE_CHECKING:
    from ci.pin.pins import Pins

TINY = "tiny"
REAL_SHAPE = "real-shape"
CHECK_WHERE = "{file}: {key}"  # a check's place, the where of ci.pin.claims' messages

# Messages, shared with the tests that match on them (tests/support/messages.py)
NOT_A_LIST = "is not a list of checks"
NOT_PER_PROFILE = "is not a mapping of profiles to their checks (real-shape: {cuda: [...]})"
REFUSED = "{where}: {why}"


@dataclass(frozen=True)
class PerfExpect:
    """The checks of each model set: ``tiny``, a profile's release models, and ``real-shape/PROFILE``."""

    sets: tuple[tuple[str, tuple[Check, ...]], ...]

    def checks(self, models: str) -> tuple[Check, ...]:
        return dict(self.sets).get(models, ())

    def real_shape(self, profile: str) -> tuple[Check, ...]:
        return self.checks(real_shape_key(profile))

    def __bool__(self) -> bool:
        return bool(self.sets)


def real_shape_key(profile: str) -> str:
    return f"{REAL_SHAPE}/{profile}"


def _checks(section: Section, name: str, items: object, configs: tuple[str, ...], generated: bool) -> tuple[Check, ...]:
    if not isinstance(items, list) or not items:
        raise section.error(NOT_A_LIST, name)
    out = []
    for i, item in enumerate(items):
        c = Section(section.file, f"{section.key(name)}[{i}]", item)
        tolerance = c.number("tolerance", required=False, default=0.1, minimum=0.0, maximum=1.0)
        where = CHECK_WHERE.format(file=c.file, key=c.key("check"))
        check = parse_check(c.string("check"), c.string("measured"), tolerance, where, configs)
        c.done()
        if generated and (why := real_shape.refusal(check)) is not None:
            raise ConfigError(REFUSED.format(where=where, why=why))
        out.append(check)
    return tuple(out)


def read(section: Section | None) -> PerfExpect:
    """``expect.perf`` parsed; every malformed check or one the set cannot make honestly is a ConfigError naming it."""
    if section is None:
        return PerfExpect(())
    sets: list[tuple[str, tuple[Check, ...]]] = []
    for models, value in section.items():
        if models != REAL_SHAPE:
            sets.append((models, _checks(section, models, value, CONFIGS, generated=False)))
            continue
        if not isinstance(value, Mapping) or not value:
            raise section.error(NOT_PER_PROFILE, models)
        per_profile = Section(section.file, section.key(models), value)
        for profile, items in per_profile.items():
            sets.append((real_shape_key(profile), _checks(per_profile, profile, items, real_shape.CONFIGS, generated=True)))
    return PerfExpect(tuple(sets))


def expectations(pins: Pins) -> PerfExpect:
    """The perf section of ``pins``, read now."""
    return read(pins.gate_section(NAME))
