"""The real-shaped model sets, as data (pure): the engine's pair at its real hyperparameters (:data:`REAL`, each
shape's public source beside it), and :data:`REDUCED`, which a 2-core CPU serves in tens of seconds: 4 of the 64
layers (3 delta-net, 1 attention), every per-layer shape, the vocabulary and the quant types, the drafter scaled
alike. It keeps each layer's cost and the 3:1 mix, not the output matrix's share of the bytes
(6.7% of the real target's, 40% of the reduced one's), the drafter's prompt cost (:func:`drafter_prompt_share`:
0.75% real, 2.4% reduced) or any absolute speed.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from dataclasses import dataclass

# Bump when the bytes written for an unchanged spec change (block layout, scales, keys, vocabulary): the cache key
# holds it, so files written by an older writer are never taken for this one's.
WRITER_VERSION = 1

QWEN35 = "qwen35"
QWEN35MOE = "qwen35moe"
DFLASH = "dflash"


@dataclass(frozen=True)
class Qwen35Shape:
    """A qwen35 (dense) or qwen35moe target: every ``full_attention_interval``-th layer full attention, the others
    gated delta net; the delta net's key and value heads share one width (llama.cpp's ``ssm.state_size``)."""

    name: str
    arch: str
    layers: int
    dim: int
    heads: int
    heads_kv: int
    head_dim: int
    rope_dim: int
    rope_sections: tuple[int, int, int, int]
    full_attention_interval: int
    conv_kernel: int
    k_heads: int  # linear_num_key_heads (ssm.group_count)
    v_heads: int  # linear_num_value_heads (ssm.time_step_rank)
    head_state: int  # linear_key_head_dim = linear_value_head_dim (ssm.state_size)
    ff: int = 0  # the dense FFN's width (qwen35)
    experts: int = 0  # qwen35moe: routed experts, experts per token, their width, the shared expert's width
    experts_used: int = 0
    expert_ff: int = 0
    shared_ff: int = 0
    rope_base: float = 10000000.0
    context: int = 262144

    @property
    def inner(self) -> int:
        return self.head_state * self.v_heads

    @property
    def conv_channels(self) -> int:
        return 2 * self.head_state * self.k_heads + self.inner

    def recurrent(self, layer: int) -> bool:
        return (layer + 1) % self.full_attention_interval != 0

    @property
    def attention_layers(self) -> int:
        return sum(not self.recurrent(i) for i in range(self.layers))


@dataclass(frozen=True)
class DFlashShape:
    """A DFlash drafter: ``fc`` fuses the target's hidden states at ``target_layers``, then decoder layers of their own
    width; no token embedding or output head (it borrows the target's)."""

    name: str
    layers: int
    dim: int
    ff: int
    heads: int
    heads_kv: int
    head_dim: int
    block_size: int
    target_layers: tuple[int, ...]
    target_dim: int
    rope_base: float = 10000000.0
    context: int = 262144


@dataclass(frozen=True)
class ShapeSet:
    """A target, its DFlash drafter and a MoE file, with one vocabulary; ``seed`` fixes every byte."""

    name: str
    seed: int
    vocab_size: int
    target: Qwen35Shape
    drafter: DFlashShape
    moe: Qwen35Shape
    target_type: str = "Q4_0"  # the engine's files: the target in Q4_0, the drafter in Q8_0
    drafter_type: str = "Q8_0"
    output_type: str = "Q6_K"  # llama-quantize's Q4_0 keeps output.weight in Q6_K (the snapshot cited at TARGET)

    def digest(self) -> str:
        """The spec's hash: its every field and :data:`WRITER_VERSION` (the cache's key)."""
        text = json.dumps({"writer": WRITER_VERSION, "set": dataclasses.asdict(self)}, sort_keys=True)
        return hashlib.sha256(text.encode()).hexdigest()


VOCAB_SIZE = 248320
# Qwen3.5's text_config.rope_parameters: partial_rotary_factor 0.25 of head_dim 256, mrope_section [11, 11, 10]
ROPE_DIM = 64
ROPE_SECTIONS = (11, 11, 10, 0)

# Qwen3.5-27B (the engine's Qwen3.8-27B has its shapes): aws-samples/sample-qwen3.5-qwen3.6-dense-trainium
# src/qwen3_6/config.py at e3d86bf; cross-checked: ggml-org/llama.cpp tests/snapshots/qwen3.5-27b.schema at b6f4957
TARGET = Qwen35Shape(
    name="qwen35-27b-shape",
    arch=QWEN35,
    layers=64,
    dim=5120,
    ff=17408,
    heads=24,
    heads_kv=4,
    head_dim=256,
    rope_dim=ROPE_DIM,
    rope_sections=ROPE_SECTIONS,
    full_attention_interval=4,
    conv_kernel=4,
    k_heads=16,
    v_heads=48,
    head_state=128,
)

# z-lab/Qwen3.8-27B-DFlash2's config.json; size and block: madeye/qwen3.8-dflash2-gb10 README.md, serve.sh at 15c3bc2.
# A DFlash (v1) drafter of DFlash2's layers, widths, taps and block: docs/gates.md says what it leaves out and why
DRAFTER = DFlashShape(
    name="qwen35-27b-dflash-shape",
    layers=5,
    dim=5120,
    ff=17408,
    heads=32,
    heads_kv=8,
    head_dim=128,
    block_size=8,
    target_layers=(5, 19, 33, 47, 61),
    target_dim=5120,
)

# Qwen3.5-35B-A3B: cpehle/tyr Tyr/Model/Qwen35/Config.lean at 1651c71, qwen35_35B_A3B.
# The micro-batch recipe's premise (how 512 or 1024 tokens spread over 256 experts) is per layer: all 40 layers would
# add 15.8 GB to a 64 GB GPU box's disk and change no ratio
MOE_LAYERS = 8  # of the 35B-A3B's 40: two full_attention_intervals
MOE = Qwen35Shape(
    name="qwen35moe-35b-a3b-shape-8l",
    arch=QWEN35MOE,
    layers=MOE_LAYERS,
    dim=2048,
    heads=16,
    heads_kv=2,
    head_dim=256,
    rope_dim=ROPE_DIM,
    rope_sections=ROPE_SECTIONS,
    full_attention_interval=4,
    conv_kernel=4,
    k_heads=16,
    v_heads=32,
    head_state=128,
    experts=256,
    experts_used=8,
    expert_ff=512,
    shared_ff=512,
)

REAL = ShapeSet(name="real", seed=2026, vocab_size=VOCAB_SIZE, target=TARGET, drafter=DRAFTER, moe=MOE)

REDUCED_LAYERS = 4  # one full_attention_interval: three delta-net layers and one attention layer
REDUCED = ShapeSet(
    name="reduced",
    seed=2026,
    vocab_size=VOCAB_SIZE,
    target=dataclasses.replace(TARGET, name="qwen35-27b-shape-4l", layers=REDUCED_LAYERS),
    drafter=dataclasses.replace(DRAFTER, name="qwen35-27b-dflash-shape-1l", layers=1, target_layers=(REDUCED_LAYERS - 1,)),
    moe=dataclasses.replace(MOE, name="qwen35moe-35b-a3b-shape-4l", layers=REDUCED_LAYERS),
)

SETS = {s.name: s for s in (REAL, REDUCED)}


# -- what a set keeps (the reduced set's docstring, computed) -------------------------------------------------------


def layer_params(shape: Qwen35Shape, layer: int, *, active: bool = True) -> int:
    """The weights of one layer's matrices (norms and the delta net's small vectors left out); ``active``: only the
    experts a token is routed to."""
    d = shape.dim
    if shape.recurrent(layer):
        mix = d * shape.conv_channels + 2 * d * shape.inner + 2 * d * shape.v_heads
    else:
        mix = d * 2 * shape.heads * shape.head_dim + 2 * d * shape.heads_kv * shape.head_dim + shape.heads * shape.head_dim * d
    if shape.experts:
        routed = shape.experts_used if active else shape.experts
        ffn = 3 * d * shape.expert_ff * routed + 3 * d * shape.shared_ff + d * shape.experts
    else:
        ffn = 3 * d * shape.ff
    return mix + ffn


def trunk_params(shape: Qwen35Shape) -> int:
    """Every layer's matrices a token goes through (without the embedding and the output head)."""
    return sum(layer_params(shape, i) for i in range(shape.layers))


def drafter_prompt_params(drafter: DFlashShape) -> int:
    """The drafter's weights a prompt token goes through: ``fc`` over the taps and each layer's K and V (the fork's
    ``src/models/dflash.cpp``: the rest of a layer runs on the drafted block only)."""
    fc = len(drafter.target_layers) * drafter.target_dim * drafter.dim
    return fc + drafter.layers * 2 * drafter.dim * drafter.heads_kv * drafter.head_dim


def drafter_prompt_share(s: ShapeSet) -> float:
    """The drafter's prompt-side weights against the target's trunk: the cost it adds to a prompt, as a share."""
    return drafter_prompt_params(s.drafter) / trunk_params(s.target)


def attention_share(shape: Qwen35Shape) -> float:
    """The share of full-attention layers (the compute mix)."""
    return shape.attention_layers / shape.layers
