"""Random blocks are valid ggml blocks of the asked spread: gguf's own dequantizer reads them back."""

from __future__ import annotations

import gguf
import numpy as np
import pytest
from gguf.quants import dequantize

from ci.gates.shapes import blocks
from ci.gates.shapes.blocks import Q4_0, Q6_K, Q8_0, BlockType


@pytest.mark.parametrize("kind", [Q4_0, Q8_0, Q6_K], ids=lambda k: k.name)
@pytest.mark.parametrize("std", [1.0, 5120**-0.5, 17408**-0.5, 3.0 / 5120**0.5])
def test_blocks_dequantize_to_finite_weights_of_the_asked_spread_and_no_offset(kind: BlockType, std: float) -> None:
    data = blocks.random_blocks(kind, 8192, std, np.random.SFC64(7))
    assert data.shape == (8192, kind.size)
    assert data.dtype == np.uint8
    w = dequantize(data.reshape(-1), gguf.GGMLQuantizationType[kind.name])
    assert w.size == 8192 * kind.weights
    assert np.isfinite(w).all()
    assert w.std() == pytest.approx(std, rel=0.02)
    assert abs(w.mean()) < 0.01 * std  # uniform quants average -0.5; the scales' random signs cancel it
    d = data[:, kind.d_offset : kind.d_offset + 2].copy().view(np.float16).astype(np.float32).reshape(-1)
    assert np.all(np.abs(d) == abs(float(blocks.scale_for(kind, std))))
    assert 0.45 < float(np.mean(d > 0)) < 0.55


def test_the_same_generator_gives_the_same_blocks() -> None:
    a = blocks.random_blocks(Q4_0, 1000, 0.01, np.random.SFC64(np.random.SeedSequence([1, 2])))
    b = blocks.random_blocks(Q4_0, 1000, 0.01, np.random.SFC64(np.random.SeedSequence([1, 2])))
    c = blocks.random_blocks(Q4_0, 1000, 0.01, np.random.SFC64(np.random.SeedSequence([1, 3])))
    assert np.array_equal(a, b)
    assert not np.array_equal(a, c)


def test_q6_k_sub_scales_are_plus_or_minus_the_one_magnitude() -> None:
    data = blocks.random_blocks(Q6_K, 4096, 0.05, np.random.SFC64(3))
    scales = data[:, blocks.Q6_K_SCALES].view(np.int8)
    assert set(np.unique(scales).tolist()) == {-Q6_K.sub_scale, Q6_K.sub_scale}


def test_a_spread_no_f16_scale_can_give_is_refused() -> None:
    with pytest.raises(ValueError, match="outside f16's normal range"):
        blocks.scale_for(Q8_0, 1e-4)
