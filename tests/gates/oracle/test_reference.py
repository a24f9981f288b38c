"""The float64 reference against a naive loop of the op's definition, written apart: it reads the case file the driver
would get through ggml's own index arithmetic (each tensor's strides, a permuted view's too; q/k head ``h % H_k``), keeps
the state as S[i][j] (not transposed), and writes the op's whole result as ops.cpp lays it out, slot by slot, with
every float the op leaves alone still NaN. So the encoding, the split and the reference are checked together."""

from __future__ import annotations

import math
import struct

import numpy as np
import numpy.typing as npt
import pytest

from ci.gates.oracle.cases import BACKEND_OPS_GATES, Case, Draw, Shape, Span, draw
from ci.gates.oracle.reference import gated_delta_net
from ci.gates.oracle.wire import HEADER, encode, split


class CaseFile:
    """A case file read as ggml would see its tensors: ``at(name, i0, i1, i2, i3)`` by ne-order indices."""

    def __init__(self, blob: bytes) -> None:
        _, s, hk, hv, t, b, k, gw, permuted = HEADER.unpack_from(blob)
        self.s, self.hk, self.hv, self.t, self.b, self.k, self.gw, self.permuted = s, hk, hv, t, b, k, gw, permuted
        floats = struct.unpack_from(f"<{(len(blob) - HEADER.size) // 4}f", blob, HEADER.size)
        self.tensors: dict[str, tuple[int, tuple[int, int, int, int]]] = {}  # name: (offset in floats, strides in floats of the op's view)
        offset = 0
        for name, heads in (("q", hk), ("k", hk), ("v", hv)):
            # permuted: stored [S, T, H, B], viewed [S, H, T, B]: ggml_permute(0, 2, 1, 3) swaps the strides of dims 1 and 2
            strides = (1, s * t, s, s * t * heads) if permuted else (1, s, s * heads, s * heads * t)
            self.tensors[name] = (offset, strides)
            offset += s * heads * t * b
        for name, ne in (("g", (gw, hv, t, b)), ("beta", (1, hv, t, b)), ("state", (s, s, hv, b))):
            self.tensors[name] = (offset, (1, ne[0], ne[0] * ne[1], ne[0] * ne[1] * ne[2]))
            offset += ne[0] * ne[1] * ne[2] * ne[3]
        assert offset == len(floats)
        self.floats = floats

    def at(self, name: str, i0: int, i1: int, i2: int, i3: int) -> float:
        offset, nb = self.tensors[name]
        return float(self.floats[offset + i0 * nb[0] + i1 * nb[1] + i2 * nb[2] + i3 * nb[3]])


def naive(blob: bytes) -> list[float]:
    """The op on the case file, one float at a time (ops.cpp 10726-10877 at c14872f, read as a definition)."""
    f = CaseFile(blob)
    n, hv, t_count, b_count = f.s, f.hv, f.t, f.b
    kda = f.gw == n
    out_count = n * hv * t_count * b_count
    slot_size = n * n * hv * b_count
    dst = [math.nan] * (out_count + f.k * slot_size)
    scale = 1.0 / math.sqrt(n)
    for b in range(b_count):
        for h in range(hv):
            hq = h % f.hk  # ops.cpp 10802-10803
            S = [[f.at("state", i, j, h, b) for j in range(n)] for i in range(n)]  # stored at j * S + i (ops.cpp 10830): i0 = i, i1 = j
            for t in range(t_count):
                q = [f.at("q", i, hq, t, b) for i in range(n)]
                k = [f.at("k", i, hq, t, b) for i in range(n)]
                v = [f.at("v", j, h, t, b) for j in range(n)]
                beta = f.at("beta", 0, h, t, b)
                for i in range(n):
                    gate = math.exp(f.at("g", i if kda else 0, h, t, b))
                    for j in range(n):
                        S[i][j] *= gate
                delta = [(v[j] - sum(S[i][j] * k[i] for i in range(n))) * beta for j in range(n)]
                for i in range(n):
                    for j in range(n):
                        S[i][j] += k[i] * delta[j]
                for j in range(n):
                    dst[((b * t_count + t) * hv + h) * n + j] = sum(S[i][j] * q[i] for i in range(n)) * scale
                slot = t_count - 1 - t
                if slot < f.k:
                    base = out_count + slot * slot_size + (b * hv + h) * n * n
                    for i in range(n):
                        for j in range(n):
                            dst[base + j * n + i] = S[i][j]
    return dst


