"""The real-size vocabulary, its tokenizer (llama.cpp's SPM, counted here; the slow tier holds it to the server's) and
prompts of exactly N tokens."""

from __future__ import annotations

import pytest

from ci.gates.shapes import vocab as V
from ci.gates.shapes.spec import VOCAB_SIZE
from ci.gates.tiny.writer import BYTE, CONTROL, NORMAL, SPACE, vocab
from tests.support.messages import said


@pytest.fixture(scope="module")
def real() -> V.RealVocab:
    return V.real_vocab(VOCAB_SIZE)


def test_the_vocabulary_is_the_real_size_and_grows_the_tiny_one(real: V.RealVocab) -> None:
    tiny = vocab()
    assert len(real) == VOCAB_SIZE
    assert real.vocab.tokens[: len(tiny)] == tiny.tokens
    assert real.vocab.types[: len(tiny)] == tiny.types
    assert len(set(real.vocab.tokens)) == VOCAB_SIZE
    assert all(real.vocab.tokens.count(c) == 1 for c in V.CHAT_CONTROLS)
    assert {f"<0x{b:02X}>" for b in range(256)} <= set(real.vocab.tokens)  # SPM's byte fallback has a token for any byte


def test_no_piece_reaches_across_a_space(real: V.RealVocab) -> None:
    """What makes prompt_text's counting exact: every normal token of more than one character starts with the space
    and holds no other, or is made of characters no ASCII text has."""
    for token, kind in zip(real.vocab.tokens, real.vocab.types, strict=True):
        if kind != NORMAL or len(token) < 2:
            continue
        assert (token[0] == SPACE and SPACE not in token[1:]) or all(ord(c) >= 0x4E00 for c in token), token


def test_every_token_but_the_silent_ones_is_valid_text(real: V.RealVocab) -> None:
    silent = set(real.silent())
    assert {i for i, k in enumerate(real.vocab.types) if k in (CONTROL, BYTE)} <= silent
    for i, token in enumerate(real.vocab.tokens):
        if i not in silent:
            token.encode("utf-8")  # a str always encodes: no surrogate halves among them


def test_the_tokenizer_counts_the_projects_prompts_as_the_tiny_vocabulary_does(real: V.RealVocab) -> None:
    tok = V.Tokenizer(real)
    assert [real.vocab.tokens[i] for i in tok.encode("the cat and the self")] == ["t", "h", "e", SPACE, "c", "a", "t", SPACE + "and", SPACE + "the", SPACE + "self"]
    assert [real.vocab.tokens[i] for i in tok.encode("a\tb\n")] == ["a", "<0x09>", "b", "<0x0A>"]
    assert [real.vocab.tokens[i] for i in tok.encode("é")] == ["<0xC3>", "<0xA9>"]  # byte fallback
    assert tok.encode("<|im_start|>user<|im_end|>") == [real.id(V.IM_START), *tok.encode("user"), real.id(V.IM_END)]


@pytest.mark.parametrize("n", [0, 1, 2, 17, 1838, 16384])
def test_a_prompt_of_n_tokens_is_n_tokens(real: V.RealVocab, n: int) -> None:
    text = V.prompt_text(n, real)
    assert V.Tokenizer(real).count(text) == n
    assert V.prompt_text(n, real) == text  # the same text each time


def test_a_chat_prompt_of_n_tokens_counts_the_template(real: V.RealVocab) -> None:
    content = V.chat_prompt_text(1838, real)
    rendered = V.render_chat(content)
    assert rendered.startswith("<|im_start|>user\n" + content + "<|im_end|>\n")
    assert rendered.endswith("<|im_start|>assistant\n<think>\n\n</think>\n\n")
    assert V.Tokenizer(real).count(rendered) == 1838
    assert len(content) > 1838  # about a token a character: words of the prompts are rarely the vocabulary's


def test_a_chat_prompt_shorter_than_its_template_is_refused(real: V.RealVocab) -> None:
    overhead = V.chat_overhead(real)
    with pytest.raises(ValueError, match="the template alone takes") as err:
        V.chat_prompt_text(overhead - 1, real)
    assert said(V.TOO_SHORT, str(err.value), tokens=overhead - 1, overhead=overhead)
