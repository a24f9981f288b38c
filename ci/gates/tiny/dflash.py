"""A tiny DFlash drafter for the tiny qwen35 target (:mod:`ci.gates.tiny.qwen35`): ``fc`` fuses the target's hidden
states at ``dflash.target_layers``, ``enc.output_norm`` normalises the fused context, then decoder layers with q/k
norms; no token embedding and no output head of its own (it borrows the target's). Its canary heads read the fused
context's first row, so a drafter fed stale rows drafts off the anchor copy (``docs/equivalence.md``)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ci.gates.tiny.qwen35 import ANCHOR, MASK, QK_GAIN, TARGET, Qwen35Spec, ones, qwen35_weights, zeros
from ci.gates.tiny.writer import BOS_ID, UNK_ID, add_block_keys, add_vocab, gguf_model, vocab

DFLASH = "dflash"


@dataclass(frozen=True)
class DFlashSpec:
    """A tiny DFlash drafter for a qwen35 target: its width is the target's (the encoder's fc reads
    ``len(target_layers)`` of the target's hidden states)."""

    name: str
    seed: int
    target: Qwen35Spec
    target_layers: tuple[int, ...] = (1, 3)
    block_size: int = 3
    layers: int = 1
    heads: int = 4
    head_dim: int = 32
    ff: int = 192
    canary: bool = False  # half the heads read the fused context's first row (:func:`dflash_canary_weights`)

    @property
    def dim(self) -> int:
        return self.target.dim


# target_layers (0, last): layer 0's input is the token embedding, which the canary heads recognise BOS by
DFLASH_DRAFTER = DFlashSpec(name="tiny-qwen35-dflash", seed=13, target=TARGET, target_layers=(0, 3), heads=8, canary=True)
# the canary heads (dflash_canary_weights)
CANARY_SCALE = 10.0  # m: how hard a row 0 that is not BOS's pushes the drafts off the anchor copy
CANARY_GAIN = 8.0  # q_norm on the BOS heads' two dims: BOS's score 8 * sqrt(32) = 45
CANARY_CONST = 3.0  # c: g's constant feature beside e . u
CANARY_PENALTY = 20.0  # pushes the anchor token's own key off BOS's
C1, C2 = 2, 3  # g's two dims given to the BOS key (taken from the copied hidden state)


def dflash_weights(spec: DFlashSpec) -> list[tuple[str, np.ndarray]]:
    """An anchor-copy drafter, built rather than trained: every mask position of a block attends to the block's anchor
    token (the last accepted one) and copies its normalised embedding, so each draft is the target's output head read
    at the anchor's embedding (a bigram guess). The query reads the MASK feature, the key the ANCHOR feature, in the
    head's slowest rotary pair (RoPE barely turns them over a block); ``fc`` writes nothing to ANCHOR, so the anchor
    outscores the context by ``QK_GAIN``. A ``canary`` spec gets :func:`dflash_canary_weights` instead."""
    if spec.canary:
        return dflash_canary_weights(spec)
    d, hd, h = spec.dim, spec.head_dim, spec.heads
    inp = len(spec.target_layers) * d
    fc = np.random.default_rng(spec.seed).normal(0.0, inp**-0.5, size=(d, inp)).astype(np.float32)
    fc[ANCHOR] = 0.0
    wq, wk = _anchor_copy_heads(h, hd, d)
    eye = np.eye(d, dtype=np.float32)
    q_norm = np.full(hd, QK_GAIN, dtype=np.float32)
    return _dflash_tensors(spec, fc, [(wq, wk, eye.copy(), eye.copy() if i == 0 else zeros(d, d), q_norm) for i in range(spec.layers)])


def _anchor_copy_heads(heads: int, hd: int, d: int, total: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Query and key projections (``total`` heads, default ``heads``) whose first ``heads`` heads read MASK and
    ANCHOR in their slowest NEOX rotary pair (j, j + hd/2), j = hd/2 - 1; the other heads' rows stay zero."""
    n = total if total is not None else heads
    wq = np.zeros((n * hd, d), dtype=np.float32)
    wk = np.zeros((n * hd, d), dtype=np.float32)
    low = hd // 2 - 1
    for head in range(heads):
        wq[head * hd + low, MASK] = 1.0
        wk[head * hd + low, ANCHOR] = 1.0
    return wq, wk


def _dflash_tensors(
    spec: DFlashSpec, fc: np.ndarray, layers: Sequence[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]]
) -> list[tuple[str, np.ndarray]]:
    """The drafter's tensors as the fork's loader names them: the encoder's, then per layer (wq, wk, wv, wo, q_norm)
    with unit norms and a zero FFN."""
    d, ff, hd = spec.dim, spec.ff, spec.head_dim
    tensors: list[tuple[str, np.ndarray]] = [("fc.weight", fc), ("enc.output_norm.weight", ones(d)), ("output_norm.weight", ones(d))]
    for i, (wq, wk, wv, wo, q_norm) in enumerate(layers):
        p = f"blk.{i}."
        tensors += [
            (p + "attn_norm.weight", ones(d)),
            (p + "attn_q.weight", wq),
            (p + "attn_k.weight", wk),
            (p + "attn_v.weight", wv),
            (p + "attn_output.weight", wo),
            (p + "attn_q_norm.weight", q_norm),
            (p + "attn_k_norm.weight", ones(hd)),
            (p + "ffn_norm.weight", ones(d)),
            (p + "ffn_gate.weight", zeros(ff, d)),
            (p + "ffn_up.weight", zeros(ff, d)),
            (p + "ffn_down.weight", zeros(d, ff)),
        ]
    return tensors