SMALL = [
    pytest.param(Shape(4, 2, 4, 5, seqs=2), id="vrepeat2-b2"),
    pytest.param(Shape(4, 2, 4, 5, seqs=2, permuted=True), id="vrepeat2-b2-permuted"),
    pytest.param(Shape(4, 2, 2, 5, kda=True), id="kda"),
    pytest.param(Shape(4, 1, 3, 5, kda=True, permuted=True), id="kda-vrepeat3-permuted"),
    pytest.param(Shape(4, 2, 4, 5, snapshots=3), id="k3-of-5"),
    pytest.param(Shape(4, 2, 4, 3, seqs=2, snapshots=8, kda=True), id="k8-past-3-tokens"),
    pytest.param(Shape(3, 1, 2, 1, snapshots=4, permuted=True), id="decode-k4"),
]


@pytest.mark.parametrize("shape", SMALL)
def test_the_reference_is_the_definition(shape: Shape) -> None:
    case = Case("small", 7, shape, Draw(log_gate=Span(-2.0, 0.0)))
    x = draw(case)
    blob = encode(shape, x)
    by_loop = np.array(naive(blob))
    ref = gated_delta_net(x.q, x.k, x.v, x.g, x.beta, x.state, shape.snapshots)
    output, slots = split(shape, by_loop)
    np.testing.assert_allclose(ref.output, output, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(ref.slots, slots, rtol=1e-12, atol=1e-12)
    unwritten = by_loop[shape.output_count + shape.written_slots * shape.slot_count :]
    assert np.isnan(unwritten).all()  # the caller's slots: the op never writes them
    assert not np.isnan(by_loop[: shape.output_count + shape.written_slots * shape.slot_count]).any()


def test_slot_zero_is_the_final_state_and_slot_s_is_s_tokens_back() -> None:
    shape = Shape(4, 2, 2, 6, snapshots=6)
    x = draw(Case("slots", 3, shape))
    every = gated_delta_net(x.q, x.k, x.v, x.g, x.beta, x.state, 6)
    for tokens in range(1, 7):
        first = gated_delta_net(x.q[:, :tokens], x.k[:, :tokens], x.v[:, :tokens], x.g[:, :tokens], x.beta[:, :tokens], x.state, 1)
        np.testing.assert_array_equal(first.slots[0], every.slots[6 - tokens])
        np.testing.assert_array_equal(first.output, every.output[:, :tokens])


def test_one_value_head_per_q_head_ignores_the_order_of_the_broadcast() -> None:
    """Tiled (h % H_k) and interleaved (h // rep) agree only with one value head per q/k head: a test of the
    broadcast needs v_repeat > 1, which the case plan has (tests/gates/oracle/test_cases.py)."""
    shape = Shape(4, 2, 4, 3)
    x = draw(Case("bcast", 5, shape))
    tiled = gated_delta_net(x.q, x.k, x.v, x.g, x.beta, x.state, 1)
    interleaved = gated_delta_net(x.q[:, :, [0, 0, 1, 1]], x.k[:, :, [0, 0, 1, 1]], x.v, x.g, x.beta, x.state, 1)
    assert not np.allclose(tiled.output, interleaved.output)


def test_zero_gates_keep_the_state_and_zero_beta_only_decays_it() -> None:
    shape = Shape(4, 1, 1, 3)
    x = draw(Case("edges", 11, shape, Draw(log_gate=Span(0.0, 0.0), beta=Span(0.0, 0.0))))
    ref = gated_delta_net(x.q, x.k, x.v, x.g, x.beta, x.state, 1)
    np.testing.assert_array_equal(ref.slots[0], x.state.astype(np.float64))
    decayed = draw(Case("edges", 11, shape, Draw(log_gate=BACKEND_OPS_GATES, beta=Span(0.0, 0.0))))
    out = gated_delta_net(decayed.q, decayed.k, decayed.v, decayed.g, decayed.beta, decayed.state, 1)
    total = np.exp(decayed.g.astype(np.float64).sum(axis=1))[0, 0, 0]
    np.testing.assert_allclose(out.slots[0], decayed.state.astype(np.float64) * total, rtol=1e-12)


@pytest.mark.parametrize(
    ("field", "bad"),
    [("q", np.zeros((1, 2, 3, 4))), ("g", np.zeros((1, 2, 2, 3))), ("beta", np.zeros((1, 2, 3))), ("state", np.zeros((1, 2, 4, 3)))],
)
def test_shapes_that_are_not_the_op_are_refused(field: str, bad: npt.NDArray[np.float64]) -> None:
    args = {
        "q": np.zeros((1, 2, 1, 4)),
        "k": np.zeros((1, 2, 1, 4)),
        "v": np.zeros((1, 2, 2, 4)),
        "g": np.zeros((1, 2, 2, 1)),
        "beta": np.zeros((1, 2, 2)),
        "state": np.zeros((1, 2, 4, 4)),
    }
    args[field] = bad
    with pytest.raises(ValueError, match=field):
        gated_delta_net(args["q"], args["k"], args["v"], args["g"], args["beta"], args["state"], 1)
