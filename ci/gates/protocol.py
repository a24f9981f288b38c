"""What a gate is: the one shape every gate's package fills (``ci/gates/NAME/gate.py``), as nox declares a session.

A gate has a name, typed flags (:class:`Flags`, never read with ``getattr``) and four answers: whether ship requires
it, its run, the criteria its record must have judged against now, and what one result was judged against. Ship
compares the last two, so a count raised, a shorter run or a launcher edited since no longer counts; a gate that
declares no criterion is refused (tests/gates/test_registry.py). The registry (:mod:`ci.gates.registry`) lists them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:  # the types alone: resolving a job imports the gates' names, not their servers and numpy
    from ci.compile.manifest import Manifest
    from ci.gates.results import GateResult
    from ci.gates.target import BuildUnderTest, GateOptions
    from ci.pin.pins import Pins


class Requirement(Enum):
    ALWAYS = "always"  # ship requires it for every build; a benign planted edit must pass it
    WHEN_NAMED = "when named"  # ship requires it when pins.yaml's release.require names it
    WHEN_DECLARED = "when declared"  # ship requires it when pins.yaml declares what it checks, or release.require names it


@dataclass(frozen=True)
class Flags:
    """What the commands and ship read of a gate, declared once in its ``gate.py``."""

    requirement: Requirement = Requirement.ALWAYS
    own_session: bool = False  # it runs in a session of its own (nox -s gate_selftest), never inside gpu_tests
    plantable: bool = True  # a planted fault of the fork may name it (it judges the build's binaries)
    shows_cases: bool = False  # gpu_tests prints each case's figures (the perf checks)
    on_models: bool = False  # its records say which models they ran on; only those on the release's models count
    binds_model_files: bool = False  # its records name the models' sha256, which must be pins.yaml's where it gives them
    compares_with_release: bool = False  # its verdict compared the build with the last release: it must be the last now
    expects: bool = False  # pins.yaml's expect.NAME is its own section, which it reads (:meth:`Gate.check_expect`)


class Gate(Protocol):
    name: str
    flags: Flags

    def required(self, pins: Pins) -> bool:
        """Whether ship requires this gate for a build of ``pins``."""
        ...

    def run(self, target: BuildUnderTest, options: GateOptions, out: Path) -> GateResult:
        """Judge the build under test; the record (JSON, JUnit, ledger) is the release stage's to write."""
        ...

    def criteria(self, pins: Pins, profile: str) -> dict[str, Any]:
        """What a record of this gate must have judged against for a build of ``pins`` on ``profile``, now."""
        ...

    def judged(self, result: GateResult, pins: Pins, profile: str) -> dict[str, Any]:
        """What ``result`` was judged against (compared with :meth:`criteria` at ship time)."""
        ...

    def why_not_counted(self, properties: Mapping[str, Any], manifest: Manifest) -> str | None:
        """Beyond the manifest and criteria every record is bound to: why a record with these properties does not
        count for ``manifest``'s build, in a few words; None when nothing more is asked."""
        ...

    def check_expect(self, pins: Pins) -> None:
        """For a gate that ``expects``: read pins.yaml's expect.NAME, raising ConfigError naming the key it dislikes."""
        ...

    def figures(self, metrics: Mapping[str, float], properties: Mapping[str, Any], criteria: Mapping[str, Any]) -> list[str]:
        """A record's own figures in a few words each (the report's table): what this gate measured and against what."""
        ...


class GateBase:
    """The answers most gates share: required by their :class:`Requirement`, judged against today's criteria, and
    nothing asked beyond the binding every record has."""

    name: str
    flags: Flags = Flags()

    def required(self, pins: Pins) -> bool:
        match self.flags.requirement:
            case Requirement.ALWAYS:
                return True
            case Requirement.WHEN_NAMED:
                return self.name in pins.release_require
            case Requirement.WHEN_DECLARED:
                return self.declared(pins) or self.name in pins.release_require

    def declared(self, pins: Pins) -> bool:
        """For :attr:`Requirement.WHEN_DECLARED`: whether pins.yaml declares what this gate checks."""
        return False

    def criteria(self, pins: Pins, profile: str) -> dict[str, Any]:
        raise NotImplementedError(f"the {self.name} gate declares no criteria")

    def judged(self, result: GateResult, pins: Pins, profile: str) -> dict[str, Any]:
        return self.criteria(pins, profile)

    def why_not_counted(self, properties: Mapping[str, Any], manifest: Manifest) -> str | None:
        return None

    def check_expect(self, pins: Pins) -> None:
        return None

    def figures(self, metrics: Mapping[str, float], properties: Mapping[str, Any], criteria: Mapping[str, Any]) -> list[str]:
        return []
