"""The gates: one registry, in the order ``nox -s gpu_tests`` runs them and ``nox -s ship`` requires them (as
cibuildwheel's platform registry). gpu_tests, ship, the main job, bisect, the self-test and pins.yaml's
``release.require`` all read :data:`GATES`; adding a gate is its package, ``ci/gates/NAME/``, whose ``gate.py`` holds
its object (:mod:`ci.gates.protocol`), and one line here. Each ``gate.py`` is light (its run imports the gate's
modules when it runs), so a job resolves with the registry alone.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from ci.errors import ConfigError
from ci.gates.archs.gate import GATE as ARCHS
from ci.gates.backend_ops.gate import GATE as BACKEND_OPS
from ci.gates.equivalence.gate import GATE as EQUIVALENCE
from ci.gates.oracle.gate import GATE as ORACLE
from ci.gates.perf.gate import GATE as PERF
from ci.gates.protocol import Gate, Requirement
from ci.gates.route.gate import GATE as ROUTE
from ci.gates.selftest.gate import GATE as SELFTEST_GATE
from ci.schema import did_you_mean

if TYPE_CHECKING:
    from ci.pin.pins import Pins

# Messages, shared with the tests that match on them (tests/support/messages.py)
NOT_REQUIRABLE = '{file}: release.require[{index}]: "{gate}" is not a gate ship can require{suggestion}; known: {known}'
UNKNOWN_GATE = "--gate {gate}: unknown gate{suggestion}; gates: {known}"
UNKNOWN_EXPECT = "{file}: expect.{key}: unknown key{suggestion}; known: {known}"  # as schema.AT_KEY and UNKNOWN_KEY say it

GATES: tuple[Gate, ...] = (ROUTE, BACKEND_OPS, ORACLE, EQUIVALENCE, ARCHS, PERF, SELFTEST_GATE)
SELFTEST = SELFTEST_GATE.name


def names() -> tuple[str, ...]:
    """Every gate's name, in order."""
    return tuple(g.name for g in GATES)


def by_name(name: str) -> Gate | None:
    """The gate called ``name`` (a record's gate), or None for a name no gate has."""
    return next((g for g in GATES if g.name == name), None)


def runnable() -> tuple[str, ...]:
    """The gates gpu_tests can run on a build (not those with a session of their own)."""
    return tuple(g.name for g in GATES if not g.flags.own_session)


def always() -> tuple[str, ...]:
    """The gates ship requires for every build: what a benign planted edit must pass."""
    return tuple(g.name for g in GATES if g.flags.requirement is Requirement.ALWAYS)


def plantable() -> tuple[str, ...]:
    """The gates a planted fault may name: those that judge whether a build's binaries are right (the route tests judge
    the launcher, perf their speed)."""
    return tuple(g.name for g in GATES if not g.flags.own_session and g.flags.plantable)


def requirable() -> tuple[str, ...]:
    """What pins.yaml's release.require may name."""
    return tuple(g.name for g in GATES if g.flags.requirement is not Requirement.ALWAYS)


def check_require(pins: Pins) -> None:
    """pins.yaml's release.require names only gates of this registry."""
    known = requirable()
    for i, gate in enumerate(pins.release_require):
        if gate not in known:
            raise ConfigError(NOT_REQUIRABLE.format(file=pins.path.name, index=i, gate=gate, suggestion=did_you_mean(gate, known), known=", ".join(known)))


def check_expect(pins: Pins) -> None:
    """pins.yaml's expect holds only what pins.py reads and the sections of gates that read their own, each of which
    that gate reads now (so a bad floor is refused when the job resolves, not when the gate runs)."""
    from ci.pin.pins import OWN_EXPECT

    known = (*OWN_EXPECT, *(g.name for g in GATES if g.flags.expects))
    for key, _ in pins.gate_expect:
        gate = by_name(key)
        if gate is None or not gate.flags.expects:
            raise ConfigError(UNKNOWN_EXPECT.format(file=pins.path.name, key=key, suggestion=did_you_mean(key, known), known=", ".join(known)))
        gate.check_expect(pins)


def required(pins: Pins) -> tuple[str, ...]:
    """Every gate ship requires for a build of ``pins``, in the order gpu_tests runs them."""
    return tuple(g.name for g in GATES if g.required(pins))


def select(wanted: Sequence[str], pins: Pins) -> tuple[Gate, ...]:
    """The gates named, or every gate ship requires (but those with a session of their own) when none is, in order."""
    runnable = tuple(g for g in GATES if not g.flags.own_session)
    known = tuple(g.name for g in runnable)
    for n in wanted:
        if n not in known:
            raise ConfigError(UNKNOWN_GATE.format(gate=n, suggestion=did_you_mean(n, known), known=", ".join(known)))
    chosen = set(wanted) if wanted else set(required(pins))
    return tuple(g for g in runnable if g.name in chosen)
