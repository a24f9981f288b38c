"""The verdict on planted results: the reference itself in float32 passes; a NaN or an inf fails whatever the rest
scores, named with its count; f16 and bf16 state fail their floor; an all-zero case is exact; the summary names the
worst case."""

from __future__ import annotations

import math

import numpy as np
import numpy.typing as npt
import pytest

from ci.gates.oracle.cases import Case, Draw, Shape, Span, draw
from ci.gates.oracle.judge import (
    BELOW_FLOOR,
    CASE_SCORED,
    DRIVER_FAILED,
    ENGINE_FLOORS,
    NO_CASE_RAN,
    NON_FINITE,
    SUMMARY,
    UNSUPPORTED,
    Floors,
    Measured,
    Outcome,
    judge,
    judge_case,
)
from ci.gates.oracle.reference import Reference, gated_delta_net, snr_db
from ci.gates.results import Status
from tests.support.messages import said

SHAPE = Shape(16, 2, 4, 24, seqs=2, snapshots=4)
F32 = npt.NDArray[np.float32]


@pytest.fixture(scope="module")
def reference() -> Reference:
    x = draw(Case("planted", 9, SHAPE))
    return gated_delta_net(x.q, x.k, x.v, x.g, x.beta, x.state, SHAPE.snapshots)


def as_ran(name: str, output: npt.NDArray[np.floating], slots: npt.NDArray[np.floating]) -> Measured:
    return Measured(name, Outcome.RAN, output.astype(np.float32), slots.astype(np.float32), seconds=0.5)


