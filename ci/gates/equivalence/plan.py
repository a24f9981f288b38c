"""The equivalence gate's plan, pure: the prompts (ci/prompts by default), the two legs' launcher argv and request
bodies, and what a run is bound to (:class:`Identity`, the prompts' digest), from the options (:func:`plan`)."""

from __future__ import annotations

import hashlib
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ci import defaults
from ci.command import resolve
from ci.errors import ConfigError
from ci.files import sha256_cached
from ci.gates.equivalence.judge import Resume
from ci.gates.serving import devices
from ci.gates.serving.llama import ServerLaunch, launcher_argv
from ci.gates.serving.model_sets import DEFAULT_SPEC_TYPE, GIVEN_MODELS, NO_SUCH_MODEL, drafter_launch
from ci.gates.serving.prompts import Prompt, load_prompts
from ci.pin.pins import Floors

DEFAULT_NEAR_TIE = defaults.NEAR_TIE
DEFAULT_TOKENS = defaults.TOKENS
DEFAULT_SEED = 42
# a drafter leg's request may take this many times the baseline's for the same request (with hang_after set): a 2-core
# CI machine at load 6 took over 120 s for a correct one (the slow tier, 2026-12-04), the baseline alike
HANG_FACTOR = 20.0

# Messages, shared with the tests that match on them (tests/support/messages.py)
TOO_FEW_TOKENS = "--tokens {tokens}: must be at least 1"
BAD_NEAR_TIE = "--near-tie {near_tie:g}: must be a finite number of nats, 0 or more"


# -- the plan ---------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Leg:
    """One server of the gate: its model and the launcher options and llama-server args beyond the common ones."""

    name: str  # "baseline" or "drafter"
    model: Path
    serve_options: tuple[str, ...] = ()
    extra: tuple[str, ...] = ()


@dataclass(frozen=True)
class Identity:
    """What the gate certified, by content: every record names it, and ship checks it against pins.yaml."""

    model_sha256: str
    drafter_sha256: str
    prompts_sha256: str
    llama_server_sha256: str
    models: str = GIVEN_MODELS  # RELEASE_MODELS, TINY_MODELS or GIVEN_MODELS

    def properties(self) -> tuple[tuple[str, str], ...]:
        return (
            ("model_sha256", self.model_sha256),
            ("drafter_sha256", self.drafter_sha256),
            ("prompts_sha256", self.prompts_sha256),
            ("llama_server_sha256", self.llama_server_sha256),
            ("models", self.models),
        )


def prompts_sha256(prompts: Sequence[Prompt]) -> str:
    h = hashlib.sha256()
    for p in sorted(prompts, key=lambda p: p.name):
        h.update(p.name.encode() + b"\0" + hashlib.sha256(p.text.encode()).digest())
    return h.hexdigest()


@dataclass(frozen=True)
class EquivalencePlan:
    baseline: Leg
    drafter: Leg
    prompts: tuple[Prompt, ...]
    llama_server: Path
    device: str = "cpu"
    tokens: int = DEFAULT_TOKENS
    near_tie: float = DEFAULT_NEAR_TIE
    seed: int = DEFAULT_SEED
    context: int = defaults.CONTEXT
    drafter_model: Path | None = None  # the drafter GGUF, for the record
    spec_type: str = DEFAULT_SPEC_TYPE
    build_key: str = ""  # of the llama-server under test, for the record
    identity: Identity | None = None
    draft_max: int = 0  # tokens the drafter leg drafts a step at most, when this gate sets it
    health_timeout: float = 120.0
    request_timeout: float = defaults.REQUEST_TIMEOUT
    hang_after: float | None = None  # the drafter server's answer is given up on sooner: see drafter_timeout
    start_together: bool | None = None  # None: see overlap_start
    floors: Floors = field(default_factory=Floors)  # the evidence a pass needs (pins.yaml equivalence.floors)

    @property
    def overlap_start(self) -> bool:
        """Start both servers at once, except on the CPU: there the two warm-ups fight for the cores (tiny models on
        2 cores: model load 0.010-0.014 s alone, 0.28-0.70 s side by side; both up in 0.21-0.89 s together against
        0.29-0.31 s in turn; benchmarks/equivalence_cost.py --overlap-start, docs/equivalence.md)."""
        return self.start_together if self.start_together is not None else self.device != "cpu"

    def drafter_timeout(self, baseline_seconds: float | None) -> float:
        """How long the drafter leg's request may take. Without ``hang_after``, the request timeout. With it (the tiny
        models, whose requests take under a second): ``hang_after`` seconds, or HANG_FACTOR times what the baseline
        took for the same request when it answered first (a busy CPU slows both alike), never more than the request
        timeout. A planted fault kept a drafter server busy with no answer for the whole 600 s (docs/gates.md)."""
        if self.hang_after is None:
            return self.request_timeout
        scaled = HANG_FACTOR * baseline_seconds if baseline_seconds is not None else 0.0
        return min(self.request_timeout, max(self.hang_after, scaled))

    def launch(self, leg: Leg, port: int) -> ServerLaunch:
        argv = launcher_argv(
            model=leg.model,
            llama_server=self.llama_server,
            port=port,
            device=self.device,
            context=self.context,
            serve_options=leg.serve_options,
            extra=leg.extra,
        )
        return ServerLaunch(leg.name, argv, "127.0.0.1", port, model=str(leg.model))

    def body(self, prompt: Prompt, resume: Resume) -> dict[str, Any]:
        """The greedy ``/completion`` request; a resume sends the prompt text followed by the prefix's token ids."""
        return {
            # a mixed list: the text is tokenized (with BOS) and the ids follow as they are (tokenize_mixed)
            "prompt": [prompt.text, *resume.prefix] if resume.prefix else prompt.text,
            "n_predict": resume.n_predict,
            # every prompt compares exactly n_predict tokens: an early end of generation would certify almost nothing
            "ignore_eos": True,
            "temperature": 0,
            "top_k": 1,
            "seed": self.seed,
            "cache_prompt": False,
            "n_probs": 2,
            "return_tokens": True,
        }


