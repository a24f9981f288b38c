"""The oracle gate's cases, as data: each a stable id, a seed, a shape of GGML_OP_GATED_DELTA_NET and how its inputs
are drawn (:func:`draw`, a numpy Generator seeded with the case's seed: the same arrays on every machine).

Five groups (:data:`CASES`): the engine's layer, every GATED_DELTA_NET case of the fork's test-backend-ops drawn
from its ranges, decode, a 2048-token sequence, and hard inputs that gentle ranges never reach (log-gates down to
-20, gates at 1, beta at 0 and 1, a state past f16's range, zeros). Plan apart from run: nothing here runs the op;
:mod:`ci.gates.oracle.run` does.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

F32 = npt.NDArray[np.float32]


@dataclass(frozen=True)
class Shape:
    """The op's shape (ggml.h 2581-2590): q, k ``[S, H_k, T, B]``, v ``[S, H_v, T, B]``, K snapshot slots."""

    head_size: int  # S_k = S_v
    qk_heads: int  # H_k
    v_heads: int  # H_v, a multiple of H_k
    tokens: int  # T
    seqs: int = 1  # B
    snapshots: int = 1  # K
    kda: bool = False  # a gate per key channel ([S, H_v, T, B]) instead of one per head
    permuted: bool = False  # q, k, v stored [S, T, H, B] and viewed through ggml_permute(0, 2, 1, 3), as test-backend-ops does

    @property
    def gate_width(self) -> int:
        return self.head_size if self.kda else 1

    @property
    def written_slots(self) -> int:
        """The snapshot slots the op writes: min(T, K); the rest are the caller's (ggml.h 2588-2590)."""
        return min(self.tokens, self.snapshots)

    @property
    def output_count(self) -> int:
        return self.head_size * self.v_heads * self.tokens * self.seqs

    @property
    def slot_count(self) -> int:
        """Floats in one snapshot slot: a state per sequence and value head."""
        return self.head_size * self.head_size * self.v_heads * self.seqs

    @property
    def dst_count(self) -> int:
        """Floats in the op's whole result: the output, then K slots (ggml.c 6538-6540)."""
        return self.output_count + self.snapshots * self.slot_count


@dataclass(frozen=True)
class Span:
    """A uniform draw in [low, high); ``low == high`` gives that value exactly."""

    low: float
    high: float


# test-backend-ops' ranges (test-backend-ops.cpp 3867-3878)
BACKEND_OPS_GATES = Span(-20.0, -1e-4)
UNIT = Span(0.0, 1.0)
BACKEND_OPS_VALUES = Span(-0.3, 5.0)
SYMMETRIC = Span(-1.0, 1.0)
# the model's gates (the engine's driver: -U[0, 0.5)); the hard range reaches 0, which test-backend-ops stops short of
MODEL_GATES = Span(-0.5, 0.0)
HARD_GATES = Span(-20.0, 0.0)  # a gate-factored chunked kernel turned NaN here (the engine's KernelForge lesson)
ZERO = Span(0.0, 0.0)
ONE = Span(1.0, 1.0)
PAST_F16 = Span(-1e5, 1e5)  # a carried state above f16's largest value, 65504


@dataclass(frozen=True)
class Draw:
    """How a case's inputs are drawn; q and k are drawn in ``qk`` and L2-normalised, as the model does before the op."""

    log_gate: Span = BACKEND_OPS_GATES
    beta: Span = UNIT
    value: Span = BACKEND_OPS_VALUES
    state: Span = SYMMETRIC
    qk: Span = SYMMETRIC


MODEL = Draw(log_gate=MODEL_GATES)


@dataclass(frozen=True)
class Case:
    id: str
    seed: int
    shape: Shape
    draw: Draw = field(default_factory=Draw)
    group: str = ""  # engine, backend-ops, decode, long, hard


