"""Real GGUF files for the route tests, written with gguf.GGUFWriter: a header and metadata, tensors on request."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import gguf
import numpy as np

Value = int | str | bool | float

# The files the engine's own route tests used, by what their headers say. The architectures are those of the
# models in the seeds: Qwen3.8-27B (qwen35, dense), a Qwen3 MoE (qwen3moe, 128 experts), DFlash2 drafters.
KINDS: dict[str, tuple[str, dict[str, Value]]] = {
    "rotated-dense": ("qwen35", {"qwen35.block_count": 64, "onebit.hadamard_q4_0": 32}),
    "rotated-moe": ("qwen3moe", {"qwen3moe.block_count": 48, "qwen3moe.expert_count": 128, "onebit.hadamard_q4_0": 32}),
    "plain": ("qwen35", {"qwen35.block_count": 64}),
    "plain-moe": ("qwen3moe", {"qwen3moe.expert_count": 128}),
    "dflash": ("dflash", {}),
    "dflash-b8": ("dflash", {"dflash.block_size": 8}),
    "mtp-head": ("qwen35", {"qwen35.nextn_predict_layers": 1}),
    "no-mtp-layers": ("qwen35", {"qwen35.block_count": 64, "qwen35.nextn_predict_layers": 0}),
}


def write_gguf(path: Path, arch: str, kv: Mapping[str, Value] | None = None, tensors: Mapping[str, np.ndarray] | None = None) -> Path:
    """A GGUF at ``path``: integers as uint32, the rest as their own type."""
    writer = gguf.GGUFWriter(str(path), arch)
    for key, value in (kv or {}).items():
        if isinstance(value, bool):
            writer.add_bool(key, value)
        elif isinstance(value, int):
            writer.add_uint32(key, value)
        elif isinstance(value, float):
            writer.add_float32(key, value)
        else:
            writer.add_string(key, value)
    for name, data in (tensors or {}).items():
        writer.add_tensor(name, data)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def make(kind: str, directory: Path) -> str:
    """``<kind>.gguf`` in ``directory`` (written once); its name, relative, as a user types it."""
    name = f"{kind}.gguf"
    if not (directory / name).exists():
        arch, kv = KINDS[kind]
        write_gguf(directory / name, arch, kv)
    return name
