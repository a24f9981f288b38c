"""GGUF header facts: every malformed file gets one line naming it, and the reader agrees with gguf.GGUFReader."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import gguf
import numpy as np
import pytest

from serve import bounded, errors, facts, route
from serve.errors import AT
from serve.facts import GGUFFacts, read_facts, read_header
from tests.support.gguf_files import KINDS, make, write_gguf

ErrorFn = Callable[..., tuple[int, str]]
FileFn = Callable[[str], str]


def _reader_scalars(path: Path) -> dict[str, object]:
    """The scalar and string keys as gguf.GGUFReader decodes them (the reference)."""
    out: dict[str, object] = {}
    for key, field in gguf.GGUFReader(path).fields.items():
        if key.startswith("GGUF.") or field.types[0] == gguf.GGUFValueType.ARRAY:
            continue
        part = field.parts[field.data[0]]
        out[key] = bytes(part).decode() if field.types[0] == gguf.GGUFValueType.STRING else part[0].item()
    return out


def _patch(path: Path, old: bytes, new: bytes) -> None:
    data = path.read_bytes()
    assert len(old) == len(new)
    assert data.count(old) == 1
    path.write_bytes(data.replace(old, new))


# -- the facts ------------------------------------------------------------------------------------------------


def test_facts_of_the_route_files(tmp_path: Path) -> None:
    assert read_facts(make("rotated-moe", tmp_path)) == GGUFFacts(
        path="rotated-moe.gguf", architecture="qwen3moe", hadamard_stamp=32, expert_count=128, block_size=None, nextn_layers=None
    )
    dense = read_facts(make("rotated-dense", tmp_path))
    assert (dense.hadamard_q4_0, dense.moe) == (True, False)
    drafter = read_facts(make("dflash-b8", tmp_path))
    assert (drafter.architecture, drafter.block_size) == ("dflash", 8)
    plain = read_facts(make("plain", tmp_path))
    assert (plain.hadamard_stamp, plain.hadamard_q4_0) == (None, False)
    assert read_facts(make("mtp-head", tmp_path)).nextn_layers == 1


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_header_agrees_with_gguf_reader(kind: str, tmp_path: Path) -> None:
    values, _ = read_header(make(kind, tmp_path))
    assert values == _reader_scalars(tmp_path / f"{kind}.gguf")


@pytest.mark.parametrize("endianess", [gguf.GGUFEndian.LITTLE, gguf.GGUFEndian.BIG])
def test_header_steps_over_arrays_and_tensors_like_gguf_reader(endianess: gguf.GGUFEndian, tmp_path: Path) -> None:
    """A vocabulary (string array), token types, a nested array and two tensors before and after the keys serve reads."""
    path = tmp_path / "vocab.gguf"
    writer = gguf.GGUFWriter(str(path), "qwen3moe", endianess=endianess)
    writer.add_token_list([f"tok{i}" for i in range(3000)])
    writer.add_token_types([1] * 3000)
    writer.add_array("test.nested", [[1, 2], [3]])
    writer.add_uint32("qwen3moe.expert_count", 64)
    writer.add_float32("test.rope_scale", 0.5)
    writer.add_bool("test.flag", True)
    writer.add_uint32("onebit.hadamard_q4_0", 32)
    writer.add_tensor("token_embd.weight", np.ones((8, 32), dtype=np.float32))
    writer.add_tensor("output_norm.weight", np.ones((32,), dtype=np.float16))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    values, _ = read_header(str(path))
    assert values == _reader_scalars(path)
    facts = read_facts(str(path))
    assert (facts.architecture, facts.expert_count, facts.hadamard_q4_0) == ("qwen3moe", 64, True)


# -- malformed files: one line naming the file ----------------------------------------------------------------


def test_missing_model(serve_error: ErrorFn) -> None:
    assert serve_error("-m", "Qwen3.8-27B-H32.gguf") == (2, AT.format(where="-m Qwen3.8-27B-H32.gguf", problem=errors.NO_SUCH_FILE))


def test_missing_drafter_is_named(gguf_file: FileFn, serve_error: ErrorFn) -> None:
    assert serve_error("-m", gguf_file("plain"), "--dflash", "DFlash2.gguf") == (
        2,
        AT.format(where="--dflash DFlash2.gguf", problem=errors.NO_SUCH_FILE),
    )


def test_empty_file(tmp_path: Path, serve_error: ErrorFn) -> None:
    (tmp_path / "empty.gguf").write_bytes(b"")
    assert serve_error("-m", "empty.gguf") == (2, AT.format(where="empty.gguf", problem=facts.IS_EMPTY))


def test_not_a_gguf_file(tmp_path: Path, serve_error: ErrorFn) -> None:
    (tmp_path / "model.safetensors").write_bytes(b'{"__metadata__": {}}' + bytes(64))
    assert serve_error("-m", "model.safetensors") == (2, AT.format(where="model.safetensors", problem=facts.NOT_GGUF.format(start=b'{"__')))


def test_directory(tmp_path: Path, serve_error: ErrorFn) -> None:
    (tmp_path / "models").mkdir()
    assert serve_error("-m", "models") == (2, AT.format(where="-m models", problem=errors.NOT_A_FILE.format(kind=bounded.A_DIRECTORY, what=errors.A_GGUF_FILE)))


@pytest.mark.parametrize(
    ("cut", "inside"),
    [
        (3, facts.IN_HEADER),  # inside the magic: the first 4 bytes are not all there
        (6, facts.IN_HEADER),
        (20, facts.IN_HEADER),
        (30, facts.IN_KEY.format(number=1, count=4)),
        (60, facts.IN_VALUE.format(key="general.architecture")),
        (-2, facts.IN_VALUE.format(key="onebit.hadamard_q4_0")),  # -2: two bytes short of the last key's end
    ],
)
def test_truncated_header(cut: int, inside: str, tmp_path: Path, serve_error: ErrorFn) -> None:
    full = (tmp_path / make("rotated-moe", tmp_path)).read_bytes()
    if cut < 0:  # the writer pads the key-value section; cut inside the last value, not the padding
        last = full.index(b"onebit.hadamard_q4_0") + len("onebit.hadamard_q4_0") + 4 + 4
        cut += last
    data = full[:cut]
    (tmp_path / "cut.gguf").write_bytes(data)
    code, line = serve_error("-m", "cut.gguf")
    assert code == 2
    if cut == 3:
        assert line == AT.format(where="cut.gguf", problem=facts.NOT_GGUF.format(start=b"GGU"))
    else:
        assert line == AT.format(where="cut.gguf", problem=facts.TRUNCATED_INSIDE.format(size=len(data), part=inside))


def test_truncated_tensor_data(tmp_path: Path, serve_error: ErrorFn) -> None:
    """An interrupted download: the header is whole, the tensor data is not."""
    path = write_gguf(
        tmp_path / "partial.gguf", "qwen35", {"onebit.hadamard_q4_0": 32}, {"token_embd.weight": np.ones((64, 64), dtype=np.float32)}
    )
    full = path.read_bytes()
    path.write_bytes(full[:-100])
    assert serve_error("-m", "partial.gguf") == (
        2,
        AT.format(where="partial.gguf", problem=facts.TRUNCATED_DATA.format(size=len(full) - 100, tensors=1, needed=len(full))),
    )


def test_whole_file_with_a_tensor_reads(tmp_path: Path) -> None:
    path = write_gguf(tmp_path / "whole.gguf", "qwen35", {}, {"token_embd.weight": np.ones((64, 64), dtype=np.float32)})
    assert read_facts(str(path)).architecture == "qwen35"


def test_unsupported_version(tmp_path: Path, serve_error: ErrorFn) -> None:
    path = tmp_path / make("plain", tmp_path)
    data = bytearray(path.read_bytes())
    data[4:8] = (1).to_bytes(4, "little")
    path.write_bytes(bytes(data))
    assert serve_error("-m", "plain.gguf") == (
        2,
        AT.format(where="plain.gguf", problem=facts.UNREADABLE.format(problem=facts.UNKNOWN_VERSION.format(version=1))),
    )


def test_key_twice(tmp_path: Path, serve_error: ErrorFn) -> None:
    path = write_gguf(tmp_path / "twice.gguf", "qwen3moe", {"qwen3moe.expert_count": 128, "qwen3moe.expert_couns": 8})
    _patch(path, b"expert_couns", b"expert_count")
    assert serve_error("-m", "twice.gguf") == (
        2,
        AT.format(where="twice.gguf", problem=facts.UNREADABLE.format(problem=facts.KEY_TWICE.format(key="qwen3moe.expert_count"))),
    )


def test_no_architecture(tmp_path: Path, serve_error: ErrorFn) -> None:
    path = write_gguf(tmp_path / "noarch.gguf", "qwen35")
    _patch(path, b"general.architecture", b"general.architecturX")
    assert serve_error("-m", "noarch.gguf") == (2, AT.format(where="noarch.gguf", problem=facts.NO_ARCHITECTURE))


def test_expert_count_not_an_integer(tmp_path: Path, serve_error: ErrorFn) -> None:
    write_gguf(tmp_path / "str.gguf", "qwen3moe", {"qwen3moe.expert_count": "128"})
    assert serve_error("-m", "str.gguf") == (
        2,
        AT.format(where="str.gguf", problem=facts.NOT_AN_INTEGER.format(key="qwen3moe.expert_count", type="string")),
    )


def test_drafter_that_is_not_dflash_is_refused(gguf_file: FileFn, serve_error: ErrorFn) -> None:
    assert serve_error("-m", gguf_file("rotated-dense"), "--dflash", gguf_file("mtp-head")) == (
        4,
        AT.format(where="mtp-head.gguf", problem=route.NOT_DFLASH.format(architecture="qwen35", expected="dflash", hint=route.MTP_HINT)),
    )


# llama-server stops on such a head ("context type MTP requested but model doesn't contain MTP layers", upstream
# 11434's CPU server with --spec-type draft-mtp -md on a qwen35 target): the launcher says so before it starts one
@pytest.mark.parametrize(
    ("kind", "key", "value", "hint"),
    [
        ("plain", "qwen35.nextn_predict_layers", route.ABSENT, ""),
        ("no-mtp-layers", "qwen35.nextn_predict_layers", "0", ""),
        ("dflash-b8", "dflash.nextn_predict_layers", route.ABSENT, route.DFLASH_HINT),
    ],
)
def test_mtp_head_without_mtp_layers_is_refused(kind: str, key: str, value: str, hint: str, gguf_file: FileFn, serve_error: ErrorFn) -> None:
    assert serve_error("-m", gguf_file("plain"), "--mtp", gguf_file(kind)) == (
        4,
        AT.format(where=f"{kind}.gguf", problem=route.NO_MTP_LAYERS.format(key=key, value=value, hint=hint)),
    )