@dataclass(frozen=True)
class Inputs:
    """A case's inputs in float32, in ggml's memory order of the op's (unpermuted) view: q, k ``[B, T, H_k, S]``, v
    ``[B, T, H_v, S]``, g ``[B, T, H_v, 1 or S]``, beta ``[B, T, H_v]``, state ``[B, H_v, S, S]`` (stored transposed:
    ``state[b, h, j, i]`` is S[i][j]; :mod:`ci.gates.oracle.reference`)."""

    q: F32
    k: F32
    v: F32
    g: F32
    beta: F32
    state: F32


def _span(rng: np.random.Generator, span: Span, shape: tuple[int, ...]) -> npt.NDArray[np.float64]:
    if span.low == span.high:
        return np.full(shape, span.low)
    return rng.uniform(span.low, span.high, shape)


def _unit_rows(x: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
    norm = np.sqrt(np.sum(x * x, axis=-1, keepdims=True))
    unit: npt.NDArray[np.float64] = x / np.maximum(norm, 1e-6)  # ggml_l2_norm's eps, as test-backend-ops applies it
    return unit


def draw(case: Case) -> Inputs:
    """The case's inputs: the same arrays for the same case on every machine (numpy's Generator, PCG64)."""
    s, d = case.shape, case.draw
    rng = np.random.default_rng(case.seed)
    qk = (s.seqs, s.tokens, s.qk_heads, s.head_size)
    heads = (s.seqs, s.tokens, s.v_heads)
    q = _unit_rows(_span(rng, d.qk, qk))
    k = _unit_rows(_span(rng, d.qk, qk))
    v = _span(rng, d.value, (*heads, s.head_size))
    g = _span(rng, d.log_gate, (*heads, s.gate_width))
    beta = _span(rng, d.beta, heads)
    state = _span(rng, d.state, (s.seqs, s.v_heads, s.head_size, s.head_size))
    f32 = [np.ascontiguousarray(a, dtype=np.float32) for a in (q, k, v, g, beta, state)]
    return Inputs(*f32)


# -- the cases -------------------------------------------------------------------------------------------------

ENGINE = Shape(head_size=128, qk_heads=16, v_heads=48, tokens=512)

# test-backend-ops.cpp 9082-9124 at c14872f, in its order and its own terms:
# (head_count, head_size, n_seq_tokens, n_seqs, v_repeat, permuted, kda, K)
BACKEND_OPS: tuple[tuple[int, int, int, int, int, bool, bool, int], ...] = (
    (32, 128, 1, 1, 1, False, False, 1),
    (32, 16, 1, 1, 1, False, False, 1),
    (32, 16, 1, 1, 1, True, True, 1),
    (32, 16, 1, 1, 1, False, True, 1),
    (16, 64, 1, 2, 1, False, False, 1),
    (4, 64, 4, 1, 1, False, False, 1),
    (4, 64, 4, 2, 1, False, False, 1),
    (8, 32, 4, 2, 2, False, False, 1),
    (4, 64, 4, 2, 1, True, False, 1),
    (4, 64, 4, 1, 1, True, False, 1),
    (4, 64, 1, 1, 1, False, True, 1),
    (4, 64, 1, 2, 1, False, True, 1),
    (4, 16, 1, 2, 1, False, True, 1),
    (4, 32, 4, 1, 1, False, True, 1),
    (4, 64, 4, 2, 1, False, True, 1),
    (8, 32, 4, 2, 2, False, True, 1),
    (4, 64, 4, 2, 1, True, True, 1),
    (4, 16, 4, 2, 1, True, True, 1),
    (4, 64, 64, 1, 1, False, False, 1),
    (4, 64, 127, 1, 1, False, False, 1),
    (4, 64, 256, 1, 1, False, False, 1),
    (4, 64, 65, 1, 1, False, False, 1),
    (4, 64, 100, 1, 1, False, False, 1),
    (4, 64, 200, 1, 1, False, False, 1),
    (4, 64, 127, 2, 1, False, False, 1),
    (4, 64, 64, 1, 1, False, True, 1),
    (4, 64, 33, 1, 1, False, True, 1),
    (4, 64, 100, 1, 1, False, True, 1),
    (4, 16, 2, 1, 1, False, False, 2),
    (4, 32, 4, 1, 1, False, False, 4),
    (4, 64, 4, 2, 1, False, False, 4),
    (8, 128, 4, 1, 1, False, False, 4),
    (4, 64, 4, 2, 1, False, True, 4),
    (8, 32, 4, 2, 2, False, True, 4),
    (4, 32, 8, 1, 1, False, False, 3),
    (4, 64, 16, 2, 1, False, False, 4),
)


def backend_ops_case(index: int, params: tuple[int, int, int, int, int, bool, bool, int]) -> Case:
    """test-backend-ops' case ``params`` (its constructor's arguments) as an oracle case."""
    heads, size, tokens, seqs, repeat, permuted, kda, snapshots = params
    shape = Shape(size, heads, heads * repeat, tokens, seqs, snapshots, kda, permuted)
    name = f"gdn-tbo-h{heads}-s{size}-t{tokens}-b{seqs}"
    name += (f"-vr{repeat}" if repeat > 1 else "") + ("-perm" if permuted else "") + ("-kda" if kda else "") + (f"-k{snapshots}" if snapshots > 1 else "")
    return Case(name, 1000 + index, shape, Draw(), "backend-ops")


LONG = Shape(head_size=128, qk_heads=2, v_heads=4, tokens=2048, snapshots=8)
HARD = Shape(head_size=128, qk_heads=4, v_heads=8, tokens=130, snapshots=8)  # 130: past a 64-, 32- and 16-token chunk's end

# the whole set: 5.9 s on 2 cores with the fork's CPU build (c14872f), the driver 1.7 s of it, the float64 reference
# most of the rest
CASES: tuple[Case, ...] = (
    Case("gdn-engine-k1", 1, ENGINE, MODEL, "engine"),
    Case("gdn-engine-k8", 2, Shape(128, 16, 48, 512, snapshots=8), MODEL, "engine"),
    *(backend_ops_case(i, p) for i, p in enumerate(BACKEND_OPS)),
    Case("gdn-decode-k1", 3, Shape(128, 16, 48, 1), MODEL, "decode"),
    Case("gdn-decode-k8", 4, Shape(128, 16, 48, 1, snapshots=8), MODEL, "decode"),
    Case("gdn-long-t2048", 5, LONG, MODEL, "long"),
    Case("gdn-hard-gates-engine-k8", 6, Shape(128, 16, 48, 512, snapshots=8), Draw(log_gate=HARD_GATES), "hard"),
    Case("gdn-hard-gates-t2048", 7, LONG, Draw(log_gate=HARD_GATES), "hard"),
    Case("gdn-hard-gates-kda", 8, Shape(128, 4, 8, 130, snapshots=8, kda=True), Draw(log_gate=HARD_GATES), "hard"),
    Case("gdn-gate-one", 9, HARD, Draw(log_gate=ZERO), "hard"),
    # beta 0: the state only decays; model gates keep it inside float32's range over the case's 130 tokens
    Case("gdn-beta-zero", 10, HARD, Draw(log_gate=MODEL_GATES, beta=ZERO), "hard"),
    Case("gdn-beta-one", 11, HARD, Draw(beta=ONE), "hard"),
    Case("gdn-gate-one-beta-one", 12, HARD, Draw(log_gate=ZERO, beta=ONE), "hard"),
    Case("gdn-state-past-f16", 13, HARD, Draw(log_gate=MODEL_GATES, state=PAST_F16), "hard"),
    Case("gdn-state-zero", 14, HARD, Draw(state=ZERO), "hard"),
    Case("gdn-all-zero", 15, Shape(128, 4, 8, 16, snapshots=8), Draw(beta=ZERO, state=ZERO), "hard"),
)
