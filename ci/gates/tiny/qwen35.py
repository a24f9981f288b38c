"""Tiny GGUF models of the engine's own class: a ``qwen35`` target (gated delta net), its near drafter, a DFlash
drafter (:mod:`ci.gates.tiny.dflash`) and an MTP head; deterministic from a seed, beside the llama ones of
:mod:`ci.gates.tiny.models`, with the vocabulary of :mod:`ci.gates.tiny.writer`.

Names, shapes and keys follow the fork's ``gguf-py/gguf/constants.py`` and its loaders ``src/models/qwen35.cpp`` and
``src/models/dflash.cpp`` (ciru-ai/ROCmFPX c14872f); docs/equivalence.md ("How the models are built") lays out each.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ci.gates.tiny.writer import CONTROLS, UNK_ID, add_block_keys, add_vocab, gguf_model, perturbed, vocab

QWEN35 = "qwen35"
# embedding features of the target that the DFlash drafter keys on (the target's first two columns)
ANCHOR, MASK = 0, 1
MASK_VALUE = 0.1  # <unk>'s only feature: small beside a copied embedding, yet a query of full norm after q_norm
QK_GAIN = 4.0  # q_norm's weight: the anchor's score is QK_GAIN * sqrt(head_dim), the context's 0


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
class MtpSpec:
    """A tiny MTP head for a qwen35 target: the target's shape with one next-token block past its layers."""

    name: str
    seed: int
    target: Qwen35Spec


TARGET = Qwen35Spec(name="tiny-qwen35-target", seed=11, branch_scale=0.5)
PERTURB = 0.05
NEAR_DRAFTER = Qwen35Spec(name="tiny-qwen35-near-drafter", seed=12, perturb_of=TARGET, perturb=PERTURB)
MTP_HEAD = MtpSpec(name="tiny-qwen35-mtp", seed=14, target=TARGET)


def ones(n: int) -> np.ndarray:
    return np.ones(n, dtype=np.float32)


def zeros(*shape: int) -> np.ndarray:
    return np.zeros(shape, dtype=np.float32)


def qwen35_weights(spec: Qwen35Spec, n_vocab: int) -> list[tuple[str, np.ndarray]]:
    """The tensors of ``spec`` in gguf order; numpy shapes are (out, in), gguf stores them reversed (ggml's ne)."""
    if spec.perturb_of is not None:
        return perturbed(qwen35_weights(spec.perturb_of, n_vocab), spec.seed, spec.perturb)
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


def mtp_weights(spec: MtpSpec, n_vocab: int) -> list[tuple[str, np.ndarray]]:
    """An MTP head built, not trained: ``eh_proj`` passes the normalised embedding of the next token x(p+1) through and
    drops the target's hidden state, and the block's attention output and FFN down projection are zero, so the head
    drafts the token the target's output head favours for that embedding. The target's branches run at half strength
    (``TARGET.branch_scale``), so that is often the target's own next token (docs/equivalence.md). Token embedding
    and output head are the target's, copied into the head's file, where its graph reads them."""
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


def write_qwen35(path: Path, spec: Qwen35Spec) -> Path:
    """Write ``spec`` as a GGUF file at ``path`` (atomically): same spec, same bytes."""
    with gguf_model(path, QWEN35, spec.name, qwen35_weights(spec, len(vocab()))) as w:
        _qwen35_keys(w, spec, spec.layers)
        add_vocab(w)
    return path


def write_mtp(path: Path, spec: MtpSpec) -> Path:
    """Write ``spec`` as a GGUF MTP head at ``path`` (atomically): the target's keys, one block more, that block the
    next-token one."""
    with gguf_model(path, QWEN35, spec.name, mtp_weights(spec, len(vocab()))) as w:
        _qwen35_keys(w, spec.target, spec.target.layers + 1)
        w.add_uint32(f"{QWEN35}.nextn_predict_layers", 1)
        add_vocab(w)
    return path


def _qwen35_keys(w: Any, spec: Qwen35Spec, blocks: int) -> None:
    # IMROPE's sections (temporal, height, width, extra) in rotary pairs; text positions use them all alike
    pairs = spec.rope_dim // 2
    add_qwen35_keys(
        w,
        QWEN35,
        context=spec.context,
        dim=spec.dim,
        blocks=blocks,
        ff=spec.ff,
        heads=spec.heads,
        heads_kv=spec.heads_kv,
        head_dim=spec.head_dim,
        rope_dim=spec.rope_dim,
        rope_sections=(pairs - 2 * (pairs // 3), pairs // 3, pairs // 3, 0),
        full_attention_interval=spec.full_attention_interval,
        conv_kernel=spec.conv_kernel,
        state=spec.state,
        k_heads=spec.k_heads,
        v_heads=spec.v_heads,
    )


def add_qwen35_keys(
    w: Any,
    arch: str,
    *,
    context: int,
    dim: int,
    blocks: int,
    ff: int,
    heads: int,
    heads_kv: int,
    head_dim: int,
    rope_dim: int,
    rope_sections: tuple[int, int, int, int],
    full_attention_interval: int,
    conv_kernel: int,
    state: int,
    k_heads: int,
    v_heads: int,
    rope_base: float = 10000000.0,
) -> None:
    """The keys of a qwen35-class model (``arch``: qwen35 or qwen35moe) past the blocks' own, in the order the tiny
    models have always written them; the real-shaped models (:mod:`ci.gates.shapes`) write theirs here too."""
    a = arch
    add_block_keys(w, a, context=context, dim=dim, blocks=blocks, ff=ff, heads=heads, heads_kv=heads_kv, head_dim=head_dim, rope_dim=rope_dim)
    w.add_array(f"{a}.rope.dimension_sections", list(rope_sections))
    w.add_float32(f"{a}.rope.freq_base", rope_base)
    w.add_uint32(f"{a}.full_attention_interval", full_attention_interval)
    w.add_uint32(f"{a}.ssm.conv_kernel", conv_kernel)
    w.add_uint32(f"{a}.ssm.state_size", state)
    w.add_uint32(f"{a}.ssm.group_count", k_heads)
    w.add_uint32(f"{a}.ssm.time_step_rank", v_heads)
    w.add_uint32(f"{a}.ssm.inner_size", state * v_heads)
