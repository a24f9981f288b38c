"""Tiny GGUF models of the engine's own class: a ``qwen35`` target (gated delta net), its near drafter, a DFlash
drafter and an MTP head; deterministic from a seed, beside the llama ones of :mod:`ci.gates.tinymodels` and with their
vocabulary.

Names, shapes and keys follow the fork's ``gguf-py/gguf/constants.py`` (MODEL_ARCH.QWEN35, MODEL_ARCH.DFLASH) and its
loaders ``src/models/qwen35.cpp`` and ``src/models/dflash.cpp`` (ciru-ai/ROCmFPX c14872f):

- qwen35: every ``full_attention_interval``-th layer is full attention (a joint query+gate projection, q/k norms,
  IMROPE with ``rope.dimension_sections``), the others gated delta net (``attn_qkv`` into a causal conv, ``attn_gate``,
  ``ssm_a``, ``ssm_dt.bias``, ``ssm_alpha``, ``ssm_beta``, ``ssm_norm``, ``ssm_out``); each layer has a post-attention
  norm and a SwiGLU FFN, as Qwen3.5 mixes them (three delta-net layers to one attention layer).
- dflash: ``fc`` fuses the target's hidden states at ``dflash.target_layers`` (their layer inputs), ``enc.output_norm``
  normalises the fused context, then decoder layers with q/k norms; no token embedding and no output head of its own
  (it borrows the target's). ``dflash.block_size`` sets the block: the launcher drafts ``block_size - 1`` tokens.
  The mask token is ``<unk>``.
- MTP head: a qwen35 file with ``nextn_predict_layers`` = 1 and only its next-token block (``blk.{layers}``: a
  full-attention block plus ``nextn.eh_proj``, ``nextn.enorm``, ``nextn.hnorm``), no trunk layers, and the target's
  token embedding and output head; the fork loads it "MTP only" (``src/models/qwen35.cpp``, ``mtp_only``) and drafts
  with it through ``--spec-type draft-mtp -md HEAD`` (the launcher's ``--mtp``).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ci.gates import tinymodels
from ci.gates.tinymodels import BOS_ID, CONTROLS, EOS_ID, UNK_ID, vocab

QWEN35 = "qwen35"
# embedding features of the target that the DFlash drafter keys on (the target's first two columns)
ANCHOR, MASK = 0, 1
MASK_VALUE = 0.1  # <unk>'s only feature: small beside a copied embedding, yet a query of full norm after q_norm
QK_GAIN = 4.0  # q_norm's weight: the anchor's score is QK_GAIN * sqrt(head_dim), the context's 0
DFLASH = "dflash"


@dataclass(frozen=True)
class Qwen35Spec:
    """One tiny qwen35 model; ``seed`` fixes every weight."""

    name: str
    seed: int
    layers: int = 4
    dim: int = 128
    ff: int = 192
    heads: int = 4  # attention heads, each ``head_dim`` wide
    heads_kv: int = 2
    head_dim: int = 32
    rope_dim: int = 16  # partial rotary, as Qwen3.5 (a quarter of the head)
    full_attention_interval: int = 4
    conv_kernel: int = 4
    state: int = 16  # ssm.state_size: each delta-net head's key and value width
    k_heads: int = 2  # ssm.group_count
    v_heads: int = 4  # ssm.time_step_rank
    context: int = 2048
    logit_std: float = 3.0  # as the llama tiny models: top-2 margins mostly well above the near-tie threshold
    # decay per token is exp(-softplus(.) * A): A in this range keeps the delta-net state for tens of tokens, so a
    # wrong snapshot changes what the model says (with Qwen's A up to 16 the state forgets within a few tokens)
    decay: tuple[float, float] = (0.05, 0.5)
    # the residual branches (attention, delta net, FFN outputs) at this fraction of full strength: the greedy next
    # token then leans on the current token's embedding, which a DFlash drafter can read (see DFlashSpec)
    branch_scale: float = 1.0
    perturb_of: Qwen35Spec | None = None
    perturb: float = 0.0

    @property
    def inner(self) -> int:
        return self.state * self.v_heads

    @property
    def conv_channels(self) -> int:
        return 2 * self.state * self.k_heads + self.inner

    def recurrent(self, layer: int) -> bool:
        return (layer + 1) % self.full_attention_interval != 0


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


@dataclass(frozen=True)
class MtpSpec:
    """A tiny MTP head for a qwen35 target: the target's shape with one next-token block past its layers."""

    name: str
    seed: int
    target: Qwen35Spec


