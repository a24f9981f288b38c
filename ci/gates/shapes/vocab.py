"""The real-shaped models' vocabulary: the tiny models' one (:mod:`ci.gates.tiny.writer`) grown to the real size, a
chat template, and a tokenizer that counts as llama.cpp does, so a prompt of exactly N tokens can be written.

No space prefix and no BOS (as Qwen's tokenizer), so counts add up across the chat template's pieces; every
multi-character token but the fillers starts with "▁" and has no other, so merges never cross a space and each word
is tokenized on its own (:func:`prompt_text` builds on that, and checks the whole text anyway).
"""

from __future__ import annotations

import functools
import heapq
from collections.abc import Sequence
from dataclasses import dataclass
from importlib import resources
from typing import Any

from ci.gates.tiny.writer import BYTE, CONTROL, NORMAL, SPACE, UNKNOWN, Vocab, vocab

IM_START, IM_END, THINK, END_THINK, MASK = "<|im_start|>", "<|im_end|>", "<think>", "</think>", "<|MASK|>"
CHAT_CONTROLS = (IM_START, IM_END, THINK, END_THINK, MASK)
FILLER_FROM, FILLER_TO = 0x4E00, 0x9FFF  # CJK Unified Ideographs

# A ChatML template whose generation prompt closes an empty think block when the request says
# chat_template_kwargs.enable_thinking = false (the seeds' bench: chat completions with thinking off), as Qwen's does.
CHAT_TEMPLATE = (
    "{%- for message in messages %}"
    "{{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>\\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}"
    "{{- '<|im_start|>assistant\\n' }}"
    "{%- if enable_thinking is defined and enable_thinking is false %}"
    "{{- '<think>\\n\\n</think>\\n\\n' }}"
    "{%- endif %}"
    "{%- endif %}"
)

# Messages, shared with the tests that match on them (tests/support/messages.py)
TOO_SHORT = "a chat prompt of {tokens} tokens: the template alone takes {overhead}"


def render_chat(content: str) -> str:
    """What :data:`CHAT_TEMPLATE` renders for one user message, thinking off, with the generation prompt."""
    return f"{IM_START}user\n{content}{IM_END}\n{IM_START}assistant\n{THINK}\n\n{END_THINK}\n\n"


@dataclass(frozen=True, repr=False)
class RealVocab:
    vocab: Vocab

    def __repr__(self) -> str:
        return f"RealVocab({len(self)} tokens)"

    def __len__(self) -> int:
        return len(self.vocab)

    def id(self, token: str) -> int:
        return self.vocab.tokens.index(token)

    def silent(self) -> tuple[int, ...]:
        """Token ids the output head never favours: every token that is not a normal one (alone, a byte of 0x80 or above
        is invalid UTF-8, and the fork answers 500 for such output)."""
        return tuple(i for i, t in enumerate(self.vocab.types) if t != NORMAL)


def _fillers(count: int) -> list[str]:
    chars = [chr(c) for c in range(FILLER_FROM, FILLER_TO + 1)]
    out = chars[:count]
    for a in chars:
        if len(out) >= count:
            break
        out += [a + b for b in chars[: count - len(out)]]
    return out


@functools.cache
def real_vocab(size: int) -> RealVocab:
    """The vocabulary of ``size`` tokens: the tiny models' first (so the project's prompts tokenize alike in both), the
    chat's control tokens, a byte token for every byte (the SPM tokenizer's fallback for a character it lacks), then
    fillers up to ``size``: CJK characters and pairs of them, valid UTF-8 each, that no ASCII text can reach."""
    base = vocab()
    tokens, types, scores = list(base.tokens), list(base.types), list(base.scores)
    for t in CHAT_CONTROLS:
        tokens.append(t)
        types.append(CONTROL)
        scores.append(0.0)
    have = set(tokens)
    for b in range(256):
        t = f"<0x{b:02X}>"
        if t not in have:
            tokens.append(t)
            types.append(BYTE)
            scores.append(0.0)
    if len(tokens) > size:
        raise ValueError(f"a vocabulary of {size} tokens cannot hold the {len(tokens)} the models need")
    fill = _fillers(size - len(tokens))
    tokens += fill
    types += [NORMAL] * len(fill)
    scores += [-1.0] * len(fill)  # below every piece ASCII text can form: no merge ever prefers one
    return RealVocab(Vocab(tuple(tokens), tuple(types), tuple(scores)))


def add_real_vocab(writer: Any, v: RealVocab) -> None:
    """The vocabulary's keys: SPM ("llama"), no BOS, no dummy space prefix, <|im_end|> ends a turn, the template."""
    writer.add_vocab_size(len(v))
    writer.add_tokenizer_model("llama")
    writer.add_token_list(list(v.vocab.tokens))
    writer.add_token_scores(list(v.vocab.scores))
    writer.add_token_types(list(v.vocab.types))
    writer.add_bos_token_id(v.id("<s>"))
    writer.add_eos_token_id(v.id(IM_END))
    writer.add_unk_token_id(v.id("<unk>"))
    writer.add_add_bos_token(False)
    writer.add_add_eos_token(False)
    writer.add_add_space_prefix(False)
    writer.add_chat_template(CHAT_TEMPLATE)


