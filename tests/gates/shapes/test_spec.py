"""The real-shaped sets' figures against the public configs they cite, and what the reduced set keeps."""

from __future__ import annotations

import dataclasses

import pytest

from ci.gates.shapes import spec
from ci.gates.shapes.spec import REAL, REDUCED

# aws-samples/sample-qwen3.5-qwen3.6-dense-trainium, src/qwen3_6/config.py at e3d86bfe48ba6ffb934cbe3f054ab2a98bae176f
# (its defaults "match Qwen3.5-27B"), transcribed: the HF config's names
QWEN35_27B = {
    "vocab_size": 248320,
    "hidden_size": 5120,
    "num_hidden_layers": 64,
    "intermediate_size": 17408,
    "num_attention_heads": 24,
    "num_key_value_heads": 4,
    "head_dim": 256,
    "rope_theta": 10000000.0,
    "partial_rotary_factor": 0.25,
    "linear_num_value_heads": 48,
    "linear_num_key_heads": 16,
    "linear_key_head_dim": 128,
    "linear_value_head_dim": 128,
    "linear_conv_kernel_dim": 4,
    "full_attention_interval": 4,
}
# ggml-org/llama.cpp, tests/snapshots/qwen3.5-27b.schema at b6f49577e05ea81bc7e59a1101e98acbaccc5fcd (the published
# GGUF's header): "n_embd=5120, n_ff=17408, n_vocab=248320, n_layer=64, n_head=24, n_head_kv=4", attn_v at blk.3, 7, ...
LLAMA_CPP_SNAPSHOT = {"n_embd": 5120, "n_ff": 17408, "n_vocab": 248320, "n_layer": 64, "n_head": 24, "n_head_kv": 4}
# cpehle/tyr, Tyr/Model/Qwen35/Config.lean at 1651c71b98606825d78ae8bf51c5f207653b9427, qwen35_35B_A3B
QWEN35_35B_A3B = {
    "vocab_size": 248320,
    "hidden_size": 2048,
    "num_hidden_layers": 40,
    "num_attention_heads": 16,
    "num_key_value_heads": 2,
    "head_dim": 256,
    "linear_conv_kernel_dim": 4,
    "linear_key_head_dim": 128,
    "linear_value_head_dim": 128,
    "linear_num_key_heads": 16,
    "linear_num_value_heads": 32,
    "full_attention_interval": 4,
    "moe_intermediate_size": 512,
    "shared_expert_intermediate_size": 512,
    "num_experts_per_tok": 8,
    "num_experts": 256,
}
# z-lab/Qwen3.8-27B-DFlash2's config.json (the engine's drafter); its size and block from madeye/qwen3.8-dflash2-gb10
# README.md and serve.sh at 15c3bc2433ff19e37d7f58b8e4e0e705bf7087ba: 3.85 GB in bf16, 7 drafted tokens a step
DFLASH2 = {
    "num_hidden_layers": 5,
    "hidden_size": 5120,
    "intermediate_size": 17408,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "head_dim": 128,
    "block_size": 8,
    "target_layer_ids": [5, 19, 33, 47, 61],
    "rope_theta": 10000000.0,
}
DFLASH2_BF16_GB = 3.85


def test_the_target_is_the_27b_of_the_cited_config() -> None:
    t, c = REAL.target, QWEN35_27B
    assert (t.arch, REAL.vocab_size, t.dim, t.layers, t.ff) == ("qwen35", c["vocab_size"], c["hidden_size"], c["num_hidden_layers"], c["intermediate_size"])
    assert (t.heads, t.heads_kv, t.head_dim) == (c["num_attention_heads"], c["num_key_value_heads"], c["head_dim"])
    assert t.rope_dim == c["partial_rotary_factor"] * c["head_dim"]
    assert t.rope_base == c["rope_theta"]
    assert sum(t.rope_sections) == t.rope_dim // 2  # IMROPE's sections are rotary pairs
    assert (t.v_heads, t.k_heads, t.head_state, t.conv_kernel) == (
        c["linear_num_value_heads"],
        c["linear_num_key_heads"],
        c["linear_key_head_dim"],
        c["linear_conv_kernel_dim"],
    )
    assert c["linear_value_head_dim"] == c["linear_key_head_dim"] == t.head_state
    assert t.full_attention_interval == c["full_attention_interval"]
    s = LLAMA_CPP_SNAPSHOT
    assert (t.dim, t.ff, REAL.vocab_size, t.layers, t.heads, t.heads_kv) == (s["n_embd"], s["n_ff"], s["n_vocab"], s["n_layer"], s["n_head"], s["n_head_kv"])
    assert [i for i in range(12) if not t.recurrent(i)] == [3, 7, 11]
    assert t.attention_layers == 16  # "64 layers = 48 DeltaNet + 16 GQA"


