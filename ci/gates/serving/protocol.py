"""How a measurement asks a llama-server: the seeds' chat protocol (the engine's tools/bench.py), one implementation
for ``nox -s bench`` and the perf gate's real-shaped set, and the ``/completion`` protocol the tiny and release sets
keep (a random model has no chat template to speak of, and only ``ignore_eos`` makes every decode the same length).

The request bodies are pure. :func:`chat_prompt` makes a user message whose chat prompt is N tokens by the server's
own template (thinking off) and tokenizer, through its ``/apply-template``, ``/tokenize`` and ``/detokenize``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ci.errors import ConfigError, ServerFailed

SEEDS, COMPLETION = "seeds", "completion"
PROTOCOLS = {  # each protocol's requests, in the words every figure it makes carries
    SEEDS: "seeds' chat protocol: /v1/chat/completions, thinking off, prompt cache off, temperature 0",
    COMPLETION: "/completion of token ids, greedy, ignore_eos, prompt cache off",
}
PATHS = {SEEDS: "/v1/chat/completions", COMPLETION: "/completion"}

# the seeds' protocol (engine tools/bench.py, docs/bench.md there): what each request asks
SEED_PROMPT_TOKENS = 1838  # "the 1,838-token prompt" of engine #194 and #229, its chat template counted in
DECODE_TOKENS = 256
PROMPT_MAX_TOKENS = 8  # the seeds' prompt request generates a few tokens; its prompt timing is what counts
WARMUP_MAX_TOKENS = 4  # the engine's warm-up after each server start: a 4-token answer
DECODE_PROMPTS = {  # the seeds' decode prompts, by their names there
    "code": "Write a Python function that parses an ISO-8601 timestamp without using datetime, with tests.",
    "prose": "Explain how a B-tree insert works, step by step.",
    "short": "Translate to French: The quick brown fox jumps over the lazy dog, and then it goes home to sleep.",
}
THINKING_OFF = {"enable_thinking": False}
TRIES = 8  # rounds of re-measuring the whole chat prompt before the nearest count is taken

# Messages, shared with the tests that match on them (tests/support/messages.py)
TOO_SHORT = "a chat prompt of {tokens} tokens: the chat template alone takes {overhead}; ask for more tokens"
NO_TOKENS = "{server} server: POST {path} gave no {what}"


def chat_body(content: str, max_tokens: int) -> dict[str, Any]:
    """One request of the seeds' protocol."""
    return {
        "messages": [{"role": "user", "content": content}],
        "max_tokens": max_tokens,
        "temperature": 0,
        "cache_prompt": False,
        "chat_template_kwargs": dict(THINKING_OFF),
    }


def warmups(prompt: str | None, tokens: int = WARMUP_MAX_TOKENS) -> list[tuple[str, int]]:
    """A fresh server's unmeasured first requests, as (user message, max_tokens): a decode of ``tokens`` on the short
    prompt (the engine's was "hi", 4 tokens), then the long prompt once where it will be measured. On an H100 the
    first 1,838-token prompt of the dflash and MoE legs came 20% and 21% under the later ones (a fresh server's first
    micro-batches of that size), with the short decode alone as the warm-up."""
    return [(DECODE_PROMPTS["short"], tokens), *([(prompt, 1)] if prompt is not None else [])]


# -- a chat prompt of N tokens, by the server's own tokenizer ------------------------------------------------------------


Ask = Callable[[str, Mapping[str, Any]], Mapping[str, Any]]  # POST path, body -> the answer (LlamaServer.post, bound)


@dataclass(frozen=True)
class ChatPrompt:
    """A user message and its chat prompt's length: ``tokens`` is the server's count of the templated prompt, the
    count each prompt sample's ``prompt_n`` repeats; ``asked`` what was asked for."""

    content: str
    tokens: int
    asked: int

    @property
    def exact(self) -> bool:
        return self.tokens == self.asked


def chat_prompt(ask: Ask, tokens: int, filler: str, server: str) -> ChatPrompt:
    """A user message whose chat prompt is ``tokens`` tokens: the template's own tokens counted on an empty message,
    the rest cut from ``filler``'s token ids (repeated as often as needed) and detokenized; then the whole templated
    prompt is counted again and the cut moved by the difference, at most :data:`TRIES` times (a cut mid-word can
    tokenize otherwise once joined). Exact when a try meets the count; else the nearest, which says its count."""
    overhead = _count(ask, _templated(ask, "", server), server)
    if tokens <= overhead:
        raise ConfigError(TOO_SHORT.format(tokens=tokens, overhead=overhead))
    ids = _ids(ask, "/tokenize", {"content": filler, "add_special": False, "parse_special": False}, server)
    take = tokens - overhead
    best: ChatPrompt | None = None
    for _ in range(TRIES):
        content = _detokenized(ask, [ids[k % len(ids)] for k in range(take)], server)
        made = ChatPrompt(content, _count(ask, _templated(ask, content, server), server), tokens)
        if best is None or abs(made.tokens - tokens) < abs(best.tokens - tokens):
            best = made
        if made.exact or take + tokens - made.tokens < 1:
            break
        take += tokens - made.tokens
    assert best is not None
    return best


def _templated(ask: Ask, content: str, server: str) -> str:
    """The chat prompt the server renders for one user message, thinking off, with its generation prompt."""
    body = {"messages": [{"role": "user", "content": content}], "chat_template_kwargs": dict(THINKING_OFF)}
    prompt = ask("/apply-template", body).get("prompt")
    if not isinstance(prompt, str):
        raise ServerFailed(NO_TOKENS.format(server=server, path="/apply-template", what="prompt"))
    return prompt


def _count(ask: Ask, text: str, server: str) -> int:
    """Tokens of a templated prompt as the server's chat path tokenizes it: special tokens parsed, BOS as the vocab says."""
    return len(_ids(ask, "/tokenize", {"content": text, "add_special": True, "parse_special": True}, server))


def _ids(ask: Ask, path: str, body: Mapping[str, Any], server: str) -> list[int]:
    ids = ask(path, body).get("tokens")
    if not isinstance(ids, list) or not ids or not all(isinstance(i, int) for i in ids):
        raise ServerFailed(NO_TOKENS.format(server=server, path=path, what="token ids"))
    return ids


def _detokenized(ask: Ask, ids: Sequence[int], server: str) -> str:
    content = ask("/detokenize", {"tokens": list(ids)}).get("content")
    if not isinstance(content, str):
        raise ServerFailed(NO_TOKENS.format(server=server, path="/detokenize", what="content"))
    return content
