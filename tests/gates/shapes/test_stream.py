"""The streamed GGUF writer: files gguf reads back as planned, the same bytes whatever the threads, whole or absent."""

from __future__ import annotations

from pathlib import Path

import gguf
import numpy as np
import pytest
from gguf.quants import dequantize

from ci.files import sha256_file
from ci.gates.shapes import blocks, layout, stream
from ci.gates.shapes.bandwidth import read_table
from ci.gates.shapes.blocks import F32
from ci.gates.shapes.vocab import add_real_vocab, real_vocab
from tests.gates.shapes.mini import MINI

SILENT = (0, 1, 2, 700)


def plans() -> list[layout.TensorPlan]:
    return layout.qwen35_plan(MINI.moe, MINI.vocab_size, "Q4_0", "Q6_K", SILENT)


def write(path: Path, jobs: int = 2, seed: tuple[int, ...] = (1,)) -> Path:
    v = real_vocab(MINI.vocab_size)
    return stream.write_gguf(path, "qwen35moe", "mini", 2, lambda w: add_real_vocab(w, v), plans(), seed, jobs)


@pytest.fixture
def small_chunks(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(stream, "CHUNK_BYTES", 4096)  # many chunks per tensor: the seeding per chunk is exercised


def test_gguf_reads_back_every_tensor_as_planned(tmp_path: Path, small_chunks: None) -> None:
    path = write(tmp_path / "m.gguf")
    reader = gguf.GGUFReader(str(path))
    assert reader.fields["general.architecture"].contents() == "qwen35moe"
    tensors = {t.name: t for t in reader.tensors}
    for p in plans():
        t = tensors[p.name]
        assert t.tensor_type.name == p.type, p.name
        assert tuple(int(n) for n in t.shape) == tuple(reversed(p.shape)), p.name
        if p.type == F32:
            values = np.asarray(t.data, dtype=np.float32).reshape(-1)
            if p.fill is not None:
                assert np.all(values == p.fill), p.name
            assert np.isfinite(values).all()
        else:
            w = dequantize(np.asarray(t.data).reshape(-1), t.tensor_type).reshape(-1, p.row)
            live = np.delete(w, list(p.zero_rows), axis=0) if p.zero_rows else w
            assert np.isfinite(w).all(), p.name
            assert live.std() == pytest.approx(p.std, rel=0.1), p.name
            assert all(not w[r].any() for r in p.zero_rows), p.name


def test_the_same_bytes_whatever_the_threads_and_others_for_another_seed(tmp_path: Path, small_chunks: None) -> None:
    a = sha256_file(write(tmp_path / "a.gguf", jobs=1))
    assert sha256_file(write(tmp_path / "b.gguf", jobs=4)) == a
    assert sha256_file(write(tmp_path / "c.gguf", jobs=2, seed=(2,))) != a


def test_a_failure_mid_file_leaves_the_old_file_and_no_leftover(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, small_chunks: None) -> None:
    path = write(tmp_path / "m.gguf")
    before = sha256_file(path)
    calls = 0
    real_blocks = blocks.random_blocks

    def failing(*args: object, **kwargs: object) -> np.ndarray:
        nonlocal calls
        calls += 1
        if calls == 5:
            raise OSError("disk full")
        return real_blocks(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(stream, "random_blocks", failing)
    with pytest.raises(OSError, match="disk full"):
        write(path, seed=(9,))
    assert sha256_file(path) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.gguf"]


def test_a_link_at_the_path_is_replaced_not_written_through(tmp_path: Path) -> None:
    victim = tmp_path / "victim"
    victim.write_text("keep")
    (tmp_path / "m.gguf").symlink_to(victim)
    path = write(tmp_path / "m.gguf")
    assert not path.is_symlink()
    assert victim.read_text() == "keep"


def test_the_header_reader_agrees_with_gguf(tmp_path: Path) -> None:
    path = write(tmp_path / "m.gguf")
    table = read_table(path)
    reader = gguf.GGUFReader(str(path))
    assert [(t.name, t.ne, t.type, t.nbytes) for t in table.tensors] == [
        (t.name, tuple(int(n) for n in t.shape), int(t.tensor_type), int(t.n_bytes)) for t in reader.tensors
    ]
    scalars = {name: f.contents() for name, f in reader.fields.items() if f.types[0] != gguf.GGUFValueType.ARRAY and not name.startswith("GGUF.")}
    assert table.keys == scalars
    assert table.keys["general.architecture"] == "qwen35moe"
    assert table.keys["tokenizer.ggml.model"] == "llama"
