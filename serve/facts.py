"""Facts from a GGUF file's header: what the route needs to know, read without touching the tensor data.

The format's constants (magic, value types, block sizes) come from the ``gguf`` package. The walk itself is a
streaming read of the key-value section that steps over arrays instead of decoding them: ``gguf.GGUFReader``
builds a numpy view per array element, and a Qwen-size vocabulary (151,936 tokens and 151,000 merges) takes it
6.0 s where this reader takes 0.028 s (``python benchmarks/gguf_facts.py``; docs/serve.md).
"""

from __future__ import annotations

import importlib.util
import mmap
import os
import stat
import struct
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

from serve import bounded
from serve.errors import A_GGUF_FILE, NO_SUCH_FILE, NOT_A_FILE, FileProblem, printable


def _gguf_constants() -> ModuleType:
    """The gguf package's constants module alone: the package's own __init__ imports numpy and the reader, 0.12 s
    at every launch (``python -X importtime -m serve serve --help``) for nothing this header walk needs."""
    if "gguf.constants" in sys.modules:
        return sys.modules["gguf.constants"]
    found = importlib.util.find_spec("gguf")
    if found is None or not found.submodule_search_locations:
        raise ImportError("the gguf package is not installed (pip install gguf)", name="gguf")
    spec = importlib.util.spec_from_file_location("serve._gguf_constants", Path(found.submodule_search_locations[0]) / "constants.py")
    if spec is None or spec.loader is None:
        raise ImportError("gguf: no constants module", name="gguf")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


gguf = _gguf_constants()
ValueType = Any  # gguf's GGUFValueType, from the module loaded above

HADAMARD_KEY = "onebit.hadamard_q4_0"
HADAMARD_GROUP = 32  # tools/hadamard_q4_0.py stamps the rotation's group size; the lean ROCm build expects 32
DEFAULT_ALIGNMENT = 32  # GGUF's own default when general.alignment is absent

# Messages, shared with the tests that match on them (tests/support/messages.py)
IS_EMPTY = "is empty (0 bytes), not a GGUF file"
NOT_GGUF = "not a GGUF file (it starts with {start!r}, a GGUF file with b'GGUF')"
UNREADABLE = "{problem}; not a readable GGUF file (re-download or re-convert it)"  # a corrupt header's problems, below
UNKNOWN_VERSION = "GGUF version {version} (this reader knows versions 2 and 3)"
KEY_TWICE = 'key "{key}" appears twice'
TRUNCATED_INSIDE = "truncated: the file ends ({size:,} bytes) inside {part}; re-download or re-convert it"
TRUNCATED_DATA = "truncated: {size:,} bytes, but its {tensors} tensors need {needed:,}; re-download or re-convert it"
# the part of the header a truncation is in
IN_HEADER = "the header"
IN_KEY = "key {number} of {count}"
IN_VALUE = 'the value of "{key}"'
NO_ARCHITECTURE = "has no general.architecture key; not a model GGUF llama-server can load"
NOT_AN_INTEGER = "{key} is a {type}, expected an integer"
NESTED_TOO_DEEP = "{what} nests arrays more than {limit} deep"
MAX_ARRAY_NESTING = 64  # llama.cpp's own reader takes no array of arrays at all; 100,000 deep was a RecursionError here

Scalar = int | float | bool | str

_SCALAR_FORMATS: dict[Any, str] = {
    gguf.GGUFValueType.UINT8: "B",
    gguf.GGUFValueType.INT8: "b",
    gguf.GGUFValueType.UINT16: "H",
    gguf.GGUFValueType.INT16: "h",
    gguf.GGUFValueType.UINT32: "I",
    gguf.GGUFValueType.INT32: "i",
    gguf.GGUFValueType.FLOAT32: "f",
    gguf.GGUFValueType.BOOL: "?",
    gguf.GGUFValueType.UINT64: "Q",
    gguf.GGUFValueType.INT64: "q",
    gguf.GGUFValueType.FLOAT64: "d",
}
_INTEGER_TYPES = frozenset(t for t, f in _SCALAR_FORMATS.items() if f in "BbHhIiQq")