def dflash_canary_weights(spec: DFlashSpec) -> list[tuple[str, np.ndarray]]:
    """The anchor copy of :func:`dflash_weights` on heads [0, h/2), plus heads [h/2, h) that find the fused context's
    BOS row: they add nothing when row 0 really holds BOS's layer inputs, and ``m * c * w`` (``w`` a fixed random unit
    vector) when it does not. So the drafts, and the acceptance, move when the layer inputs the drafter reads are
    stale or misplaced (the fork at c14872f writes each micro-batch's at offset 0), and stay as the anchor copy's
    when they are right; docs/equivalence.md has both, measured."""
    d, hd, h = spec.dim, spec.head_dim, spec.heads
    half = h // 2
    if half * hd != d or spec.target_layers[0] != 0 or spec.layers != 1:
        raise ValueError(f"{spec.name}: a canary drafter has one layer, heads / 2 * head_dim == dim and target_layers[0] == 0")
    embd = dict(qwen35_weights(spec.target, len(vocab())))["token_embd.weight"]
    s_bos = float(np.linalg.norm(embd[BOS_ID]))
    u = embd[BOS_ID] / s_bos
    c, m = CANARY_CONST, CANARY_SCALE
    n_in = len(spec.target_layers)
    fc = np.zeros((d, n_in * d), dtype=np.float32)
    # layer 0's input is the token embedding e: g[C1] = e . u (|e_BOS| = 11.3 at BOS, N(0, 1) elsewhere) and
    # g[C2] = c * e[ANCHOR] = c; the rest of g is the last layer's input, with nothing at ANCHOR or MASK
    fc[:, (n_in - 1) * d :] = np.eye(d, dtype=np.float32)
    fc[[ANCHOR, MASK, C1, C2]] = 0.0
    fc[C1, :d] = u
    fc[C2, ANCHOR] = c
    d1, d2, d3 = hd // 2 - 2, hd - 2, hd // 2 - 3  # slow dims beside the copy heads' pair: < 0.01 rad over 2048 positions at base 1e7
    a = np.array([s_bos, c]) / np.hypot(s_bos, c)
    wq, wk = _anchor_copy_heads(half, hd, d, total=h)
    # the BOS heads: BOS's row scores CANARY_GAIN * sqrt(hd) = 45, other rows 12-39; the anchor token's key gets
    # -CANARY_PENALTY on a third slow dim (x[ANCHOR]; g has 0 there), and the mask tokens' keys are 0
    for head in range(half, h):
        wq[head * hd + d1, MASK] = a[0]
        wq[head * hd + d2, MASK] = a[1]
        wk[head * hd + d1, C1] = 1.0
        wk[head * hd + d2, C2] = 1.0
        wk[head * hd + d3, ANCHOR] = -CANARY_PENALTY
    w = np.random.default_rng(99).normal(size=d)
    w /= np.linalg.norm(w)
    # a rank-1 value, m * (g[C2] - (c / |e_BOS|) g[C1]) * w: zero at BOS's row, about m * c * w at any other
    probe = np.zeros(d)
    probe[C2], probe[C1] = 1.0, -c / s_bos
    wv = np.concatenate([np.eye(d), m * np.outer(w, probe)]).astype(np.float32)
    wo = np.concatenate([np.eye(d), np.eye(d)], axis=1).astype(np.float32)
    q_norm = np.full(hd, QK_GAIN, dtype=np.float32)
    q_norm[[d1, d2]] = CANARY_GAIN
    return _dflash_tensors(spec, fc, [(wq, wk, wv, wo, q_norm)])


def write_dflash(path: Path, spec: DFlashSpec) -> Path:
    """Write ``spec`` as a GGUF DFlash drafter at ``path`` (atomically)."""
    with gguf_model(path, DFLASH, spec.name, dflash_weights(spec)) as w:
        _dflash_keys(w, spec)
    return path


def _dflash_keys(w: Any, spec: DFlashSpec) -> None:
    s = spec
    add_dflash_keys(
        w,
        context=s.target.context,
        dim=s.dim,
        layers=s.layers,
        ff=s.ff,
        heads=s.heads,
        heads_kv=s.heads,
        head_dim=s.head_dim,
        target_layers=s.target_layers,
        target_dim=s.target.dim,
        block_size=s.block_size,
        mask_token_id=UNK_ID,
    )
    add_vocab(w)


def add_dflash_keys(
    w: Any,
    *,
    context: int,
    dim: int,
    layers: int,
    ff: int,
    heads: int,
    heads_kv: int,
    head_dim: int,
    target_layers: tuple[int, ...],
    target_dim: int,
    block_size: int,
    mask_token_id: int,
    rope_base: float = 10000000.0,
) -> None:
    """A DFlash drafter's keys (full rotary on each head), the vocabulary's left to the caller; the real-shaped
    drafter (:mod:`ci.gates.shapes`) writes its here too."""
    a = DFLASH
    add_block_keys(w, a, context=context, dim=dim, blocks=layers, ff=ff, heads=heads, heads_kv=heads_kv, head_dim=head_dim, rope_dim=head_dim)
    w.add_float32(f"{a}.rope.freq_base", rope_base)
    w.add_array(f"{a}.target_layers", list(target_layers))
    w.add_uint32(f"{a}.target_hidden_size", target_dim)
    w.add_uint32(f"{a}.block_size", block_size)
    w.add_uint32(f"{a}.mask_token_id", mask_token_id)
    w.add_uint32("tokenizer.ggml.mask_token_id", mask_token_id)
    # upstream llama.cpp may take the first draft from the anchor position; the fork at c14872f takes every draft from
    # the mask positions: this key makes upstream draft as the fork does (the fork does not read it)
    w.add_bool(f"{a}.sample_from_anchor", False)