class Tokenizer:
    """llama.cpp's SPM tokenizer (``src/llama-vocab.cpp``: the special-token partition, then
    ``llm_tokenizer_spm_session``'s bigram merges by score, then byte fallback), for this vocabulary: no BOS, no space
    prefix. It counts; the slow tier holds it to the real server's /tokenize."""

    def __init__(self, v: RealVocab) -> None:
        self.ids = {t: i for i, t in enumerate(v.vocab.tokens)}
        self.scores = v.vocab.scores
        special = [t for t, k in zip(v.vocab.tokens, v.vocab.types, strict=True) if k in (CONTROL, UNKNOWN)]
        self.specials = sorted(special, key=len, reverse=True)

    def encode(self, text: str) -> list[int]:
        fragments: list[str | int] = [text]
        for s in self.specials:
            split: list[str | int] = []
            for f in fragments:
                if isinstance(f, int):
                    split.append(f)
                    continue
                parts = f.split(s)
                for k, part in enumerate(parts):
                    if k:
                        split.append(self.ids[s])
                    if part:
                        split.append(part)
            fragments = split
        out: list[int] = []
        for f in fragments:
            out += [f] if isinstance(f, int) else self._spm(f.replace(" ", SPACE))
        return out

    def _spm(self, text: str) -> list[int]:
        n = len(text)
        sym = list(text)  # each symbol's text; "" once merged into its left neighbour
        prev = list(range(-1, n - 1))
        nxt = [i + 1 if i + 1 < n else -1 for i in range(n)]
        heap: list[tuple[float, int, int, int]] = []
        merged: dict[str, tuple[str, str]] = {}

        def bigram(left: int, right: int) -> None:
            if left < 0 or right < 0:
                return
            piece = sym[left] + sym[right]
            token = self.ids.get(piece)
            if token is None:
                return
            heapq.heappush(heap, (-self.scores[token], left, right, len(piece)))
            merged[piece] = (sym[left], sym[right])

        for i in range(1, n):
            bigram(i - 1, i)
        while heap:
            _, left, right, size = heapq.heappop(heap)
            if not sym[left] or not sym[right] or len(sym[left]) + len(sym[right]) != size:
                continue
            sym[left] += sym[right]
            sym[right] = ""
            nxt[left] = nxt[right]
            if nxt[right] >= 0:
                prev[nxt[right]] = left
            bigram(prev[left], left)
            bigram(left, nxt[left])
        out: list[int] = []

        def resegment(piece: str) -> None:
            token = self.ids.get(piece)
            if token is not None:
                out.append(token)
            elif piece in merged:
                a, b = merged[piece]
                resegment(a)
                resegment(b)
            else:
                out.extend(self.ids[f"<0x{byte:02X}>"] for byte in piece.encode())

        i = 0 if n else -1
        while i != -1:
            resegment(sym[i])
            i = nxt[i]
        return out

    def count(self, text: str) -> int:
        return len(self.encode(text))


@functools.cache
def _words() -> tuple[str, ...]:
    """The committed prompts' words (ci/prompts, by file name), the text prompts of N tokens are made of."""
    files = sorted((f for f in resources.files("ci").joinpath("prompts").iterdir() if f.name.endswith(".txt")), key=lambda f: f.name)
    return tuple(w for f in files for w in f.read_text(encoding="utf-8").split())


PAD = "."  # one token wherever it goes: no piece of more than one character holds it


def prompt_text(tokens: int, v: RealVocab, words: Sequence[str] | None = None) -> str:
    """Text that tokenizes to exactly ``tokens`` tokens: the committed prompts' words, over and over, then ``.``s."""
    tok = Tokenizer(v)
    pool = tuple(words) if words is not None else _words()
    parts: list[str] = []
    have = 0
    k = 0
    while True:
        word = pool[k % len(pool)]
        cost = tok.count(word if not parts else SPACE + word)
        if have + cost > tokens:
            break
        parts.append(word)
        have += cost
        k += 1
    text = " ".join(parts) + PAD * (tokens - have)
    if tok.count(text) != tokens:  # the words were counted one by one: hold the whole text to it
        raise AssertionError(f"prompt_text({tokens}): the text tokenizes to {tok.count(text)}")
    return text


def chat_overhead(v: RealVocab) -> int:
    """The tokens the chat template adds around one user message (thinking off)."""
    return Tokenizer(v).count(render_chat(""))


def chat_prompt_text(tokens: int, v: RealVocab) -> str:
    """A user message whose chat prompt (:data:`CHAT_TEMPLATE`, thinking off) is exactly ``tokens`` tokens."""
    overhead = chat_overhead(v)
    if tokens < overhead:
        raise ValueError(TOO_SHORT.format(tokens=tokens, overhead=overhead))
    content = prompt_text(tokens - overhead, v)
    total = Tokenizer(v).count(render_chat(content))
    if total != tokens:
        raise AssertionError(f"chat_prompt_text({tokens}): the chat prompt tokenizes to {total}")
    return content