TARGET = Qwen35Spec(name="tiny-qwen35-target", seed=11, branch_scale=0.5)
PERTURB = 0.05
NEAR_DRAFTER = Qwen35Spec(name="tiny-qwen35-near-drafter", seed=12, perturb_of=TARGET, perturb=PERTURB)
# target_layers (0, last): layer 0's input is the token embedding, which the canary heads recognise BOS by
DFLASH_DRAFTER = DFlashSpec(name="tiny-qwen35-dflash", seed=13, target=TARGET, target_layers=(0, 3), heads=8, canary=True)
MTP_HEAD = MtpSpec(name="tiny-qwen35-mtp", seed=14, target=TARGET)
# the canary heads (dflash_canary_weights)
CANARY_SCALE = 10.0  # m: how hard a row 0 that is not BOS's pushes the drafts off the anchor copy
CANARY_GAIN = 8.0  # q_norm on the BOS heads' two dims: BOS's score 8 * sqrt(32) = 45
CANARY_CONST = 3.0  # c: g's constant feature beside e . u
CANARY_PENALTY = 20.0  # pushes the anchor token's own key off BOS's
C1, C2 = 2, 3  # g's two dims given to the BOS key (taken from the copied hidden state)


def ones(n: int) -> np.ndarray:
    return np.ones(n, dtype=np.float32)


def zeros(*shape: int) -> np.ndarray:
    return np.zeros(shape, dtype=np.float32)


def qwen35_weights(spec: Qwen35Spec, n_vocab: int) -> list[tuple[str, np.ndarray]]:
    """The tensors of ``spec`` in gguf order; numpy shapes are (out, in), gguf stores them reversed (ggml's ne)."""
    if spec.perturb_of is not None:
        return tinymodels.perturbed(qwen35_weights(spec.perturb_of, n_vocab), spec.seed, spec.perturb)
    rng = np.random.default_rng(spec.seed)

    def normal(shape: Sequence[int], std: float) -> np.ndarray:
        return rng.normal(0.0, std, size=tuple(shape)).astype(np.float32)

    d = spec.dim
    embd = normal((n_vocab, d), 1.0)
    # two features the DFlash drafter keys on: every token but <unk> carries ANCHOR = 1, only <unk> (the drafter's
    # mask token, never in the target's input) carries MASK
    embd[:, ANCHOR], embd[:, MASK] = 1.0, 0.0
    embd[UNK_ID] = 0.0
    embd[UNK_ID, MASK] = MASK_VALUE
    tensors: list[tuple[str, np.ndarray]] = [("token_embd.weight", embd)]
    b = spec.branch_scale
    for i in range(spec.layers):
        p = f"blk.{i}."
        tensors += [(p + "attn_norm.weight", ones(d)), (p + "post_attention_norm.weight", ones(d))]
        if spec.recurrent(i):
            inner = spec.inner
            lo, hi = spec.decay
            tensors += [
                (p + "attn_qkv.weight", normal((spec.conv_channels, d), d**-0.5)),
                (p + "attn_gate.weight", normal((inner, d), d**-0.5)),
                (p + "ssm_conv1d.weight", normal((spec.conv_channels, spec.conv_kernel), spec.conv_kernel**-0.5)),
                (p + "ssm_dt.bias", np.zeros(spec.v_heads, dtype=np.float32)),
                # ssm_a holds -A (the converter's -exp(A_log))
                (p + "ssm_a", -np.geomspace(lo, hi, spec.v_heads).astype(np.float32)),
                (p + "ssm_beta.weight", normal((spec.v_heads, d), d**-0.5)),
                (p + "ssm_alpha.weight", normal((spec.v_heads, d), d**-0.5)),
                (p + "ssm_norm.weight", ones(spec.state)),
                (p + "ssm_out.weight", normal((d, inner), b * inner**-0.5)),
            ]
        else:
            tensors += _attention(p, spec, normal, b)
        tensors += _ffn(p, spec, normal, b)
    output = normal((n_vocab, d), spec.logit_std * d**-0.5)
    output[: len(CONTROLS)] = 0.0  # as the llama tiny models: a control token is never the argmax nor the runner-up
    tensors += [("output_norm.weight", ones(d)), ("output.weight", output)]
    return tensors


Normal = Callable[[Sequence[int], float], np.ndarray]


