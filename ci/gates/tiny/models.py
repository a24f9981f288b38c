"""Tiny GGUF llama models for the gates' CPU tier and for smoke runs on a GPU box: deterministic from a seed, with the
vocabulary of :mod:`ci.gates.tiny.writer`."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ci import defaults
from ci.gates.tiny.dflash import DFLASH_DRAFTER, write_dflash
from ci.gates.tiny.qwen35 import MTP_HEAD, write_mtp, write_qwen35
from ci.gates.tiny.qwen35 import NEAR_DRAFTER as QWEN35_NEAR_DRAFTER
from ci.gates.tiny.qwen35 import TARGET as QWEN35_TARGET
from ci.gates.tiny.writer import CONTROLS, EOS_ID, SPACE, add_vocab, describe_file, gguf_model, perturbed, vocab

ARCHITECTURE = "llama"



@dataclass(frozen=True)
class TinyModelSpec:
    """The shape of one tiny model; ``seed`` fixes every weight."""

    name: str
    layers: int
    dim: int
    ff: int
    heads: int
    seed: int
    context: int = defaults.CONTEXT
    # Logit scale: the output rows' std is ``logit_std / sqrt(dim)``; near 3 nats most top-2 margins are well
    # above the gate's near-tie threshold, so a random model's greedy path is stable on the CPU.
    logit_std: float = 3.0
    # A copy of another spec's weights (``perturb_of``'s seed), each tensor plus Gaussian noise of ``perturb`` times
    # its own std (``seed`` draws the noise): a drafter that agrees with that target often, not always.
    perturb_of: TinyModelSpec | None = None
    perturb: float = 0.0
    # "eos": whatever the context, </s> on top (a drafter whose drafts are never accepted by a run that ignores the
    # end of generation); "random": the rows drawn like every other weight
    output: str = "random"
    # the token the model says ends generation: </s> (never greedy's pick), or an ordinary token it emits early
    eos: str = "</s>"


# The shapes of the facts' probe: target 4 layers x 128, drafter 1 layer x 64 (../shared facts).
TARGET = TinyModelSpec(name="tiny-target", layers=4, dim=128, ff=192, heads=4, seed=1)
DRAFTER = TinyModelSpec(name="tiny-drafter", layers=1, dim=64, ff=128, heads=2, seed=2)
# Same shape as the target, other weights: a "wrong build" whose tokens differ by large margins.
OTHER_TARGET = TinyModelSpec(name="tiny-other-target", layers=4, dim=128, ff=192, heads=4, seed=3)
# The target's weights, perturbed: the gate's default drafter, whose drafts are accepted often and rejected often,
# so both the accept path and the rollback path of speculative decoding run. PERTURB was tuned on the CPU
# llama-server for 30-80% acceptance on code, prose and short (docs/equivalence.md, benchmarks/near_drafter.py).
PERTURB = 0.05
NEAR_DRAFTER = TinyModelSpec(name="tiny-near-drafter", layers=4, dim=128, ff=192, heads=4, seed=4, perturb_of=TARGET, perturb=PERTURB)
# For negative runs: a drafter that drafts nothing but </s> (the gate ignores the end of generation, so the target
# never accepts one), and the target with an ordinary token as its end of generation: "▁imp", its first token on
# the code and prose prompts, so it ends at once unless the end is ignored.
NEVER_ACCEPTED_DRAFTER = TinyModelSpec(name="tiny-eos-drafter", layers=1, dim=64, ff=128, heads=2, seed=5, output="eos")
EARLY_END = TinyModelSpec(name="tiny-early-end", layers=4, dim=128, ff=192, heads=4, seed=1, eos=SPACE + "imp")


def _weights(spec: TinyModelSpec, n_vocab: int) -> list[tuple[str, np.ndarray]]:
    if spec.perturb_of is not None:
        return perturbed(_weights(spec.perturb_of, n_vocab), spec.seed, spec.perturb)
    rng = np.random.default_rng(spec.seed)

    def normal(shape: Sequence[int], std: float) -> np.ndarray:
        return rng.normal(0.0, std, size=tuple(shape)).astype(np.float32)

    d, ff = spec.dim, spec.ff
    # numpy shapes are (rows, columns) = (out, in); gguf stores them reversed, as ggml's ne order
    tensors: list[tuple[str, np.ndarray]] = [("token_embd.weight", normal((n_vocab, d), 1.0))]
    for i in range(spec.layers):
        p = f"blk.{i}."
        tensors += [
            (p + "attn_norm.weight", np.ones(d, dtype=np.float32)),
            (p + "attn_q.weight", normal((d, d), d**-0.5)),
            (p + "attn_k.weight", normal((d, d), d**-0.5)),
            (p + "attn_v.weight", normal((d, d), d**-0.5)),
            (p + "attn_output.weight", normal((d, d), d**-0.5)),
            (p + "ffn_norm.weight", np.ones(d, dtype=np.float32)),
            (p + "ffn_gate.weight", normal((ff, d), d**-0.5)),
            (p + "ffn_up.weight", normal((ff, d), d**-0.5)),
            (p + "ffn_down.weight", normal((d, ff), ff**-0.5)),
        ]
    output = normal((n_vocab, d), spec.logit_std * d**-0.5)
    # Control tokens get a logit of exactly 0 while the others spread around it with std ``logit_std``: with
    # 150 tokens one is never the argmax nor the runner-up, so a run never stops early on </s> and never
    # emits <unk>'s empty text (seen with random rows: <unk> was the runner-up of the first token).
    output[: len(CONTROLS)] = 0.0
    if spec.output == "eos":
        # every layer adds nothing, every embedding has a positive first feature, and only </s> reads it
        tensors = [(name, np.zeros_like(a) if name.startswith("blk.") and not name.endswith("norm.weight") else a) for name, a in tensors]
        tensors[0][1][:, 0] = 1.0
        output[:] = 0.0
        output[EOS_ID, 0] = 10.0
    tensors += [("output_norm.weight", np.ones(d, dtype=np.float32)), ("output.weight", output)]
    return tensors


def write_model(path: Path, spec: TinyModelSpec) -> Path:
    """Write ``spec`` as a GGUF file at ``path``: same spec, same bytes."""
    with gguf_model(path, ARCHITECTURE, spec.name, _weights(spec, len(vocab()))) as writer:
        writer.add_context_length(spec.context)
        writer.add_embedding_length(spec.dim)
        writer.add_block_count(spec.layers)
        writer.add_feed_forward_length(spec.ff)
        writer.add_head_count(spec.heads)
        writer.add_head_count_kv(spec.heads)
        writer.add_rope_dimension_count(spec.dim // spec.heads)
        writer.add_layer_norm_rms_eps(1e-5)
        add_vocab(writer, vocab().tokens.index(spec.eos))
    return path


@dataclass(frozen=True)
class TinyModels:
    target: Path
    drafter: Path  # the far drafter: another model altogether, its drafts mostly rejected
    other_target: Path
    near_drafter: Path  # the gate's default drafter: the target perturbed, about half its drafts accepted

    def describe(self) -> str:
        files = (self.target, self.near_drafter, self.drafter, self.other_target)
        return "\n".join(describe_file(p) for p in files)


def write_tiny_models(directory: Path) -> TinyModels:
    """The gate's tiny models in ``directory``: a target, its near and far drafters, and another target (for
    negative runs)."""
    return TinyModels(
        target=write_model(directory / f"{TARGET.name}.gguf", TARGET),
        drafter=write_model(directory / f"{DRAFTER.name}.gguf", DRAFTER),
        other_target=write_model(directory / f"{OTHER_TARGET.name}.gguf", OTHER_TARGET),
        near_drafter=write_model(directory / f"{NEAR_DRAFTER.name}.gguf", NEAR_DRAFTER),
    )


@dataclass(frozen=True)
class Qwen35Models:
    target: Path
    near_drafter: Path  # the target perturbed (draft-simple): whole-state checkpoints roll it back
    dflash: Path  # the DFlash drafter (draft-dflash): whole-state checkpoints roll it back at c14872f
    mtp: Path  # the MTP head (draft-mtp): the one kind the fork rolls back through per-token snapshots

    def describe(self) -> str:
        files = (self.target, self.near_drafter, self.dflash, self.mtp)
        return "\n".join(describe_file(p) for p in files)


def write_qwen35_models(directory: Path) -> Qwen35Models:
    """The engine-class tiny models in ``directory``: the qwen35 target, its near drafter, its DFlash drafter and its
    MTP head."""
    return Qwen35Models(
        target=write_qwen35(directory / f"{QWEN35_TARGET.name}.gguf", QWEN35_TARGET),
        near_drafter=write_qwen35(directory / f"{QWEN35_NEAR_DRAFTER.name}.gguf", QWEN35_NEAR_DRAFTER),
        dflash=write_dflash(directory / f"{DFLASH_DRAFTER.name}.gguf", DFLASH_DRAFTER),
        mtp=write_mtp(directory / f"{MTP_HEAD.name}.gguf", MTP_HEAD),
    )
