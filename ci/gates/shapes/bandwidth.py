"""The weight bytes a model reads per decoded token, from a GGUF file's tensor table: what "decode as a share of the
device's memory bandwidth" divides by (bytes per token x tokens/s / the device's peak).

A decoded token reads every weight once, except: of ``token_embd`` only its own row (ggml_get_rows), and of a MoE
layer's routed experts (``*_exps``) only the ``expert_used_count`` of ``expert_count`` it is routed to. A DFlash
drafter's figure is its own tensors only: it borrows the target's embedding and output head, which the target's
figure holds.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class DecodeBytes:
    """A model's weight bytes per decoded token, and its parts."""

    dense: int  # every tensor read whole
    embedding_row: int  # one row of token_embd
    experts: int  # the routed experts' share: all their bytes x used / count
    file_weights: int  # every tensor's bytes (the file's weights, for comparison)

    @property
    def per_token(self) -> int:
        return self.dense + self.embedding_row + self.experts


def decode_bytes(path: Path) -> DecodeBytes:
    """The weight bytes per decoded token of the GGUF model at ``path`` (its tensor table and keys only: the header
    is read, the weights are not)."""
    table = read_table(path)
    arch = str(table.keys["general.architecture"])
    count = table.number(f"{arch}.expert_count")
    used = table.number(f"{arch}.expert_used_count")
    dense = row = experts = total = 0
    for t in table.tensors:
        total += t.nbytes
        if t.name == "token_embd.weight":
            row += t.nbytes // t.ne[1]  # ne: (row width, rows)
        elif "_exps." in t.name and count:
            experts += t.nbytes * used // count
        else:
            dense += t.nbytes
    return DecodeBytes(dense=dense, embedding_row=row, experts=experts, file_weights=total)


@dataclass(frozen=True)
class TensorEntry:
    name: str
    ne: tuple[int, ...]  # ggml's order: the row's width first
    type: int
    nbytes: int


@dataclass(frozen=True)
class Table:
    keys: dict[str, object]  # the scalar and string keys (arrays are skipped)
    tensors: tuple[TensorEntry, ...]

    def number(self, key: str) -> int:
        """An integer key's value, 0 where the file has none."""
        value = self.keys.get(key, 0)
        return int(value) if isinstance(value, int | float) else 0


# GGUF value types (gguf.GGUFValueType): struct formats of the fixed-size ones; 8 is a string, 9 an array
_SCALARS = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q", 12: "<d"}
_STRING, _ARRAY = 8, 9


def read_table(path: Path) -> Table:
    """A GGUF file's keys and tensor table, read straight from its header (gguf's GGUFReader builds an object per
    token of a 248,320-token vocabulary: 15 s and 700 MB for a header this reads in well under a second)."""
    import struct

    from gguf import GGML_QUANT_SIZES, GGMLQuantizationType

    with path.open("rb") as fh:
        buf = fh.read(1 << 20)
        at = 0

        def need(n: int) -> None:
            nonlocal buf
            if at + n > len(buf):
                more = fh.read(max(n, 1 << 22))
                buf += more
                if at + n > len(buf):
                    raise ValueError(f"{path}: the GGUF header ends early")

        def unpack(fmt: str) -> Any:
            nonlocal at
            size = struct.calcsize(fmt)
            need(size)
            (value,) = struct.unpack_from(fmt, buf, at)
            at += size
            return value

        def string() -> str:
            nonlocal at
            n = unpack("<Q")
            need(n)
            text = bytes(buf[at : at + n]).decode("utf-8", errors="replace")
            at += n
            return text

        def value(kind: int) -> object:
            nonlocal at
            if kind in _SCALARS:
                return unpack(_SCALARS[kind])
            if kind == _STRING:
                return string()
            if kind != _ARRAY:
                raise ValueError(f"{path}: unknown GGUF value type {kind}")
            item, n = unpack("<I"), unpack("<Q")
            if item in _SCALARS:
                size = struct.calcsize(_SCALARS[item]) * n
                need(size)
                at += size
            else:
                for _ in range(n):
                    value(item)
            return None

        if unpack("<I") != 0x46554747:  # "GGUF"
            raise ValueError(f"{path}: not a GGUF file")
        unpack("<I")  # version
        n_tensors, n_kv = unpack("<Q"), unpack("<Q")
        keys: dict[str, object] = {}
        for _ in range(n_kv):
            name = string()
            v = value(unpack("<I"))
            if v is not None:
                keys[name] = v
        tensors = []
        for _ in range(n_tensors):
            name = string()
            ne = tuple(unpack("<Q") for _ in range(unpack("<I")))
            kind = unpack("<I")
            unpack("<Q")  # offset
            weights, size = GGML_QUANT_SIZES[GGMLQuantizationType(kind)]
            elements = 1
            for n in ne:
                elements *= n
            tensors.append(TensorEntry(name, ne, kind, elements // weights * size))
    return Table(keys, tuple(tensors))