def _attention(p: str, spec: Qwen35Spec, normal: Normal, branch: float) -> list[tuple[str, np.ndarray]]:
    """A full-attention layer's own tensors, its output projection at ``branch`` of full strength (0: all zero)."""
    d, hd = spec.dim, spec.head_dim
    return [
        # the query projection carries the output gate too: per head, hd query then hd gate rows
        (p + "attn_q.weight", normal((2 * spec.heads * hd, d), d**-0.5)),
        (p + "attn_k.weight", normal((spec.heads_kv * hd, d), d**-0.5)),
        (p + "attn_v.weight", normal((spec.heads_kv * hd, d), d**-0.5)),
        (p + "attn_output.weight", normal((d, spec.heads * hd), branch * (spec.heads * hd) ** -0.5)),
        (p + "attn_q_norm.weight", ones(hd)),
        (p + "attn_k_norm.weight", ones(hd)),
    ]


def _ffn(p: str, spec: Qwen35Spec, normal: Normal, branch: float) -> list[tuple[str, np.ndarray]]:
    """A layer's SwiGLU FFN, its down projection at ``branch`` of full strength (0: all zero)."""
    d, ff = spec.dim, spec.ff
    return [
        (p + "ffn_gate.weight", normal((ff, d), d**-0.5)),
        (p + "ffn_up.weight", normal((ff, d), d**-0.5)),
        (p + "ffn_down.weight", normal((d, ff), branch * ff**-0.5)),
    ]


