"""What the oracle's driver and its callers share, with numpy alone (the KernelForge task copies this file as it
is): a case's file as driver.c reads it, the op's result split as it writes it, and the driver's compile line.

A case file is :data:`MAGIC`, :data:`HEADER`, then float32 q, k, v, g, beta and state in the memory order of the
tensors the driver loads; the result is the op's whole dst as float32: the output ``[B, T, H_v, S]``, then the K
slots ``[K, B, H_v, S, S]``, the first ``min(T, K)`` written (driver.c fills dst with NaN first, so an unwritten
one shows).
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from pathlib import Path
from typing import Any, TypeVar

import numpy as np
import numpy.typing as npt

if __package__:  # inside the project
    from ci.gates.oracle.cases import Inputs, Shape
else:  # a KernelForge task's copy, beside its cases.py
    from cases import Inputs, Shape  # type: ignore[no-redef,import-not-found]

MAGIC = b"GDNCASE1"
HEADER = struct.Struct("<8s8q")  # driver.c's case_header after the magic: S, H_k, H_v, T, B, K, gate width, permuted
CFLAGS = ("-O2", "-std=c11", "-Wall")
_Float = TypeVar("_Float", bound=np.floating[Any])
SHORT_OUTPUT = "{count} floats written, {expected} expected"


def library(folder: Path, name: str) -> Path | None:
    """``lib{name}.so`` in ``folder``, else its shortest versioned file (a wheel ships those alone); None when neither."""
    plain = folder / f"lib{name}.so"
    if plain.is_file():
        return plain
    versioned = sorted(folder.glob(f"lib{name}.so.*"), key=lambda p: (len(p.name), p.name))
    return versioned[0] if versioned else None


def compile_argv(compiler: str, include_dir: Path, source: Path, output: Path, libraries: Sequence[Path], lib_dir: Path) -> tuple[str, ...]:
    """The driver's compile against a build's headers, linked with its libraries; the rpath is the build's folder,
    absolute: never the current directory, whatever the caller's."""
    rpath = str(lib_dir.resolve())
    return (compiler, *CFLAGS, "-I", str(include_dir), str(source), "-o", str(output), *map(str, libraries), f"-Wl,-rpath,{rpath}", "-lm")


def encode(shape: Shape, inputs: Inputs) -> bytes:
    """A case file of driver.c: the header, then q, k, v, g, beta and state, each in the memory order of the tensor
    the driver loads it into (a permuted case's q, k, v as ``[B, H, T, S]``, what ggml_permute(0, 2, 1, 3) views as
    ``[B, T, H, S]``)."""
    header = HEADER.pack(
        MAGIC, shape.head_size, shape.qk_heads, shape.v_heads, shape.tokens, shape.seqs, shape.snapshots, shape.gate_width, int(shape.permuted)
    )
    heads = [inputs.q, inputs.k, inputs.v]
    if shape.permuted:
        heads = [a.transpose(0, 2, 1, 3) for a in heads]
    parts = [np.ascontiguousarray(a, dtype="<f4").tobytes() for a in (*heads, inputs.g, inputs.beta, inputs.state)]
    return header + b"".join(parts)


def split(shape: Shape, result: npt.NDArray[_Float]) -> tuple[npt.NDArray[_Float], npt.NDArray[_Float]]:
    """The op's whole result as the output ``[B, T, H_v, S]`` and the written slots ``[min(T, K), B, H_v, S, S]``; the
    slots past min(T, K) are the caller's and are left out (ggml.h 2588-2590)."""
    if result.size != shape.dst_count:
        raise ValueError(SHORT_OUTPUT.format(count=result.size, expected=shape.dst_count))
    output = result[: shape.output_count].reshape(shape.seqs, shape.tokens, shape.v_heads, shape.head_size)
    slots = result[shape.output_count :].reshape(shape.snapshots, shape.seqs, shape.v_heads, shape.head_size, shape.head_size)
    return output, slots[: shape.written_slots]
