"""What the test-backend-ops gate judges against and the evidence it is handed, as values: the device, the pin's
case counts, the pinned commit and whether the build is patched (:class:`GateSpec`), how a run ended
(:class:`Outcome`), and each run's parsed report (:class:`ConsoleRun`, :class:`SqlRun`)."""

from __future__ import annotations

import os
import re
import signal
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from enum import Enum

from ci.errors import ConfigError, describe_returncode
from ci.gates.backend_ops.output import OP_RE, ConsoleReport, SqlReport

SHA_PREFIX_RE = re.compile(r"^[0-9a-f]{7,40}$")
MIN_SHORT_SHA = 7  # git rev-parse --short never prints fewer

# Messages, shared with the tests that match on them (tests/support/messages.py)
EXIT_TIMED_OUT = "timed out, {status}"
BAD_DEVICE = '--device "{device}": not a test-backend-ops device name (ROCm0, CUDA0, Vulkan0, CPU, ...)'
NO_EXPECTATIONS = "no test-backend-ops expectations: give --expect OP=N or set expect.backend_ops in pins.yaml"
BAD_OP = 'expectation "{op}": not a ggml op name (upper case, as test-backend-ops -o takes it)'
OP_TWICE = "expectations name an op twice: {ops}"
BAD_COUNT = "expectation {op}={count}: the count must be a whole number of cases, 1 or more"
NOT_A_SHA = 'pinned commit "{commit}": not a commit sha (7 to 40 hex digits)'
# where an op's expected count was set, for the count message: GateSpec.expected_from is one of these
EXPECTED_IN_PINS = "pins.yaml expect.backend_ops.{op}"
EXPECTED_BY_FLAG = "--expect {op}={expected}"


def check_device(device: str) -> str:
    if not device or device != device.strip() or any(ch.isspace() for ch in device) or os.sep in device:
        raise ConfigError(BAD_DEVICE.format(device=device))
    return device


def check_ops(ops: Iterable[str]) -> tuple[str, ...]:
    out = tuple(ops)
    if not out:
        raise ConfigError(NO_EXPECTATIONS)
    for op in out:
        if not OP_RE.match(op):
            raise ConfigError(BAD_OP.format(op=op))
    if len(set(out)) != len(out):
        raise ConfigError(OP_TWICE.format(ops=", ".join(out)))
    return out


class DirtyRule(Enum):
    """Whether ``build_commit`` must carry git's ``-dirty`` suffix: an explicit input, never guessed.

    ggml's CMake appends ``-dirty`` when ``git diff-index`` sees changes in the checkout: applied patches do that,
    and so can a checkout that lacks files of the fork (pins.yaml ``checkout.omit``), which is why the caller says.
    """

    CLEAN = "clean"  # the fork exactly as pinned
    DIRTY = "dirty"  # patches applied to the checkout (or a checkout known to differ otherwise)
    # a planted build (gate_selftest): the planted edit is a local change by design, and whether ggml's configure step
    # ran again to stamp it (a shader or CMake edit does, a CUDA source edit does not) decides the suffix
    PLANTED = "planted"

    @classmethod
    def for_build(cls, patched: bool) -> DirtyRule:
        return cls.DIRTY if patched else cls.CLEAN


@dataclass(frozen=True)
class GateSpec:
    """What the gate must see: everything the judge knows besides the evidence."""

    device: str
    expected: tuple[tuple[str, int], ...]  # cases per op that must run and pass: the pin's count
    pinned_commit: str | None = None  # full or abbreviated sha; None: the build_commit check is not made
    patched: bool = False
    dirty: DirtyRule = DirtyRule.CLEAN
    build_key: str = ""
    expected_from: str = EXPECTED_IN_PINS  # where the counts were set: a template of {op} and {expected}

    @classmethod
    def make(
        cls,
        device: str,
        expected: Mapping[str, int],
        pinned_commit: str | None,
        patched: bool,
        build_key: str = "",
        dirty: DirtyRule | None = None,
        expected_from: str = EXPECTED_IN_PINS,
    ) -> GateSpec:
        check_device(device)
        check_ops(expected)
        for op, n in expected.items():
            if isinstance(n, bool) or not isinstance(n, int) or n < 1:
                raise ConfigError(BAD_COUNT.format(op=op, count=n))
        if pinned_commit is not None:
            pinned_commit = pinned_commit.lower()
            if not SHA_PREFIX_RE.match(pinned_commit):
                raise ConfigError(NOT_A_SHA.format(commit=pinned_commit))
        return cls(
            device=device,
            expected=tuple(expected.items()),
            pinned_commit=pinned_commit,
            patched=patched,
            dirty=dirty if dirty is not None else DirtyRule.for_build(patched),
            build_key=build_key,
            expected_from=expected_from,
        )

    def expectation_source(self, op: str) -> str:
        """Where ``op``'s expected count was set: the place to change it."""
        return self.expected_from.format(op=op, expected=dict(self.expected).get(op, 0))

    @property
    def pin(self) -> str:
        return self.pinned_commit[:MIN_SHORT_SHA] if self.pinned_commit else "none"


@dataclass(frozen=True)
class Outcome:
    """How a run ended. ``returncode`` is None when it is not known (a saved log)."""

    returncode: int | None = None
    timed_out: bool = False
    timeout: float | None = None
    seconds: float = 0.0

    @property
    def killed(self) -> bool:
        return self.timed_out or (self.returncode is not None and self.returncode < 0)

    def described(self) -> str:
        """How it exited, in words (a record's ``exit.OP`` property)."""
        if self.returncode is None:
            return "not known"
        text = describe_returncode(self.returncode)
        return EXIT_TIMED_OUT.format(status=text) if self.timed_out else text

    @property
    def signal_name(self) -> str:
        rc = self.returncode
        if rc is None or rc >= 0:
            return ""
        try:
            return signal.Signals(-rc).name
        except ValueError:
            return f"signal {-rc}"


@dataclass(frozen=True)
class ConsoleRun:
    """One console run's evidence: for one op, or (a saved log) for every op it holds."""

    report: ConsoleReport
    outcome: Outcome = field(default_factory=Outcome)
    op: str | None = None  # the -o it was run with; None: a saved log, judged for every expected op
    log: str = ""  # where its output is, for the messages


@dataclass(frozen=True)
class SqlRun:
    report: SqlReport
    outcome: Outcome = field(default_factory=Outcome)
    log: str = ""


def same_commit(short: str, pinned: str) -> bool:
    """Whether a build_commit ``short`` names the pinned commit (either a prefix of the other, 7 hex digits or more)."""
    return len(short) >= MIN_SHORT_SHA and SHA_PREFIX_RE.match(short) is not None and (pinned.startswith(short) or short.startswith(pinned))
