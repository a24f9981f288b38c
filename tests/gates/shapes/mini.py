"""A miniature shape set for the fast tier: every kind of tensor the real sets have (Q4_0, Q6_K, Q8_0, f32, experts),
small enough to write in a fraction of a second."""

from __future__ import annotations

from ci.gates.shapes import spec

TARGET = spec.Qwen35Shape(
    name="mini-target",
    arch=spec.QWEN35,
    layers=4,
    dim=256,
    ff=512,
    heads=2,
    heads_kv=1,
    head_dim=64,
    rope_dim=16,
    rope_sections=(4, 2, 2, 0),
    full_attention_interval=4,
    conv_kernel=4,
    k_heads=2,
    v_heads=4,
    head_state=32,
    context=4096,
)
MOE = spec.Qwen35Shape(
    name="mini-moe",
    arch=spec.QWEN35MOE,
    layers=4,
    dim=256,
    heads=2,
    heads_kv=1,
    head_dim=64,
    rope_dim=16,
    rope_sections=(4, 2, 2, 0),
    full_attention_interval=4,
    conv_kernel=4,
    k_heads=2,
    v_heads=4,
    head_state=32,
    experts=4,
    experts_used=2,
    expert_ff=64,
    shared_ff=64,
    context=4096,
)
DRAFTER = spec.DFlashShape(
    name="mini-dflash", layers=1, dim=256, ff=512, heads=4, heads_kv=2, head_dim=64, block_size=4, target_layers=(3,), target_dim=256, context=4096
)
MINI = spec.ShapeSet(name="mini", seed=5, vocab_size=1024, target=TARGET, drafter=DRAFTER, moe=MOE)
