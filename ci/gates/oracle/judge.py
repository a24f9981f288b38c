"""The oracle gate's verdict: each case's output and snapshot slots, as the device computed them, against the float64
reference of the op's definition (pure: tested on planted values).

A non-finite value anywhere in the output or a written slot fails the case, counted, whatever the rest scores (a
kernel can score well on gentle gates and turn NaN on hard ones). Otherwise the SNR of the output, and of the worst
written slot, must reach its floor: ``10 log10(sum ref^2 / sum (out - ref)^2)`` dB; zero noise is +inf, noise over
a zero signal -inf.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from enum import Enum

import numpy as np
import numpy.typing as npt

from ci.gates.oracle import NAME
from ci.gates.oracle.reference import Reference, snr_db
from ci.gates.results import CaseResult, GateResult, Status, case_counts

GATE = NAME

# Messages, shared with the tests that match on them (tests/support/messages.py)
CASE_SCORED = "{case}: output {output}, slots {slots} (floors {floor_output:g}/{floor_slots:g})"
NON_FINITE = "{case}: {count} non-finite value(s): output {output} of {output_size}, slots {slots} of {slots_size}"
BELOW_FLOOR = "; {what} below its floor"
UNSUPPORTED = "{case}: {device} does not support this case"
DRIVER_FAILED = "{case}: the driver failed on {device}: {why}"
SUMMARY = "{verdict}: {passed}/{judged} cases at or above the floors on {device} ({skipped} not supported); worst {worst}"
NO_CASE_RAN = "no case ran on {device}"
SLOT_DETAIL = "slot {slot}: {db}"

F32 = npt.NDArray[np.float32]


@dataclass(frozen=True)
class Floors:
    """The SNR each case must reach, in dB (pins.yaml carries them)."""

    output_db: float
    slots_db: float


# The engine's KernelForge gate, "100 dB against float64, which is float32 accuracy" (1bit-MONSTER/engine
# tools/kernelforge/gdn-prefill/program.md). On gdn-engine-k8's final state the reference rounded to float32 scores
# 152 dB, to f16 74, to bf16 56; the fork's CPU op (c14872f) scores 129-149 dB over every case.
ENGINE_FLOORS = Floors(100.0, 100.0)  # for the output and the slots alike


class Outcome(Enum):
    RAN = "ran"
    UNSUPPORTED = "unsupported"  # the device's supports_op said no
    FAILED = "failed"  # the driver did not finish: a crash, a timeout, a short output


@dataclass(frozen=True)
class Measured:
    """What the driver gave back for one case: its output ``[B, T, H_v, S]`` and its written slots
    ``[min(T, K), B, H_v, S, S]``, as float32, or why there are none."""

    case: str
    outcome: Outcome
    output: F32 | None = None
    slots: F32 | None = None
    why: str = ""
    seconds: float = 0.0
    case_ms: float | None = None  # --bench-mode's median
    samples_ms: tuple[float, ...] = ()  # --bench-mode's every timed compute, in order


@dataclass(frozen=True)
class Score:
    output_db: float
    slot_db: tuple[float, ...]  # each written slot's
    non_finite_output: int
    non_finite_slots: int

    @property
    def slots_db(self) -> float:
        return min(self.slot_db)

    @property
    def non_finite(self) -> int:
        return self.non_finite_output + self.non_finite_slots

    def margin(self, floors: Floors) -> float:
        """How far above its floors the case is (the less of the two); -inf with a non-finite value."""
        if self.non_finite:
            return -math.inf
        return min(self.output_db - floors.output_db, self.slots_db - floors.slots_db)


def score(output: F32, slots: F32, reference: Reference) -> Score:
    if output.shape != reference.output.shape or slots.shape != reference.slots.shape:
        raise ValueError(f"measured {output.shape} and {slots.shape}, the reference {reference.output.shape} and {reference.slots.shape}")
    bad_output = int(np.count_nonzero(~np.isfinite(output)))
    bad_slots = int(np.count_nonzero(~np.isfinite(slots)))
    with np.errstate(invalid="ignore", over="ignore"):
        output_db = snr_db(output, reference.output)
        slot_db = tuple(snr_db(slots[s], reference.slots[s]) for s in range(slots.shape[0]))
    return Score(output_db, slot_db, bad_output, bad_slots)


def shown_db(db: float) -> str:
    if db == math.inf:
        return "exact"
    return f"{db:.1f} dB"


def judge_case(measured: Measured, reference: Reference | None, floors: Floors, device: str, group: str = "") -> tuple[CaseResult, Score | None]:
    """One case's result, and its score when it ran."""
    name = measured.case
    if measured.outcome is Outcome.UNSUPPORTED:
        return CaseResult(name, Status.SKIPPED, UNSUPPORTED.format(case=name, device=device), group, measured.why, measured.seconds), None
    if measured.outcome is Outcome.FAILED or measured.output is None or measured.slots is None or reference is None:
        why = measured.why or "no output"
        return CaseResult(name, Status.ERROR, DRIVER_FAILED.format(case=name, device=device, why=why), group, measured.why, measured.seconds), None
    s = score(measured.output, measured.slots, reference)
    detail = ", ".join(SLOT_DETAIL.format(slot=i, db=shown_db(db)) for i, db in enumerate(s.slot_db))
    if s.non_finite:
        message = NON_FINITE.format(
            case=name,
            count=s.non_finite,
            output=s.non_finite_output,
            output_size=measured.output.size,
            slots=s.non_finite_slots,
            slots_size=measured.slots.size,
        )
        return CaseResult(name, Status.FAILED, message, group, detail, measured.seconds), s
    message = CASE_SCORED.format(
        case=name, output=shown_db(s.output_db), slots=shown_db(s.slots_db), floor_output=floors.output_db, floor_slots=floors.slots_db
    )
    low = [what for what, db, floor in (("output", s.output_db, floors.output_db), ("slots", s.slots_db, floors.slots_db)) if not db >= floor]
    if low:
        message += BELOW_FLOOR.format(what=" and ".join(low))
    return CaseResult(name, Status.FAILED if low else Status.PASSED, message, group, detail, measured.seconds), s