def dflash_weights(spec: DFlashSpec) -> list[tuple[str, np.ndarray]]:
    """An anchor-copy drafter, built rather than trained: every mask position of a block attends to the block's anchor
    token (the last accepted one) and copies its normalised embedding, so each draft is the target's output head read
    at the anchor's embedding, the target's next token when its residual branches stay small (a bigram guess).

    The query reads the MASK feature, the key the ANCHOR feature, both in the head's lowest-frequency rotary pair (so
    RoPE barely turns them over a block); the fused context's keys are zero (``fc`` writes nothing to ANCHOR), so the
    anchor outscores the context by ``QK_GAIN``. Value and output projections are the identity, the FFN is zero.
    A ``canary`` spec gets :func:`dflash_canary_weights` instead."""
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
    vector) when it does not, which moves the drafts. So the drafts, and the acceptance, change when the layer inputs
    the drafter reads are stale or misplaced (the fork at c14872f writes each micro-batch's at offset 0), and stay as
    the anchor copy's when they are right.

    - ``target_layers = (0, last)``: the target's layer-0 input is its token embedding e, so fc writes
      g[C1] = e . u (u = BOS's unit embedding: |e_BOS| = 11.3 at BOS, N(0, 1) elsewhere) and g[C2] = c * e[ANCHOR]
      = c (every token's embedding has ANCHOR = 1); the rest of g is the last layer's input, with nothing at ANCHOR
      (the copy heads' key) or MASK.
    - BOS heads: key (g[C1], g[C2]) in two slow rotary dims; query = a mask position's MASK feature times BOS's key
      direction, so BOS's row scores gain * sqrt(hd) = 45 and other rows 12-39; the anchor token's key gets
      -penalty on a third slow dim (x[ANCHOR]; g has 0 there); the mask tokens' keys are 0.
    - BOS heads' value is rank 1: m * (g[C2] - (c / |e_BOS|) g[C1]) * w, zero at BOS's row, about m * c * w at any
      other, through an identity output projection.

    Measured on the CPU (docs/equivalence.md): upstream 11434 drafts the same with 16-token micro-batches and with
    one; the fork at c14872f drafts differently on the two prompts whose prefill spans micro-batches."""
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
    fc[:, (n_in - 1) * d :] = np.eye(d, dtype=np.float32)
    fc[[ANCHOR, MASK, C1, C2]] = 0.0
    fc[C1, :d] = u
    fc[C2, ANCHOR] = c
    d1, d2, d3 = hd // 2 - 2, hd - 2, hd // 2 - 3  # slow dims beside the copy heads' pair: < 0.01 rad over 2048 positions at base 1e7
    a = np.array([s_bos, c]) / np.hypot(s_bos, c)
    wq, wk = _anchor_copy_heads(half, hd, d, total=h)
    for head in range(half, h):
        wq[head * hd + d1, MASK] = a[0]
        wq[head * hd + d2, MASK] = a[1]
        wk[head * hd + d1, C1] = 1.0
        wk[head * hd + d2, C2] = 1.0
        wk[head * hd + d3, ANCHOR] = -CANARY_PENALTY
    w = np.random.default_rng(99).normal(size=d)
    w /= np.linalg.norm(w)
    probe = np.zeros(d)
    probe[C2], probe[C1] = 1.0, -c / s_bos
    wv = np.concatenate([np.eye(d), m * np.outer(w, probe)]).astype(np.float32)
    wo = np.concatenate([np.eye(d), np.eye(d)], axis=1).astype(np.float32)
    q_norm = np.full(hd, QK_GAIN, dtype=np.float32)
    q_norm[[d1, d2]] = CANARY_GAIN
    return _dflash_tensors(spec, fc, [(wq, wk, wv, wo, q_norm)])


def mtp_weights(spec: MtpSpec, n_vocab: int) -> list[tuple[str, np.ndarray]]:
    """An MTP head built, not trained: ``eh_proj`` passes the normalised embedding of the next token x(p+1) through and
    drops the target's hidden state, and the block's attention output and FFN down projection are zero, so the block
    is the identity on that embedding and the head drafts the token the target's output head favours for it. The
    target's branches run at half strength (``TARGET.branch_scale``), so that is often the target's own next token:
    on the CPU 18-24% of its drafts are accepted (docs/equivalence.md). Token embedding and output head are the
    target's, which the head's graph reads from its own file."""
    t, d = spec.target, spec.target.dim
    rng = np.random.default_rng(spec.seed)

    def normal(shape: Sequence[int], std: float) -> np.ndarray:
        return rng.normal(0.0, std, size=tuple(shape)).astype(np.float32)

    target = dict(qwen35_weights(t, n_vocab))
    eh_proj = zeros(d, 2 * d)
    eh_proj[:, :d] = np.eye(d, dtype=np.float32)  # the concat is [enorm(embedding of x(p+1)), hnorm(h(p))]
    p = f"blk.{t.layers}."
    return [
        ("token_embd.weight", target["token_embd.weight"]),
        (p + "attn_norm.weight", ones(d)),
        (p + "post_attention_norm.weight", ones(d)),
        *_attention(p, t, normal, 0.0),  # attention and FFN add nothing: the block passes eh_proj's output through
        *_ffn(p, t, normal, 0.0),
        (p + "nextn.eh_proj.weight", eh_proj),
        (p + "nextn.enorm.weight", ones(d)),
        (p + "nextn.hnorm.weight", ones(d)),
        ("output_norm.weight", target["output_norm.weight"]),
        ("output.weight", target["output.weight"]),
    ]


def _writer(tmp: Path, architecture: str, name: str) -> Any:
    import gguf

    logging.getLogger("gguf").setLevel(logging.WARNING)  # gguf logs every file it writes at INFO
    writer = gguf.GGUFWriter(str(tmp), architecture)
    writer.add_name(name)
    writer.add_file_type(gguf.LlamaFileType.ALL_F32)
    return writer


def _add_vocab(writer: Any) -> None:
    v = vocab()
    w = writer
    w.add_vocab_size(len(v))
    w.add_tokenizer_model("llama")
    w.add_token_list(list(v.tokens))
    w.add_token_scores(list(v.scores))
    w.add_token_types(list(v.types))
    w.add_bos_token_id(BOS_ID)
    w.add_eos_token_id(EOS_ID)
    w.add_unk_token_id(UNK_ID)
    w.add_add_bos_token(True)
    w.add_add_eos_token(False)


def _finish(writer: Any, tensors: Sequence[tuple[str, np.ndarray]], tmp: Path, path: Path) -> Path:
    w = writer
    for name, array in tensors:
        w.add_tensor(name, array)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    tmp.replace(path)
    return path


def write_qwen35(path: Path, spec: Qwen35Spec) -> Path:
    """Write ``spec`` as a GGUF file at ``path`` (atomically): same spec, same bytes."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    w = _writer(tmp, QWEN35, spec.name)
    _qwen35_keys(w, spec, spec.layers)
    _add_vocab(w)
    return _finish(w, qwen35_weights(spec, len(vocab())), tmp, path)


def write_mtp(path: Path, spec: MtpSpec) -> Path:
    """Write ``spec`` as a GGUF MTP head at ``path`` (atomically): the target's keys, one block more, that block the
    next-token one."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    w = _writer(tmp, QWEN35, spec.name)
    _qwen35_keys(w, spec.target, spec.target.layers + 1)
    w.add_uint32(f"{QWEN35}.nextn_predict_layers", 1)
    _add_vocab(w)
    return _finish(w, mtp_weights(spec, len(vocab())), tmp, path)


def _qwen35_keys(w: Any, spec: Qwen35Spec, blocks: int) -> None:
    a = QWEN35
    w.add_uint32(f"{a}.context_length", spec.context)
    w.add_uint32(f"{a}.embedding_length", spec.dim)
    w.add_uint32(f"{a}.block_count", blocks)
    w.add_uint32(f"{a}.feed_forward_length", spec.ff)
    w.add_uint32(f"{a}.attention.head_count", spec.heads)
    w.add_uint32(f"{a}.attention.head_count_kv", spec.heads_kv)
    w.add_uint32(f"{a}.attention.key_length", spec.head_dim)
    w.add_uint32(f"{a}.attention.value_length", spec.head_dim)
    w.add_float32(f"{a}.attention.layer_norm_rms_epsilon", 1e-6)
    w.add_uint32(f"{a}.rope.dimension_count", spec.rope_dim)
    # IMROPE's sections (temporal, height, width, extra) in rotary pairs; text positions use them all alike
    pairs = spec.rope_dim // 2
    w.add_array(f"{a}.rope.dimension_sections", [pairs - 2 * (pairs // 3), pairs // 3, pairs // 3, 0])
    w.add_float32(f"{a}.rope.freq_base", 10000000.0)
    w.add_uint32(f"{a}.full_attention_interval", spec.full_attention_interval)
    w.add_uint32(f"{a}.ssm.conv_kernel", spec.conv_kernel)
    w.add_uint32(f"{a}.ssm.state_size", spec.state)
    w.add_uint32(f"{a}.ssm.group_count", spec.k_heads)
    w.add_uint32(f"{a}.ssm.time_step_rank", spec.v_heads)
    w.add_uint32(f"{a}.ssm.inner_size", spec.inner)


def write_dflash(path: Path, spec: DFlashSpec) -> Path:
    """Write ``spec`` as a GGUF DFlash drafter at ``path`` (atomically)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    w = _writer(tmp, DFLASH, spec.name)
    a = DFLASH
    w.add_uint32(f"{a}.context_length", spec.target.context)
    w.add_uint32(f"{a}.embedding_length", spec.dim)
    w.add_uint32(f"{a}.block_count", spec.layers)
    w.add_uint32(f"{a}.feed_forward_length", spec.ff)
    w.add_uint32(f"{a}.attention.head_count", spec.heads)
    w.add_uint32(f"{a}.attention.head_count_kv", spec.heads)
    w.add_uint32(f"{a}.attention.key_length", spec.head_dim)
    w.add_uint32(f"{a}.attention.value_length", spec.head_dim)
    w.add_float32(f"{a}.attention.layer_norm_rms_epsilon", 1e-6)
    w.add_uint32(f"{a}.rope.dimension_count", spec.head_dim)
    w.add_float32(f"{a}.rope.freq_base", 10000000.0)
    w.add_array(f"{a}.target_layers", list(spec.target_layers))
    w.add_uint32(f"{a}.target_hidden_size", spec.target.dim)
    w.add_uint32(f"{a}.block_size", spec.block_size)
    w.add_uint32(f"{a}.mask_token_id", UNK_ID)
    w.add_uint32("tokenizer.ggml.mask_token_id", UNK_ID)
    # upstream llama.cpp may take the first draft from the anchor position; the fork at c14872f takes every draft from
    # the mask positions: this key makes upstream draft as the fork does (the fork does not read it)
    w.add_bool(f"{a}.sample_from_anchor", False)
    _add_vocab(w)
    return _finish(w, dflash_weights(spec), tmp, path)


@dataclass(frozen=True)
class Qwen35Models:
    target: Path
    near_drafter: Path  # the target perturbed (draft-simple): whole-state checkpoints roll it back
    dflash: Path  # the DFlash drafter (draft-dflash): whole-state checkpoints roll it back at c14872f
    mtp: Path  # the MTP head (draft-mtp): the one kind the fork rolls back through per-token snapshots

    def describe(self) -> str:
        files = (self.target, self.near_drafter, self.dflash, self.mtp)
        return "\n".join(tinymodels.describe_file(p) for p in files)


def write_qwen35_models(directory: Path) -> Qwen35Models:
    """The engine-class tiny models in ``directory``: the qwen35 target, its near drafter, its DFlash drafter and its
    MTP head."""
    return Qwen35Models(
        target=write_qwen35(directory / f"{TARGET.name}.gguf", TARGET),
        near_drafter=write_qwen35(directory / f"{NEAR_DRAFTER.name}.gguf", NEAR_DRAFTER),
        dflash=write_dflash(directory / f"{DFLASH_DRAFTER.name}.gguf", DFLASH_DRAFTER),
        mtp=write_mtp(directory / f"{MTP_HEAD.name}.gguf", MTP_HEAD),
    )


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m ci.gates.tiny_qwen35 DIR``: write the four models into DIR and describe them."""
    import sys

    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) != 1 or args[0].startswith("-"):
        print("usage: python -m ci.gates.tiny_qwen35 DIR (writes the four tiny qwen35 models there)", file=sys.stderr)
        return 2
    print(write_qwen35_models(Path(args[0])).describe())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
