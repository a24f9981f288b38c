"""The case plan, as data: stable unique ids and seeds, every group the gate promises, inputs drawn the same way each
time and inside their ranges; and the case file's layout (the header, the sizes of the op's result)."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest

from ci.gates.oracle.cases import BACKEND_OPS, CASES, ENGINE, HARD_GATES, Case, Draw, Shape, Span, draw
from ci.gates.oracle.wire import HEADER, MAGIC, encode, split


def test_ids_and_seeds_are_unique() -> None:
    assert len({c.id for c in CASES}) == len(CASES)
    assert len({c.seed for c in CASES}) == len(CASES)
    assert all(c.id.startswith("gdn-") and c.id == c.id.lower() and " " not in c.id for c in CASES)


def test_the_ids_do_not_move() -> None:
    """A case's id names it in the ledger across runs: these are the ones recorded so far."""
    ids = {c.id for c in CASES}
    assert {"gdn-engine-k1", "gdn-engine-k8", "gdn-decode-k1", "gdn-decode-k8", "gdn-long-t2048"} <= ids
    assert {"gdn-tbo-h32-s128-t1-b1", "gdn-tbo-h32-s16-t1-b1-perm-kda", "gdn-tbo-h8-s32-t4-b2-vr2-kda-k4", "gdn-tbo-h4-s32-t8-b1-k3"} <= ids


def test_the_engine_layer_without_and_with_snapshots() -> None:
    engine = [c for c in CASES if c.group == "engine"]
    assert {c.shape.snapshots for c in engine} == {1, 8}
    for c in engine:
        assert (c.shape.head_size, c.shape.v_heads, c.shape.qk_heads, c.shape.tokens, c.shape.seqs) == (128, 48, 16, 512, 1)
    assert ENGINE.snapshots == 1


def test_every_case_of_test_backend_ops() -> None:
    tbo = [c.shape for c in CASES if c.group == "backend-ops"]
    assert len(tbo) == len(BACKEND_OPS) == 36
    assert {s.head_size for s in tbo} == {16, 32, 64, 128}
    assert any(s.permuted and s.kda for s in tbo)
    assert any(s.permuted and not s.kda for s in tbo)
    assert any(s.v_heads == 2 * s.qk_heads and s.kda for s in tbo)
    assert any(s.v_heads == 2 * s.qk_heads and not s.kda for s in tbo)
    assert any(s.snapshots == s.tokens > 1 for s in tbo)  # K > 1, every slot written
    assert any(1 < s.snapshots < s.tokens for s in tbo)  # K > 1, older states dropped
    assert any(s.seqs == 2 for s in tbo)
    assert all(c.draw == Draw() for c in CASES if c.group == "backend-ops")  # its own ranges


def test_decode_long_and_hard_inputs() -> None:
    def having(pred: Callable[[Case], bool]) -> list[Case]:
        return [c for c in CASES if pred(c)]

    assert having(lambda c: c.shape.tokens == 1 and c.shape.head_size == 128 and c.shape.snapshots == 8)  # only slot 0 written
    assert having(lambda c: c.shape.tokens == 1 and c.shape.head_size == 128 and c.shape.snapshots == 1)
    assert having(lambda c: c.shape.tokens == 2048 and c.shape.head_size == 128)
    assert having(lambda c: c.draw.log_gate == HARD_GATES and c.shape == Shape(128, 16, 48, 512, snapshots=8))
    assert having(lambda c: c.draw.log_gate == HARD_GATES and c.shape.tokens == 2048)
    assert having(lambda c: c.draw.log_gate == HARD_GATES and c.shape.kda)
    assert having(lambda c: c.draw.log_gate == Span(0.0, 0.0))
    assert having(lambda c: c.draw.beta == Span(0.0, 0.0) and c.draw.state != Span(0.0, 0.0))
    assert having(lambda c: c.draw.beta == Span(1.0, 1.0))
    assert having(lambda c: c.draw.state.high > 65504.0)
    assert having(lambda c: c.draw.state == Span(0.0, 0.0) and c.draw.beta != Span(0.0, 0.0))
    assert having(lambda c: c.draw.state == Span(0.0, 0.0) and c.draw.beta == Span(0.0, 0.0))  # nothing but zeros: exact