def judge(
    judged: Sequence[tuple[CaseResult, Score | None]], floors: Floors, device: str, seconds: float = 0.0, properties: Sequence[tuple[str, str]] = ()
) -> GateResult:
    """The gate's verdict over every case: failed when a case failed (a non-finite value, a figure below its floor),
    an error when the driver failed on a case or no case ran; the summary names the worst case."""
    cases = tuple(c for c, _ in judged)
    scored = [(c, s) for c, s in judged if s is not None]
    problems = tuple(c.message for c in cases if c.status in (Status.FAILED, Status.ERROR))
    if not scored:
        problems += (NO_CASE_RAN.format(device=device),)
    if any(c.status is Status.FAILED for c in cases):
        status = Status.FAILED
    elif problems:
        status = Status.ERROR
    else:
        status = Status.PASSED
    worst_case = min(scored, key=lambda cs: cs[1].margin(floors))[0] if scored else None
    summary = SUMMARY.format(
        verdict=status.value.upper(),
        passed=sum(c.status is Status.PASSED for c in cases),
        judged=len(scored),
        device=device,
        skipped=sum(c.status is Status.SKIPPED for c in cases),
        worst=worst_case.message if worst_case is not None else "none",
    )
    finite = [s for _, s in scored if not s.non_finite]
    lowest = (("worst_output_db", min((s.output_db for s in finite), default=math.inf)), ("worst_slots_db", min((s.slots_db for s in finite), default=math.inf)))
    metrics = tuple((k, v) for k, v in lowest if math.isfinite(v))  # JSON has no infinity: an exact figure is left out
    return GateResult(
        gate=GATE,
        status=status,
        summary=summary,
        cases=cases,
        problems=problems,
        counts=case_counts(cases),
        properties=(("device", device), ("floor_output_db", f"{floors.output_db:g}"), ("floor_slots_db", f"{floors.slots_db:g}"), *properties),
        metrics=metrics,
        seconds=seconds,
    )
