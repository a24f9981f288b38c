from __future__ import annotations

from pathlib import Path

import pytest
import requests

from ci.cli import main
from ci.files import sha256_file as sha256
from ci.gates.serving.llama import LlamaServer, ServerLaunch, free_ports
from ci.gates.tiny.models import DRAFTER, TARGET, TinyModels, write_model
from ci.gates.tiny.writer import BOS_ID, EOS_ID, MODEL_FILE, vocab
from tests.support.binaries import llama_binary


def test_same_spec_same_bytes(tmp_path: Path) -> None:
    a = write_model(tmp_path / "a.gguf", TARGET)
    b = write_model(tmp_path / "b.gguf", TARGET)
    assert sha256(a) == sha256(b)
    assert sha256(write_model(tmp_path / "c.gguf", DRAFTER)) != sha256(a)


def test_sizes_and_header(tiny_models: TinyModels) -> None:
    import gguf

    assert 1.5e6 < tiny_models.target.stat().st_size < 3e6  # "about 2 MB"
    assert tiny_models.drafter.stat().st_size < 0.5e6
    r = gguf.GGUFReader(str(tiny_models.drafter))
    f = r.fields
    assert bytes(f["general.architecture"].parts[-1]).decode() == "llama"
    assert int(f["llama.block_count"].parts[-1][0]) == 1
    assert int(f["llama.embedding_length"].parts[-1][0]) == 64
    assert {t.tensor_type.name for t in r.tensors} == {"F32"}


def test_every_token_is_text_on_its_own() -> None:
    v = vocab()
    assert len(set(v.tokens)) == len(v)
    for tok, kind in zip(v.tokens, v.types, strict=True):
        if kind == 6:  # byte tokens: tab and newline only, never a byte that is not UTF-8 by itself
            assert tok in ("<0x09>", "<0x0A>")
        elif kind == 1:
            text = tok.replace("\u2581", " ")
            assert text.isascii()
            assert text.isprintable()


def test_cli_writes_the_models(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["tiny-models", "--out", str(tmp_path)]) == 0
    llama = ["tiny-drafter.gguf", "tiny-near-drafter.gguf", "tiny-other-target.gguf", "tiny-target.gguf"]
    qwen35 = ["tiny-qwen35-dflash.gguf", "tiny-qwen35-mtp.gguf", "tiny-qwen35-near-drafter.gguf", "tiny-qwen35-target.gguf"]
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(llama + qwen35)  # both sets, nothing else left there
    target = tmp_path / "tiny-target.gguf"
    assert MODEL_FILE.format(name=target.name, megabytes=2.38, sha256=sha256(target)[:16]) in capsys.readouterr().out


@pytest.mark.slow
def test_the_real_server_loads_tokenizes_and_decodes_every_token(tiny_models: TinyModels, tmp_path: Path) -> None:
    (port,) = free_ports(1)
    argv = (str(llama_binary("llama-server")), "-m", str(tiny_models.target), "-ngl", "0", "-c", "512", "--host", "127.0.0.1", "--port", str(port))
    with LlamaServer(ServerLaunch("tiny", argv, "127.0.0.1", port), tmp_path / "server.log") as server:
        ids = server.post("/tokenize", {"content": "the def x\n"}, 10)["tokens"]
        v = vocab()
        # words merge (the space prefix included), a letter stays a letter, newline is a byte token
        assert [v.tokens[i] for i in ids] == ["\u2581the", "\u2581def", "\u2581", "x", "<0x0A>"]
        for i in range(len(v)):
            if i in (BOS_ID, EOS_ID, 0):
                continue
            text = server.post("/detokenize", {"tokens": [i]}, 10)["content"]
            assert text == v.tokens[i].replace("\u2581", " ").replace("<0x09>", "\t").replace("<0x0A>", "\n")
        # the answer of a real completion is valid text (the fork's 500 for invalid UTF-8 would show here)
        r = requests.post(f"{server.url}/completion", json={"prompt": "Q:", "n_predict": 32, "temperature": 0, "top_k": 1}, timeout=30)
        assert r.status_code == 200
        assert len(r.json()["content"]) > 0