def test_every_shape_is_one_the_op_takes() -> None:
    for c in CASES:
        s = c.shape
        assert s.v_heads % s.qk_heads == 0, c.id
        assert min(s.tokens, s.seqs, s.snapshots) >= 1, c.id


def test_the_draw_is_the_same_every_time_and_inside_its_ranges() -> None:
    case = next(c for c in CASES if c.id == "gdn-tbo-h8-s32-t4-b2-vr2-kda-k4")
    a, b = draw(case), draw(case)
    for name in ("q", "k", "v", "g", "beta", "state"):
        x, y = getattr(a, name), getattr(b, name)
        assert x.dtype == np.float32
        assert x.flags.c_contiguous
        np.testing.assert_array_equal(x, y)
    s = case.shape
    assert a.q.shape == (2, 4, 8, 32)
    assert a.v.shape == (2, 4, 16, 32)
    assert a.g.shape == (2, 4, 16, 32)
    assert a.beta.shape == (2, 4, 16)
    assert a.state.shape == (s.seqs, s.v_heads, 32, 32)
    np.testing.assert_allclose(np.linalg.norm(a.q.astype(np.float64), axis=-1), 1.0, rtol=1e-6)
    np.testing.assert_allclose(np.linalg.norm(a.k.astype(np.float64), axis=-1), 1.0, rtol=1e-6)
    assert (a.g >= -20.0).all()
    assert (a.g < 0.0).all()
    assert (a.beta >= 0.0).all()
    assert (a.beta <= 1.0).all()
    assert (a.v >= -0.3).all()
    assert (a.v <= 5.0).all()
    other = draw(Case(case.id, case.seed + 1, case.shape))
    assert not np.array_equal(other.v, a.v)


def test_exact_values_are_drawn_exactly() -> None:
    x = draw(Case("edges", 1, Shape(4, 1, 2, 3), Draw(log_gate=Span(0.0, 0.0), beta=Span(1.0, 1.0), state=Span(0.0, 0.0))))
    assert (x.g == 0.0).all()
    assert (x.beta == 1.0).all()
    assert (x.state == 0.0).all()


def test_the_result_holds_the_output_then_k_slots() -> None:
    s = Shape(8, 2, 4, 5, seqs=3, snapshots=7)
    assert s.dst_count == 8 * 4 * (5 * 3 + 7 * 8 * 3)  # ggml.c 6538-6539: ne = {S_v * H, T * B + K * S_v * B}
    assert s.written_slots == 5
    flat = np.arange(s.dst_count, dtype=np.float32)
    output, slots = split(s, flat)
    assert output.shape == (3, 5, 4, 8)
    assert slots.shape == (5, 3, 4, 8, 8)
    assert output[1, 2, 3, 4] == ((1 * 5 + 2) * 4 + 3) * 8 + 4  # ops.cpp 10820, 10865: (seq * T + t) * H + h
    assert slots[2, 1, 3, 5, 6] == s.output_count + 2 * s.slot_count + (1 * 4 + 3) * 64 + 5 * 8 + 6  # ops.cpp 10870-10871
    with pytest.raises(ValueError, match="expected"):
        split(s, flat[:-1])


def test_the_case_file_is_the_header_then_the_six_tensors() -> None:
    for permuted in (False, True):
        s = Shape(4, 2, 4, 3, seqs=2, snapshots=2, kda=True, permuted=permuted)
        x = draw(Case("file", 2, s))
        blob = encode(s, x)
        assert HEADER.unpack_from(blob) == (MAGIC, 4, 2, 4, 3, 2, 2, 4, int(permuted))
        assert len(blob) == HEADER.size + 4 * sum(a.size for a in (x.q, x.k, x.v, x.g, x.beta, x.state))
        q = np.frombuffer(blob, "<f4", x.q.size, HEADER.size)
        stored = x.q.transpose(0, 2, 1, 3) if permuted else x.q  # permuted: [B, H, T, S] in memory
        np.testing.assert_array_equal(q, stored.ravel())
