"""Each model's tensor table, pure: names and shapes as the fork's loaders create them (``src/models/qwen35.cpp``,
``qwen35moe.cpp``, ``dflash.cpp`` at ciru-ai/ROCmFPX c14872f), the type llama-quantize gives each
(``src/llama-quant.cpp``: 2-D weights the file's, Q4_0's output.weight Q6_K; 1-D tensors, norms, ``ssm_conv1d`` and
the MoE router f32), and what fills it.

Scales keep activations finite through every layer: a matrix's weights have std ``1 / sqrt(fan_in)``, token
embeddings 1, the output head ``LOGIT_STD / sqrt(dim)``; the rows of tokens never to be sampled are zero there.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ci.gates.shapes.blocks import F32, TYPES
from ci.gates.shapes.spec import DFlashShape, Qwen35Shape

LOGIT_STD = 3.0
# ssm_a holds -A (the converter's -exp(A_log)); Qwen initialises A uniformly in [1, 16]
DECAY = (1.0, 16.0)


@dataclass(frozen=True)
class TensorPlan:
    """One tensor: ``shape`` in numpy order (gguf stores it reversed, as ggml's ne), its ggml type, and its fill:
    random weights of ``std``, or (f32) a constant ``fill``, or ``values``."""

    name: str
    shape: tuple[int, ...]
    type: str
    std: float = 0.0
    fill: float | None = None
    values: tuple[float, ...] = ()
    zero_rows: tuple[int, ...] = ()  # rows (last-but-one axis) written as zero blocks

    @property
    def elements(self) -> int:
        return math.prod(self.shape)

    @property
    def row(self) -> int:
        return self.shape[-1]

    @property
    def nbytes(self) -> int:
        if self.type == F32:
            return 4 * self.elements
        kind = TYPES[self.type]
        return self.elements // kind.weights * kind.size

    def f32(self, rng: np.random.Generator) -> np.ndarray:
        """An f32 tensor's values (``rng`` draws the random ones)."""
        if self.values:
            return np.asarray(self.values, dtype=np.float32).reshape(self.shape)
        if self.fill is not None:
            return np.full(self.shape, self.fill, dtype=np.float32)
        return rng.normal(0.0, self.std, size=self.shape).astype(np.float32)


def _matrix(name: str, rows: int, cols: int, kind: str, std: float | None = None, zero_rows: tuple[int, ...] = ()) -> TensorPlan:
    return TensorPlan(name, (rows, cols), kind, std=cols**-0.5 if std is None else std, zero_rows=zero_rows)


def _vector(name: str, n: int, fill: float) -> TensorPlan:
    return TensorPlan(name, (n,), F32, fill=fill)


def qwen35_plan(shape: Qwen35Shape, vocab_size: int, kind: str, output_kind: str, silent: tuple[int, ...]) -> list[TensorPlan]:
    """A qwen35 / qwen35moe target's tensors in gguf order; ``silent``: token ids whose output rows are zero."""
    d = shape.dim
    plans = [_matrix("token_embd.weight", vocab_size, d, kind, std=1.0)]
    lo, hi = DECAY
    for i in range(shape.layers):
        p = f"blk.{i}."
        plans += [_vector(p + "attn_norm.weight", d, 1.0), _vector(p + "post_attention_norm.weight", d, 1.0)]
        if shape.recurrent(i):
            plans += [
                _matrix(p + "attn_qkv.weight", shape.conv_channels, d, kind),
                _matrix(p + "attn_gate.weight", shape.inner, d, kind),
                TensorPlan(p + "ssm_conv1d.weight", (shape.conv_channels, shape.conv_kernel), F32, std=shape.conv_kernel**-0.5),
                _vector(p + "ssm_dt.bias", shape.v_heads, 0.0),
                TensorPlan(p + "ssm_a", (shape.v_heads,), F32, values=tuple(float(-a) for a in np.geomspace(lo, hi, shape.v_heads))),
                _matrix(p + "ssm_beta.weight", shape.v_heads, d, kind),
                _matrix(p + "ssm_alpha.weight", shape.v_heads, d, kind),
                _vector(p + "ssm_norm.weight", shape.head_state, 1.0),
                _matrix(p + "ssm_out.weight", d, shape.inner, kind),
            ]
        else:
            q = shape.heads * shape.head_dim
            kv = shape.heads_kv * shape.head_dim
            plans += [
                _matrix(p + "attn_q.weight", 2 * q, d, kind),  # per head: head_dim query rows, then head_dim gate rows
                _matrix(p + "attn_k.weight", kv, d, kind),
                _matrix(p + "attn_v.weight", kv, d, kind),
                _matrix(p + "attn_output.weight", d, q, kind),
                _vector(p + "attn_q_norm.weight", shape.head_dim, 1.0),
                _vector(p + "attn_k_norm.weight", shape.head_dim, 1.0),
            ]
        plans += _moe(p, shape, kind) if shape.experts else _ffn(p, d, shape.ff, kind)
    plans += [
        _vector("output_norm.weight", d, 1.0),
        _matrix("output.weight", vocab_size, d, output_kind, std=LOGIT_STD * d**-0.5, zero_rows=silent),
    ]
    return plans


def _ffn(p: str, d: int, ff: int, kind: str, infix: str = "") -> list[TensorPlan]:
    return [
        _matrix(f"{p}ffn_gate{infix}.weight", ff, d, kind),
        _matrix(f"{p}ffn_up{infix}.weight", ff, d, kind),
        _matrix(f"{p}ffn_down{infix}.weight", d, ff, kind),
    ]


def _moe(p: str, shape: Qwen35Shape, kind: str) -> list[TensorPlan]:
    d, e, f = shape.dim, shape.experts, shape.expert_ff
    return [
        TensorPlan(p + "ffn_gate_inp.weight", (e, d), F32, std=d**-0.5),  # the router: llama-quantize keeps it f32
        TensorPlan(p + "ffn_gate_exps.weight", (e, f, d), kind, std=d**-0.5),
        TensorPlan(p + "ffn_up_exps.weight", (e, f, d), kind, std=d**-0.5),
        TensorPlan(p + "ffn_down_exps.weight", (e, d, f), kind, std=f**-0.5),
        TensorPlan(p + "ffn_gate_inp_shexp.weight", (d,), F32, std=d**-0.5),
        *_ffn(p, d, shape.shared_ff, kind, "_shexp"),
    ]


def dflash_plan(drafter: DFlashShape, kind: str) -> list[TensorPlan]:
    """A DFlash drafter's tensors as the fork's loader names them (:mod:`ci.gates.tiny.dflash`'s order)."""
    d, q, kv = drafter.dim, drafter.heads * drafter.head_dim, drafter.heads_kv * drafter.head_dim
    plans = [
        _matrix("fc.weight", d, len(drafter.target_layers) * drafter.target_dim, kind),
        _vector("enc.output_norm.weight", d, 1.0),
        _vector("output_norm.weight", d, 1.0),
    ]
    for i in range(drafter.layers):
        p = f"blk.{i}."
        plans += [
            _vector(p + "attn_norm.weight", d, 1.0),
            _matrix(p + "attn_q.weight", q, d, kind),
            _matrix(p + "attn_k.weight", kv, d, kind),
            _matrix(p + "attn_v.weight", kv, d, kind),
            _matrix(p + "attn_output.weight", d, q, kind),
            _vector(p + "attn_q_norm.weight", drafter.head_dim, 1.0),
            _vector(p + "attn_k_norm.weight", drafter.head_dim, 1.0),
            _vector(p + "ffn_norm.weight", d, 1.0),
            *_ffn(p, d, drafter.ff, kind),
        ]
    return plans