@dataclass(frozen=True)
class GGUFFacts:
    """What serve reads from one GGUF header."""

    path: str
    architecture: str
    hadamard_stamp: int | None  # onebit.hadamard_q4_0 as stamped, None when absent
    expert_count: int  # <arch>.expert_count, 0 when absent
    block_size: int | None  # <arch>.block_size (a DFlash drafter's block), None when absent
    nextn_layers: int | None  # <arch>.nextn_predict_layers (an MTP head's layers), None when absent

    @property
    def hadamard_q4_0(self) -> bool:
        """Its Q4_0 weights are Hadamard-rotated in groups the lean ROCm build undoes."""
        return self.hadamard_stamp == HADAMARD_GROUP

    @property
    def moe(self) -> bool:
        return self.expert_count > 0

    def describe(self) -> str:
        """What the header says, for the terminal: the architecture as read, its control characters escaped."""
        arch = printable(self.architecture)
        parts = [arch]
        if self.moe:
            parts.append(f"MoE ({self.expert_count} experts)")
        else:
            parts.append("dense")
        if self.hadamard_q4_0:
            parts.append(f"Hadamard-rotated ({HADAMARD_KEY} = {HADAMARD_GROUP})")
        if self.block_size is not None:
            parts.append(f"{arch}.block_size {self.block_size}")
        if self.nextn_layers:
            parts.append(f"{arch}.nextn_predict_layers {self.nextn_layers}")
        return ", ".join(parts)


class _Header:
    """A bounded reader over the memory-mapped file; every read past the end is a truncation."""

    def __init__(self, data: mmap.mmap, path: str) -> None:
        self.data = data
        self.path = path
        self.size = len(data)
        self.pos = 0
        self.order = "<"

    def corrupt(self, message: str) -> FileProblem:
        return FileProblem(UNREADABLE.format(problem=message), self.path)

    def truncated(self, what: str) -> FileProblem:
        return FileProblem(TRUNCATED_INSIDE.format(size=self.size, part=what), self.path)

    def skip(self, n: int, what: str) -> None:
        if n < 0 or self.pos + n > self.size:
            raise self.truncated(what)
        self.pos += n

    def read(self, n: int, what: str) -> bytes:
        start = self.pos
        self.skip(n, what)
        return self.data[start : self.pos]

    def unpack(self, fmt: str, what: str) -> int | float | bool:
        start = self.pos
        self.skip(struct.calcsize(fmt), what)
        value: int | float | bool = struct.unpack_from(self.order + fmt, self.data, start)[0]
        return value

    def u32(self, what: str) -> int:
        return int(self.unpack("I", what))

    def u64(self, what: str) -> int:
        return int(self.unpack("Q", what))

    def string(self, what: str) -> str:
        raw = self.read(self.u64(what), what)
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError:
            raise self.corrupt(f"{what} is not UTF-8") from None

    def value_type(self, what: str) -> ValueType:
        code = self.u32(what)
        try:
            return gguf.GGUFValueType(code)
        except ValueError:
            raise self.corrupt(f"{what} has unknown value type {code}") from None

    def value(self, vtype: ValueType, what: str, depth: int = 0) -> Scalar | None:
        """A scalar or string; an array is stepped over (None): serve needs none of them."""
        if vtype == gguf.GGUFValueType.STRING:
            return self.string(what)
        if vtype == gguf.GGUFValueType.ARRAY:
            etype = self.value_type(what)
            count = self.u64(what)
            if etype == gguf.GGUFValueType.STRING:
                length = struct.Struct(self.order + "Q")
                for _ in range(count):  # the hot loop of a vocabulary: no method calls
                    if self.pos + 8 > self.size:
                        raise self.truncated(what)
                    self.pos += 8 + length.unpack_from(self.data, self.pos)[0]
                if self.pos > self.size:
                    raise self.truncated(what)
            elif etype == gguf.GGUFValueType.ARRAY:
                if depth >= MAX_ARRAY_NESTING:
                    raise self.corrupt(NESTED_TOO_DEEP.format(what=what, limit=MAX_ARRAY_NESTING))
                for _ in range(count):
                    self.value(etype, what, depth + 1)
            else:
                self.skip(count * struct.calcsize(_SCALAR_FORMATS[etype]), what)
            return None
        return self.unpack(_SCALAR_FORMATS[vtype], what)


def _tensor_nbytes(ggml_type: int, dims: list[int]) -> int | None:
    """Bytes of one tensor, or None for a type this gguf package does not know (a fork's own format)."""
    try:
        block, type_size = (int(x) for x in gguf.GGML_QUANT_SIZES[gguf.GGMLQuantizationType(ggml_type)])
    except (ValueError, KeyError):
        return None
    elements = 1
    for d in dims:
        elements *= d
    return elements // block * type_size


