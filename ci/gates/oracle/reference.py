"""GGML_OP_GATED_DELTA_NET in float64, written from the op's definition in the pinned fork (c14872f), not from a kernel:
``ggml/include/ggml.h`` 2578-2599, ``ggml/src/ggml.c`` 6500-6553 and the CPU op, ``ggml/src/ggml-cpu/ops.cpp``
10726-10877 (the ops.cpp lines beside each step of :func:`gated_delta_net`).

Arrays are in ggml's memory order (numpy's C order of ggml's ``ne`` reversed): q, k ``[B, T, H_k, S]``, v
``[B, T, H_v, S]``, g ``[B, T, H_v, 1 or S]``, beta ``[B, T, H_v]``; a state is stored transposed (ops.cpp 10830),
so ``state[b, h, j, i]`` is ``S[i, j]`` of head ``h``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

Array = npt.NDArray[np.float64]
ArrayLike = npt.NDArray[np.floating]


@dataclass(frozen=True)
class Reference:
    """What the op must write: the attention output ``[B, T, H_v, S]`` and its written snapshot slots
    ``[min(T, K), B, H_v, S, S]`` (each in the stored, transposed state layout), in float64."""

    output: Array
    slots: Array


def gated_delta_net(q: ArrayLike, k: ArrayLike, v: ArrayLike, g: ArrayLike, beta: ArrayLike, state: ArrayLike, snapshots: int) -> Reference:
    """The op in float64, vectorised over sequences and heads, the tokens in order, on the state ``S`` (rows: key
    channel ``i``, columns: value channel ``j``): decay ``S *= exp(g)`` (a KDA gate: each row by its own);
    ``delta[j] = (v[j] - sum_i S[i, j] k[i]) * beta`` (no sigmoid); ``S[i, j] += k[i] delta[j]``;
    ``out[j] = sum_i S[i, j] q[i] / sqrt(S_v)``. q and k are used as given (the model normalises them). Slot ``s``
    is the state after token ``T - 1 - s``, for ``s < min(T, K)``; the other slots are the caller's."""
    q, k, v, g, beta, state = (np.asarray(a, dtype=np.float64) for a in (q, k, v, g, beta, state))
    seqs, tokens, v_heads, size = v.shape
    q_heads = q.shape[2]
    if q.shape != (seqs, tokens, q_heads, size) or k.shape != q.shape:
        raise ValueError(f"q {q.shape} and k {k.shape} must be [B, T, H_k, S] of v {v.shape}")
    if v_heads % q_heads:
        raise ValueError(f"{v_heads} value heads are not a multiple of {q_heads} q/k heads")
    if g.shape not in ((seqs, tokens, v_heads, 1), (seqs, tokens, v_heads, size)):
        raise ValueError(f"g {g.shape} must be [B, T, H_v, 1] or [B, T, H_v, S]")
    if beta.shape != (seqs, tokens, v_heads):
        raise ValueError(f"beta {beta.shape} must be [B, T, H_v]")
    if state.shape != (seqs, v_heads, size, size):
        raise ValueError(f"state {state.shape} must be [B, H_v, S, S]")
    if snapshots < 1:
        raise ValueError(f"K = {snapshots}: at least one snapshot slot")
    # value head h reads q/k head h % H_k: tiled, not interleaved (ops.cpp 10802-10803; ggml.h's TODO
    # [TAG_GGML_GDN_BCAST] says the order may become configurable)
    heads = np.arange(v_heads) % q_heads
    q, k = q[:, :, heads], k[:, :, heads]
    decay = np.exp(g)  # [B, T, H_v, 1 or S]: the trailing axis multiplies S's key channel i, the last axis of M
    scale = 1.0 / np.sqrt(size)
    m = state.copy()  # M[b, h, j, i] = S[i, j]
    output = np.empty((seqs, tokens, v_heads, size))
    kept = min(tokens, snapshots)
    slots = np.empty((kept, seqs, v_heads, size, size))
    for t in range(tokens):
        m *= decay[:, t, :, None, :]  # ops.cpp 10833-10844 (KDA when g's ne0 is S_v: 10764)
        kt = k[:, t]  # [B, H_v, S]
        delta = (v[:, t] - np.einsum("bhji,bhi->bhj", m, kt)) * beta[:, t, :, None]  # ops.cpp 10847-10851
        m += delta[..., :, None] * kt[..., None, :]  # ops.cpp 10854-10856
        output[:, t] = np.einsum("bhji,bhi->bhj", m, q[:, t]) * scale  # ops.cpp 10796, 10859-10863
        slot = tokens - 1 - t
        if slot < kept:  # ops.cpp 10867-10874 (K = 1 updates slot 0 in place, 10810-10812)
            slots[slot] = m
    return Reference(output, slots)


def snr_db(measured: npt.NDArray[np.floating], reference: npt.NDArray[np.floating]) -> float:
    """The SNR of ``measured`` against ``reference`` in dB, in float64: +inf when they are equal, -inf when the
    reference is all zero and they are not, NaN when ``measured`` holds a value that is not finite (such a case fails
    on that count alone)."""
    ref = np.asarray(reference, dtype=np.float64)
    noise = float(np.sum((np.asarray(measured, dtype=np.float64) - ref) ** 2))
    signal = float(np.sum(ref * ref))
    if not math.isfinite(noise):
        return math.nan
    if noise == 0.0:
        return math.inf
    if signal == 0.0:
        return -math.inf
    return 10.0 * math.log10(signal / noise)