def drafter_leg(drafter: Path, spec_type: str | None, model: Path) -> tuple[Leg, str, int]:
    """The drafter leg, launched as the gates launch a drafter (:func:`ci.gates.serving.model_sets.drafter_launch`),
    with its speculative type and the draft length this gate sets (0: the launcher's)."""
    launch = drafter_launch(drafter, spec_type)
    return Leg("drafter", model, serve_options=launch.serve_options, extra=launch.extra), launch.spec_type, launch.draft_max


def plan(
    *,
    model: Path,
    drafter: Path,
    llama_server: Path | str,
    spec_type: str | None = None,
    prompts: Sequence[Prompt] | None = None,
    tokens: int = DEFAULT_TOKENS,
    near_tie: float = DEFAULT_NEAR_TIE,
    device: str = "cpu",
    seed: int = DEFAULT_SEED,
    context: int = defaults.CONTEXT,
    build_key: str = "",
    llama_server_sha256: str | None = None,
    models: str = GIVEN_MODELS,
    floors: Floors | None = None,
) -> EquivalencePlan:
    """The gate's plan; a :class:`ConfigError` for an input that cannot be right. ``llama_server`` as a ``str`` is the
    user's (a name on PATH or a path), looked up after the other inputs are checked; as a ``Path``, taken as it is."""
    if tokens < 1:
        raise ConfigError(TOO_FEW_TOKENS.format(tokens=tokens))
    if not (math.isfinite(near_tie) and near_tie >= 0):  # nan passes "< 0"; inf would call every divergence a near-tie
        raise ConfigError(BAD_NEAR_TIE.format(near_tie=near_tie))
    for what, path in (("--model", model), ("--drafter", drafter)):
        if not path.is_file():
            raise ConfigError(NO_SUCH_MODEL.format(option=what, path=path))
    model, drafter = model.absolute(), drafter.absolute()  # from the caller's folder: the launcher may run in another
    if isinstance(llama_server, str):  # as the user typed it: looked up once their own inputs are known to be good
        llama_server = Path(resolve(llama_server))
    leg, kind, draft_max = drafter_leg(drafter, spec_type, model)
    if device == "auto":
        device = devices.auto(llama_server)
    chosen = tuple(prompts) if prompts is not None else load_prompts()
    identity = Identity(
        model_sha256=sha256_cached(model),
        drafter_sha256=sha256_cached(drafter),
        prompts_sha256=prompts_sha256(chosen),
        llama_server_sha256=llama_server_sha256 or (sha256_cached(llama_server) if llama_server.is_file() else ""),
        models=models,
    )
    return EquivalencePlan(
        baseline=Leg("baseline", model),
        drafter=leg,
        prompts=chosen,
        llama_server=llama_server,
        device=device,
        tokens=tokens,
        near_tie=near_tie,
        seed=seed,
        context=context,
        drafter_model=drafter,
        spec_type=kind,
        build_key=build_key,
        identity=identity,
        draft_max=draft_max,
        floors=floors or Floors(),
    )
