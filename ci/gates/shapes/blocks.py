"""Valid ggml quantized blocks from random bits, without quantizing anything: a block's quants are random bytes and its
f16 scale is set so that the block's weights have a chosen standard deviation. Quantizing 27e9 float weights in numpy
takes hours; filling their blocks takes seconds, and a prompt costs the same whatever the weights hold.

Uniform random quants average -0.5, not 0: each block's scale gets a random sign, so the offset averages out across a
row instead of adding up through the layers.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

F32 = "F32"


@dataclass(frozen=True)
class BlockType:
    """One ggml block type: its name (gguf's GGMLQuantizationType), weights and bytes per block, where its f16 scale
    sits, and E[q^2] of its uniform random quants (the weight's variance is ``d^2 * (scale^2) * mean_square``)."""

    name: str
    weights: int
    size: int
    d_offset: int
    mean_square: float
    sub_scale: int = 1  # Q6_K: the int8 sub-block scales, all of this magnitude


# ggml-common.h: Q4_0 {f16 d; u8 qs[16]}, 32 weights d * (nibble - 8); Q8_0 {f16 d; i8 qs[32]}, 32 weights d * q;
# Q6_K {u8 ql[128]; u8 qh[64]; i8 scales[16]; f16 d}, 256 weights d * scales[j] * (q - 32)
Q4_0 = BlockType("Q4_0", 32, 18, 0, sum(v * v for v in range(-8, 8)) / 16)  # 21.5
Q8_0 = BlockType("Q8_0", 32, 34, 0, sum(v * v for v in range(-128, 128)) / 256)  # 5461.5
Q6_K = BlockType("Q6_K", 256, 210, 208, sum(v * v for v in range(-32, 32)) / 64, sub_scale=4)  # 341.5
TYPES = {t.name: t for t in (Q4_0, Q8_0, Q6_K)}
Q6_K_SCALES = slice(192, 208)


def scale_for(kind: BlockType, std: float) -> np.float16:
    """The f16 block scale that gives weights of standard deviation ``std`` (a normal f16: >= 6.1e-5)."""
    d: np.float16 = np.float16(std / (kind.sub_scale * kind.mean_square**0.5))
    if not np.isfinite(d) or abs(float(d)) < float(np.finfo(np.float16).tiny):
        raise ValueError(f"{kind.name}: weights of std {std:g} need a block scale {float(d):g} outside f16's normal range")
    return d


def random_blocks(kind: BlockType, count: int, std: float, rng: np.random.Generator | np.random.BitGenerator) -> np.ndarray:
    """``count`` blocks of ``kind`` as a (count, size) uint8 array: random quants, scales of magnitude
    :func:`scale_for` with random signs. ``rng`` is a BitGenerator (its raw 64-bit draws: the fastest numpy has)."""
    bits = rng if isinstance(rng, np.random.BitGenerator) else rng.bit_generator
    nbytes = count * kind.size
    raw = bits.random_raw((nbytes + 7) // 8)
    blocks = raw.view(np.uint8)[:nbytes].reshape(count, kind.size)
    d = scale_for(kind, std).view(np.uint16)
    lo, hi = np.uint8(int(d) & 0xFF), np.uint8((int(d) >> 8) & 0x7F)
    hi_byte = blocks[:, kind.d_offset + 1]
    hi_byte &= 0x80  # the random bit that stays is the scale's sign
    hi_byte |= hi
    blocks[:, kind.d_offset] = lo
    if kind.sub_scale > 1:  # Q6_K's int8 sub-block scales: +-sub_scale, the sign from a random bit
        scales = blocks[:, Q6_K_SCALES]
        scales[:] = np.where(scales & 0x80, np.uint8(256 - kind.sub_scale), np.uint8(kind.sub_scale))
    return blocks