def read_header(path: str) -> tuple[dict[str, Scalar], dict[str, ValueType]]:
    """The scalar and string keys of ``path`` with their types; raises :class:`FileProblem` naming the file.

    Also walks the tensor infos and checks that the file is long enough for the data they describe, so an
    interrupted download is caught here, in one line, and not by llama-server minutes later. The file is
    memory-mapped: only the header's pages are ever read.
    """
    try:
        # O_NONBLOCK: a FIFO is named at once instead of waited on (it would never be a GGUF file)
        with os.fdopen(os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC), "rb") as fh:
            st = os.fstat(fh.fileno())
            if not stat.S_ISREG(st.st_mode):  # what serve.cli.check_paths says first, for a file read here directly
                raise FileProblem(NOT_A_FILE.format(kind=bounded.kind(st.st_mode), what=A_GGUF_FILE), path)
            if st.st_size == 0:
                raise FileProblem(IS_EMPTY, path)
            with mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as data:
                return _walk(_Header(data, path))
    except FileNotFoundError:
        raise FileProblem(NO_SUCH_FILE, path) from None
    except IsADirectoryError:
        raise FileProblem(NOT_A_FILE.format(kind=bounded.A_DIRECTORY, what=A_GGUF_FILE), path) from None
    except OSError as exc:
        raise FileProblem(f"cannot be read ({exc.strerror or exc})", path) from None


def _walk(h: _Header) -> tuple[dict[str, Scalar], dict[str, ValueType]]:
    magic = h.data[:4]
    if len(magic) < 4 or struct.unpack("<I", magic)[0] != gguf.GGUF_MAGIC:
        raise FileProblem(NOT_GGUF.format(start=magic), h.path)
    h.pos = 4
    version = h.u32(IN_HEADER)
    if version & 0xFFFF == 0:  # written big-endian (gguf's own test for byte order)
        h.order = ">"
        version = struct.unpack(">I", struct.pack("<I", version))[0]
    if version not in (2, 3):
        raise h.corrupt(UNKNOWN_VERSION.format(version=version))
    tensor_count = h.u64(IN_HEADER)
    kv_count = h.u64(IN_HEADER)
    values: dict[str, Scalar] = {}
    types: dict[str, ValueType] = {}
    for i in range(kv_count):
        key = h.string(IN_KEY.format(number=i + 1, count=kv_count))
        if key in types:
            raise h.corrupt(KEY_TWICE.format(key=key))
        value_part = IN_VALUE.format(key=key)
        vtype = h.value_type(value_part)
        value = h.value(vtype, value_part)
        types[key] = vtype
        if value is not None:
            values[key] = value
    data_end = 0
    for i in range(tensor_count):
        what = f"tensor info {i + 1} of {tensor_count}"
        h.string(what)
        n_dims = h.u32(what)
        if n_dims > 8:
            raise h.corrupt(f"{what} has {n_dims} dimensions")
        dims = [h.u64(what) for _ in range(n_dims)]
        ggml_type = h.u32(what)
        offset = h.u64(what)
        nbytes = _tensor_nbytes(ggml_type, dims)
        if nbytes is not None:
            data_end = max(data_end, offset + nbytes)
    alignment = values.get("general.alignment", DEFAULT_ALIGNMENT)
    if not isinstance(alignment, int) or isinstance(alignment, bool) or alignment <= 0:
        alignment = DEFAULT_ALIGNMENT
    data_start = -(-h.pos // alignment) * alignment
    if data_end and data_start + data_end > h.size:
        raise FileProblem(TRUNCATED_DATA.format(size=h.size, tensors=tensor_count, needed=data_start + data_end), h.path)
    return values, types


def _integer(path: str, key: str, values: Mapping[str, Scalar], types: Mapping[str, ValueType]) -> int | None:
    if key not in types:
        return None
    if types[key] not in _INTEGER_TYPES:
        raise FileProblem(NOT_AN_INTEGER.format(key=key, type=types[key].name.lower()), path)
    value = values[key]
    if isinstance(value, bool) or not isinstance(value, int):
        raise FileProblem(f"{key} holds {value!r}, expected an integer", path)
    return value


def read_facts(path: str) -> GGUFFacts:
    """The facts of the GGUF at ``path`` (as the user gave it; messages name it that way)."""
    values, types = read_header(path)
    arch = values.get("general.architecture")
    if "general.architecture" not in types:
        raise FileProblem(NO_ARCHITECTURE, path)
    if not isinstance(arch, str) or not arch:
        raise FileProblem("general.architecture is not a non-empty string", path)
    return GGUFFacts(
        path=path,
        architecture=arch,
        hadamard_stamp=_integer(path, HADAMARD_KEY, values, types),
        expert_count=_integer(path, f"{arch}.expert_count", values, types) or 0,
        block_size=_integer(path, f"{arch}.block_size", values, types),
        nextn_layers=_integer(path, f"{arch}.nextn_predict_layers", values, types),
    )
