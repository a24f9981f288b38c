"""The tiny models' one vocabulary and one GGUF writer: every tiny model, llama or qwen35 or DFlash, carries the same
vocabulary and is written the same way, whole or not at all.

Every token decodes to valid UTF-8 on its own: the ROCmFPX fork answers HTTP 500 for output that is not. The
tokenizer is SentencePiece-style ("llama"): one normal token per printable ASCII character, "▁" for the space, byte
tokens only for tab and newline, and a few words whose prefixes are tokens too, so that the tokenizer's bigram merges
reach them from prompt text.
"""

from __future__ import annotations

import contextlib
import logging
import os
import tempfile
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ci.files import sha256_file

SPACE = "\u2581"  # SentencePiece's visible space
WORDS = ("the", "and", "of", "to", "in", "is", "def", "return", "for", "if", "self", "print", "import")
CONTROLS = ("<unk>", "<s>", "</s>")
UNK_ID, BOS_ID, EOS_ID = 0, 1, 2

# Messages, shared with the tests that match on them (tests/support/messages.py)
MODEL_FILE = "{name}: {megabytes:.2f} MB, sha256 {sha256}"

# gguf.TokenType values (llama.cpp's LLAMA_TOKEN_TYPE_*); spelled out so the vocab is readable data
NORMAL, UNKNOWN, CONTROL, BYTE = 1, 2, 3, 6


@dataclass(frozen=True)
class Vocab:
    tokens: tuple[str, ...]
    types: tuple[int, ...]
    scores: tuple[float, ...]

    def __len__(self) -> int:
        return len(self.tokens)


def vocab() -> Vocab:
    """Controls, tab and newline as byte tokens, printable ASCII (space as ▁), then the words and their prefixes."""
    tokens: list[str] = list(CONTROLS)
    types: list[int] = [UNKNOWN, CONTROL, CONTROL]
    for b in (0x09, 0x0A):
        tokens.append(f"<0x{b:02X}>")
        types.append(BYTE)
    for c in range(0x20, 0x7F):
        tokens.append(SPACE if c == 0x20 else chr(c))
        types.append(NORMAL)
    singles = len(tokens)
    seen = set(tokens)
    for word in WORDS:
        piece = SPACE + word
        for end in range(2, len(piece) + 1):
            if piece[:end] not in seen:
                seen.add(piece[:end])
                tokens.append(piece[:end])
                types.append(NORMAL)
    # SentencePiece merges the highest-scoring pair first: longer pieces score higher, so words win over letters.
    scores = [0.0] * singles + [float(len(t)) for t in tokens[singles:]]
    return Vocab(tuple(tokens), tuple(types), tuple(scores))


def add_vocab(writer: Any, eos_id: int = EOS_ID) -> None:
    """The vocabulary's keys, the same in every tiny model (``eos_id``: the model's end-of-sequence token)."""
    v = vocab()
    writer.add_vocab_size(len(v))
    writer.add_tokenizer_model("llama")
    writer.add_token_list(list(v.tokens))
    writer.add_token_scores(list(v.scores))
    writer.add_token_types(list(v.types))
    writer.add_bos_token_id(BOS_ID)
    writer.add_eos_token_id(eos_id)
    writer.add_unk_token_id(UNK_ID)
    writer.add_add_bos_token(True)
    writer.add_add_eos_token(False)


def add_block_keys(writer: Any, arch: str, *, context: int, dim: int, blocks: int, ff: int, heads: int, heads_kv: int, head_dim: int, rope_dim: int) -> None:
    """The keys every tiny transformer's blocks share (``arch``'s context, widths, heads, norm epsilon and rotary
    width), in the order the writers have always written them: a file's bytes do not move."""
    writer.add_uint32(f"{arch}.context_length", context)
    writer.add_uint32(f"{arch}.embedding_length", dim)
    writer.add_uint32(f"{arch}.block_count", blocks)
    writer.add_uint32(f"{arch}.feed_forward_length", ff)
    writer.add_uint32(f"{arch}.attention.head_count", heads)
    writer.add_uint32(f"{arch}.attention.head_count_kv", heads_kv)
    writer.add_uint32(f"{arch}.attention.key_length", head_dim)
    writer.add_uint32(f"{arch}.attention.value_length", head_dim)
    writer.add_float32(f"{arch}.attention.layer_norm_rms_epsilon", 1e-6)
    writer.add_uint32(f"{arch}.rope.dimension_count", rope_dim)


@contextlib.contextmanager
def gguf_model(path: Path, architecture: str, name: str, tensors: Sequence[tuple[str, np.ndarray]]) -> Iterator[Any]:
    """A GGUF writer for ``path``: the block adds the keys, then the tensors are written and the file takes its place.

    The file is written in a fresh folder of its own beside ``path`` (``mkdtemp``: a name nobody could have planted a
    link at) and renamed over ``path``, which replaces a link there instead of writing through it; a failure leaves
    ``path`` as it was."""
    import gguf

    logging.getLogger("gguf").setLevel(logging.WARNING)  # gguf logs every file it writes at INFO
    path.parent.mkdir(parents=True, exist_ok=True)
    folder = Path(tempfile.mkdtemp(prefix=f".{path.name}.", dir=path.parent))
    try:
        tmp = folder / path.name
        writer = gguf.GGUFWriter(str(tmp), architecture)
        writer.add_name(name)
        writer.add_file_type(gguf.LlamaFileType.ALL_F32)
        yield writer
        for tensor_name, array in tensors:
            writer.add_tensor(tensor_name, array)
        writer.write_header_to_file()
        writer.write_kv_data_to_file()
        writer.write_tensors_to_file()
        writer.close()
        os.replace(tmp, path)
    finally:
        for leftover in folder.iterdir():
            leftover.unlink()
        folder.rmdir()


def perturbed(weights: Sequence[tuple[str, np.ndarray]], seed: int, perturb: float) -> list[tuple[str, np.ndarray]]:
    """Each tensor plus Gaussian noise of ``perturb`` times its own std (seeded): a near drafter of a target."""
    noise = np.random.default_rng(seed)
    out = []
    for name, array in weights:
        std = float(array.std())
        if std > 0:
            array = (array + noise.normal(0.0, perturb * std, size=array.shape)).astype(np.float32)
        out.append((name, array))
    return out


def describe_file(path: Path) -> str:
    """One model file's line: its name, size and sha256 (the first 16 digits)."""
    return MODEL_FILE.format(name=path.name, megabytes=path.stat().st_size / 1e6, sha256=sha256_file(path)[:16])