def bf16(x: npt.NDArray[np.float64]) -> F32:
    """``x`` rounded to bfloat16 (8 bits of mantissa) and back, round to nearest even."""
    bits = x.astype(np.float32).view(np.uint32)
    rounded = (bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF0000
    return rounded.astype(np.uint32).view(np.float32)


def test_float32_of_the_reference_passes_far_above_the_floors(reference: Reference) -> None:
    result, score = judge_case(as_ran("clean", reference.output, reference.slots), reference, ENGINE_FLOORS, "CPU", "engine")
    assert result.status is Status.PASSED
    assert score is not None
    assert score.output_db > 130
    assert score.slots_db > 130
    assert said(CASE_SCORED, result.message, case="clean", floor_output=100.0, floor_slots=100.0)
    assert (result.classname, result.seconds) == ("engine", 0.5)
    assert result.detail.count("slot ") == SHAPE.written_slots


@pytest.mark.parametrize(("where", "value"), [("output", math.nan), ("output", math.inf), ("slots", -math.inf), ("slots", math.nan)])
def test_one_non_finite_value_fails_the_case(reference: Reference, where: str, value: float) -> None:
    output, slots = reference.output.astype(np.float32), reference.slots.astype(np.float32)
    (output if where == "output" else slots).flat[17] = value
    result, score = judge_case(as_ran("planted", output, slots), reference, ENGINE_FLOORS, "CPU")
    assert result.status is Status.FAILED
    assert score is not None
    assert score.non_finite == 1
    counts = {"output": 1, "slots": 0} if where == "output" else {"output": 0, "slots": 1}
    assert said(NON_FINITE, result.message, case="planted", count=1, output_size=output.size, slots_size=slots.size, **counts)


def test_a_million_nans_are_counted(reference: Reference) -> None:
    slots = np.full(reference.slots.shape, np.nan, dtype=np.float32)
    result, _ = judge_case(as_ran("gate-factored", reference.output, slots), reference, ENGINE_FLOORS, "ROCm0")
    assert said(NON_FINITE, result.message, count=slots.size, output=0, slots=slots.size)


def test_a_non_finite_value_fails_even_with_the_floors_at_minus_infinity(reference: Reference) -> None:
    output = reference.output.astype(np.float32)
    output[0, 0, 0, 0] = np.nan
    result, _ = judge_case(as_ran("x", output, reference.slots), reference, Floors(-math.inf, -math.inf), "CPU")
    assert result.status is Status.FAILED


@pytest.mark.parametrize(("lossy", "low", "high"), [(lambda x: x.astype(np.float16), 55.0, 85.0), (bf16, 40.0, 60.0)], ids=["f16", "bf16"])
def test_a_half_precision_state_fails_its_floor(reference: Reference, lossy: object, low: float, high: float) -> None:
    slots = lossy(reference.slots)  # type: ignore[operator]
    result, score = judge_case(as_ran("half", reference.output, slots), reference, ENGINE_FLOORS, "Vulkan0")
    assert result.status is Status.FAILED
    assert score is not None
    assert low < score.slots_db < high
    assert score.output_db > 130
    assert result.message.endswith(BELOW_FLOOR.format(what="slots"))


def test_one_wrong_slot_is_seen_among_good_ones(reference: Reference) -> None:
    slots = reference.slots.copy()
    slots[[2, 3]] = slots[[3, 2]]  # two slots swapped: the order of the snapshots
    result, score = judge_case(as_ran("order", reference.output, slots), reference, ENGINE_FLOORS, "CUDA0")
    assert score is not None
    assert score.slot_db[0] > 130
    assert score.slot_db[2] < 60
    assert result.status is Status.FAILED


def test_a_lower_floor_passes_what_the_engine_floor_fails(reference: Reference) -> None:
    slots = reference.slots.astype(np.float16)
    result, _ = judge_case(as_ran("half", reference.output, slots), reference, Floors(100.0, 50.0), "CPU")
    assert result.status is Status.PASSED
    assert said(CASE_SCORED, result.message, floor_output=100.0, floor_slots=50.0)


def test_zero_signal() -> None:
    zero = np.zeros(4)
    assert snr_db(zero, zero) == math.inf
    assert snr_db(np.array([0.0, 1e-30, 0.0, 0.0]), zero) == -math.inf
    assert snr_db(np.array([1.0, 2.0]), np.array([1.0, 2.0])) == math.inf
    assert snr_db(np.array([1.1, 0.0]), np.array([1.0, 0.0])) == pytest.approx(20.0)
    s = Shape(4, 1, 2, 3, snapshots=2)
    x = draw(Case("silent", 4, s, Draw(beta=Span(0.0, 0.0), state=Span(0.0, 0.0))))
    ref = gated_delta_net(x.q, x.k, x.v, x.g, x.beta, x.state, 2)
    assert not ref.output.any()
    assert not ref.slots.any()
    result, _ = judge_case(as_ran("gdn-all-zero", ref.output, ref.slots), ref, ENGINE_FLOORS, "CPU")
    assert result.status is Status.PASSED
    assert result.message.startswith("gdn-all-zero: output exact, slots exact")
    noisy = ref.output.copy()
    noisy[0, 0, 0, 0] = 1e-6
    result, _ = judge_case(as_ran("gdn-all-zero", noisy, ref.slots), ref, ENGINE_FLOORS, "CPU")
    assert result.status is Status.FAILED


def test_unsupported_and_failed_runs() -> None:
    skipped, score = judge_case(Measured("c", Outcome.UNSUPPORTED, why="no"), None, ENGINE_FLOORS, "Vulkan0")
    assert skipped.status is Status.SKIPPED
    assert score is None
    assert skipped.message == UNSUPPORTED.format(case="c", device="Vulkan0")
    failed, score = judge_case(Measured("c", Outcome.FAILED, why="exit 6: boom"), None, ENGINE_FLOORS, "CPU")
    assert failed.status is Status.ERROR
    assert score is None
    assert failed.message == DRIVER_FAILED.format(case="c", device="CPU", why="exit 6: boom")


def test_the_gate_names_its_worst_case(reference: Reference) -> None:
    good = judge_case(as_ran("good", reference.output, reference.slots), reference, ENGINE_FLOORS, "CPU")
    lower = judge_case(as_ran("lower", reference.output, bf16(reference.slots)), reference, Floors(100.0, 40.0), "CPU")
    skipped = judge_case(Measured("skip", Outcome.UNSUPPORTED), None, ENGINE_FLOORS, "CPU")
    result = judge([good, lower, skipped], ENGINE_FLOORS, "CPU", 1.5, (("build", "abc"),))
    assert result.status is Status.PASSED
    assert said(SUMMARY, result.summary, verdict="PASSED", passed=2, judged=2, device="CPU", skipped=1)
    assert result.summary.endswith(lower[0].message)
    assert dict(result.counts) == {"passed": 2, "failed": 0, "skipped": 1, "error": 0}
    assert ("build", "abc") in result.properties
    assert ("floor_output_db", "100") in result.properties
    metrics = dict(result.metrics)
    assert 40 < metrics["worst_slots_db"] < 60
    assert metrics["worst_output_db"] > 130
    assert result.to_json()["metrics"] == metrics


def test_a_non_finite_case_is_the_worst_and_fails_the_gate(reference: Reference) -> None:
    output = reference.output.astype(np.float32)
    output[0, 0, 0, 0] = np.inf
    bad = judge_case(as_ran("bad", output, reference.slots), reference, ENGINE_FLOORS, "CPU")
    good = judge_case(as_ran("good", reference.output, reference.slots), reference, ENGINE_FLOORS, "CPU")
    error = judge_case(Measured("crashed", Outcome.FAILED, why="exit 134"), None, ENGINE_FLOORS, "CPU")
    result = judge([good, bad, error], ENGINE_FLOORS, "CPU")
    assert result.status is Status.FAILED
    assert result.summary.endswith(bad[0].message)
    assert result.problems == (bad[0].message, error[0].message)
    assert dict(result.metrics)["worst_output_db"] > 130  # the finite cases' figures only


def test_an_error_alone_is_an_error_and_no_case_run_is_one_too() -> None:
    error = judge_case(Measured("crashed", Outcome.FAILED, why="exit 134"), None, ENGINE_FLOORS, "CPU")
    assert judge([error], ENGINE_FLOORS, "CPU").status is Status.ERROR
    skipped = judge_case(Measured("skip", Outcome.UNSUPPORTED), None, ENGINE_FLOORS, "Vulkan0")
    result = judge([skipped], ENGINE_FLOORS, "Vulkan0")
    assert result.status is Status.ERROR
    assert result.problems == (NO_CASE_RAN.format(device="Vulkan0"),)
    assert result.metrics == ()