def test_the_moe_file_has_the_35b_a3b_per_expert_widths() -> None:
    m, c = REAL.moe, QWEN35_35B_A3B
    assert m.arch == "qwen35moe"
    assert m.experts > 0
    assert m.layers == spec.MOE_LAYERS < c["num_hidden_layers"]  # the recipe's premise is per layer (the docstring)
    assert m.layers % m.full_attention_interval == 0
    assert (m.dim, m.heads, m.heads_kv, m.head_dim) == (
        c["hidden_size"],
        c["num_attention_heads"],
        c["num_key_value_heads"],
        c["head_dim"],
    )
    assert (m.experts, m.experts_used, m.expert_ff, m.shared_ff) == (
        c["num_experts"],
        c["num_experts_per_tok"],
        c["moe_intermediate_size"],
        c["shared_expert_intermediate_size"],
    )
    assert (m.v_heads, m.k_heads, m.head_state, m.conv_kernel, m.full_attention_interval) == (
        c["linear_num_value_heads"],
        c["linear_num_key_heads"],
        c["linear_key_head_dim"],
        c["linear_conv_kernel_dim"],
        c["full_attention_interval"],
    )


def test_the_drafter_is_dflash2s_size() -> None:
    d, c = REAL.drafter, DFLASH2
    assert (d.layers, d.dim, d.ff, d.heads, d.heads_kv, d.head_dim, d.block_size) == (
        c["num_hidden_layers"],
        c["hidden_size"],
        c["intermediate_size"],
        c["num_attention_heads"],
        c["num_key_value_heads"],
        c["head_dim"],
        c["block_size"],
    )
    assert list(d.target_layers) == c["target_layer_ids"]
    assert d.target_dim == REAL.target.dim
    assert d.rope_base == c["rope_theta"]
    # those widths are DFlash2's size: its layers and fc, plus the candidate selector (two 248320 x 256 codebooks and a
    # 256 x 5120 projection) and each layer's two kernel projections (1664 x 5120), in bf16
    layer = d.dim * (d.heads * d.head_dim) * 2 + d.dim * (d.heads_kv * d.head_dim) * 2 + 3 * d.dim * d.ff
    params = d.layers * layer + len(d.target_layers) * d.target_dim * d.dim + 2 * REAL.vocab_size * 256 + 256 * d.dim + d.layers * 2 * 1664 * d.dim
    assert 2 * params / 1e9 == pytest.approx(DFLASH2_BF16_GB, rel=0.01)


def test_the_reduced_set_keeps_every_per_layer_shape_and_the_pattern() -> None:
    for real, small in ((REAL.target, REDUCED.target), (REAL.moe, REDUCED.moe)):
        assert small.layers == small.full_attention_interval == 4
        assert dataclasses.replace(small, name=real.name, layers=real.layers) == real
        assert [small.recurrent(i) for i in range(4)] == [real.recurrent(i) for i in range(4)] == [True, True, True, False]
        assert spec.attention_share(small) == spec.attention_share(real) == 0.25
        assert spec.layer_params(small, 0) == spec.layer_params(real, 0)
        assert spec.layer_params(small, 3) == spec.layer_params(real, 3)
    d = REDUCED.drafter
    assert dataclasses.replace(d, name=REAL.drafter.name, layers=REAL.drafter.layers, target_layers=REAL.drafter.target_layers) == REAL.drafter
    assert d.layers == len(d.target_layers) == 1
    assert max(d.target_layers) < REDUCED.target.layers
    assert (REDUCED.vocab_size, REDUCED.target_type, REDUCED.drafter_type, REDUCED.output_type) == (
        REAL.vocab_size,
        REAL.target_type,
        REAL.drafter_type,
        REAL.output_type,
    )


def test_the_drafters_prompt_share_the_docstring_gives() -> None:
    assert round(100 * spec.drafter_prompt_share(REAL), 2) == 0.75
    assert round(100 * spec.drafter_prompt_share(REDUCED), 1) == 2.4
    assert "0.75% real, 2.4% reduced" in (spec.__doc__ or "")


def test_the_digest_holds_every_field_and_the_writer() -> None:
    base = REAL.digest()
    assert base == dataclasses.replace(REAL).digest()
    assert dataclasses.replace(REAL, seed=1).digest() != base
    assert dataclasses.replace(REAL, target=dataclasses.replace(REAL.target, layers=63)).digest() != base
    assert dataclasses.replace(REAL, drafter=dataclasses.replace(REAL.drafter, block_size=16)).digest() != base
    assert REDUCED.digest() != base


def test_the_digest_changes_with_the_writers_version(monkeypatch: pytest.MonkeyPatch) -> None:
    base = REAL.digest()
    monkeypatch.setattr(spec, "WRITER_VERSION", spec.WRITER_VERSION + 1)
    assert REAL.digest() != base
