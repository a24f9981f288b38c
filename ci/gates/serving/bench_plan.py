"""The bench's plan, pure: its configs (each a set of ``1bit serve`` arguments, the first the baseline), the rounds
that interleave them, each run's launch line and request bodies in its protocol (:func:`plan`; the seeds' chat
protocol or ``/completion``: :mod:`ci.gates.serving.protocol`), and every config checked through ``1bit serve
--dry-run`` before any server starts (:func:`check_configs`)."""

from __future__ import annotations

import io
import os
import shlex
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ci import defaults
from ci.errors import ConfigError
from ci.gates.serving.llama import LAUNCHER, ServerLaunch, launcher_argv
from ci.gates.serving.model_sets import NO_SUCH_MODEL
from ci.gates.serving.prompts import Prompt, load_prompts
from ci.gates.serving.protocol import (
    COMPLETION,
    DECODE_PROMPTS,
    PATHS,
    PROMPT_MAX_TOKENS,
    PROTOCOLS,
    SEED_PROMPT_TOKENS,
    SEEDS,
    chat_body,
    warmups,
)

DEFAULT_PROMPT_TOKENS = defaults.BENCH_PROMPT_TOKENS  # the /completion protocol's; the seeds' is theirs, 1,838
PROMPT_TOKENS = {SEEDS: SEED_PROMPT_TOKENS, COMPLETION: DEFAULT_PROMPT_TOKENS}
DEFAULT_ROUNDS = defaults.BENCH_ROUNDS
DEFAULT_PROMPT_REPS = defaults.BENCH_PROMPT_REPS
DEFAULT_DECODE_REPS = defaults.BENCH_DECODE_REPS
DEFAULT_DECODE_TOKENS = defaults.BENCH_DECODE_TOKENS
DEFAULT_CONTEXT = defaults.BENCH_CONTEXT
DEFAULT_WARMUP_TOKENS = defaults.BENCH_WARMUP_TOKENS
SEED = 42
PROMPT = "prompt"
# options the bench sets itself on every server: a config that sets them would measure something else
OWNED = {"-m": "the model is the bench's -m", "--model": "the model is the bench's -m", "--host": "the bench listens on 127.0.0.1",
         "--port": "the bench picks free ports", "--llama-server": "the bench's --llama-server or --profile picks it",
         "--dry-run": "a dry run starts no server", "--profile": "the bench's --profile picks the build"}  # fmt: skip


# Messages, shared with the tests that match on them (tests/support/messages.py)
NOT_NAME_ARGS = '--config "{text}": not NAME=ARGS (e.g. --config base= --config dflash="--dflash D.gguf")'
CONFIG_UNSPLITTABLE = '--config {name}: "{args}": {reason}'
OWNED_FLAG = "--config {name}: {flag} is not a config's to set ({why})"  # why: OWNED's
SERVER_OWNED_FLAG = "--config {name}: {flag} after -- is not a config's to set ({why})"  # why: SERVER_OWNED's
NO_CONFIG = 'no --config: give the baseline first, e.g. --config base= --config dflash="--dflash D.gguf"'
CONFIG_TWICE = "--config {name}: given twice"
AT_LEAST_ONE = "{flag} {value}: must be at least 1"
BAD_WARMUP = "--warmup-tokens {value}: must be 0 (no warm-up) or more"
PROMPT_TOO_LONG = "--prompt-tokens {tokens}: does not fit the context -c {context}; raise -c or lower --prompt-tokens"
NO_SUCH_PROTOCOL = "--protocol {protocol}: the protocols are {known}"
SERVE_REFUSED = "--config {name}: 1bit serve: {line}"
SERVER_NAME = "{config} (round {round})"  # a server's name in its messages

SERVER_OWNED = {"--host": "the bench listens on 127.0.0.1", "--port": "the bench picks free ports", "-m": "the model is the bench's -m",
                "--model": "the model is the bench's -m", "--path": "the bench's server serves no files", "--api-key": "the bench talks to its own server"}  # fmt: skip


@dataclass(frozen=True)
class BenchConfig:
    """One ``--config NAME=ARGS``: ``1bit serve`` options, then after ``--`` llama-server's own."""

    name: str
    serve_options: tuple[str, ...] = ()
    extra: tuple[str, ...] = ()

    @property
    def args(self) -> tuple[str, ...]:
        return (*self.serve_options, "--", *self.extra) if self.extra else self.serve_options

    def show(self) -> str:
        return shlex.join(self.args) or "(serve's defaults)"


def parse_config(text: str) -> BenchConfig:
    """``NAME=ARGS`` (``base=`` is serve's defaults); a :class:`ConfigError` naming the config otherwise."""
    name, sep, rest = text.partition("=")
    if not sep or not name or not all(c.isalnum() or c in "-_." for c in name):
        raise ConfigError(NOT_NAME_ARGS.format(text=text))
    try:
        words = shlex.split(rest)
    except ValueError as exc:
        raise ConfigError(CONFIG_UNSPLITTABLE.format(name=name, args=rest, reason=exc)) from None
    serve_options, extra = (words[: words.index("--")], words[words.index("--") + 1 :]) if "--" in words else (words, [])
    for word in serve_options:
        flag = word.split("=", 1)[0]
        if flag in OWNED:
            raise ConfigError(OWNED_FLAG.format(name=name, flag=flag, why=OWNED[flag]))
    for word in extra:  # llama-server's own flags: where it listens and what it loads are the bench's
        flag = word.split("=", 1)[0]
        if flag in SERVER_OWNED:
            raise ConfigError(SERVER_OWNED_FLAG.format(name=name, flag=flag, why=SERVER_OWNED[flag]))
    return BenchConfig(name, tuple(serve_options), tuple(extra))


@dataclass(frozen=True)
class Run:
    """One server's life: a config in a round."""

    round: int
    config: BenchConfig


@dataclass(frozen=True)
class BenchPlan:
    model: Path
    llama_server: Path
    configs: tuple[BenchConfig, ...]
    device: str = "auto"
    rounds: int = DEFAULT_ROUNDS
    prompt_reps: int = DEFAULT_PROMPT_REPS
    decode_reps: int = DEFAULT_DECODE_REPS
    decode_tokens: int = DEFAULT_DECODE_TOKENS
    prompt_tokens: int = DEFAULT_PROMPT_TOKENS
    context: int = DEFAULT_CONTEXT
    prompts: tuple[Prompt, ...] = ()
    warmup_tokens: int = DEFAULT_WARMUP_TOKENS
    protocol: str = COMPLETION  # how every request asks (ci.gates.serving.protocol.PROTOCOLS)
    health_timeout: float = 300.0  # a 27B model loads in tens of seconds
    request_timeout: float = defaults.REQUEST_TIMEOUT

    @property
    def baseline(self) -> BenchConfig:
        return self.configs[0]

    @property
    def path(self) -> str:
        """Where every measured request goes."""
        return PATHS[self.protocol]

    @property
    def described(self) -> str:
        """The protocol in the words every figure it made carries."""
        return PROTOCOLS[self.protocol]

    @property
    def metrics(self) -> tuple[str, ...]:
        return (PROMPT, *(f"decode {p.name}" for p in self.prompts))

    def schedule(self) -> tuple[Run, ...]:
        """Round by round, every config in order: A B A B."""
        return tuple(Run(r, c) for r in range(1, self.rounds + 1) for c in self.configs)

    def launch(self, run: Run, port: int) -> ServerLaunch:
        argv = launcher_argv(
            model=self.model,
            llama_server=self.llama_server,
            port=port,
            device=self.device,
            context=self.context,
            serve_options=run.config.serve_options,
            extra=run.config.extra,
        )
        return ServerLaunch(SERVER_NAME.format(config=run.config.name, round=run.round), argv, "127.0.0.1", port)

    def prompt_body(self, prompt: Sequence[int] | str) -> dict[str, Any]:
        """Prompt speed: the whole prompt each time (``cache_prompt`` false). Seeds: the user message of a chat prompt
        of ``prompt_tokens`` tokens, :data:`PROMPT_MAX_TOKENS` generated; completion: the token ids, one generated."""
        if self.protocol == SEEDS:
            assert isinstance(prompt, str)
            return chat_body(prompt, PROMPT_MAX_TOKENS)
        assert not isinstance(prompt, str)
        return {"prompt": list(prompt), "n_predict": 1, "temperature": 0, "top_k": 1, "seed": SEED, "cache_prompt": False}

    def warmup_bodies(self, prompt: Sequence[int] | str) -> list[dict[str, Any]]:
        """The first requests of every server, not measured: a short decode that drafts when the config drafts, so
        one-time costs (Vulkan pipelines compiled for the verify batch, CUDA graphs) land before the samples.
        Measured on the H200's Vulkan build without it: round 1's decode ratio 0.045 against 0.36-0.46 after. Seeds:
        the real-shaped set's warm-ups (:func:`~ci.gates.serving.protocol.warmups`), the long prompt once too."""
        if not self.warmup_tokens:
            return []
        if self.protocol == SEEDS:
            assert isinstance(prompt, str)
            return [chat_body(content, tokens) for content, tokens in warmups(prompt, self.warmup_tokens)]
        return [{**self.decode_body(self.prompts[0]), "n_predict": self.warmup_tokens}]

    def decode_body(self, prompt: Prompt) -> dict[str, Any]:
        """Decode speed, greedy. Seeds: ``decode_tokens`` at most, as the engine asked (a trained model may end its
        answer sooner; each sample keeps its count); completion: exactly ``decode_tokens`` (``ignore_eos``)."""
        if self.protocol == SEEDS:
            return chat_body(prompt.text, self.decode_tokens)
        return {
            "prompt": prompt.text,
            "n_predict": self.decode_tokens,
            "temperature": 0,
            "top_k": 1,
            "seed": SEED,
            "cache_prompt": False,
            "ignore_eos": True,
        }


def plan(
    *,
    model: Path,
    llama_server: Path,
    configs: Sequence[BenchConfig],
    device: str = "auto",
    rounds: int = DEFAULT_ROUNDS,
    prompt_reps: int = DEFAULT_PROMPT_REPS,
    decode_reps: int = DEFAULT_DECODE_REPS,
    decode_tokens: int = DEFAULT_DECODE_TOKENS,
    prompt_tokens: int | None = None,
    context: int = DEFAULT_CONTEXT,
    prompts: Sequence[Prompt] | None = None,
    warmup_tokens: int = DEFAULT_WARMUP_TOKENS,
    protocol: str = COMPLETION,
) -> BenchPlan:
    """The bench to run; ``prompt_tokens`` None is the protocol's (:data:`PROMPT_TOKENS`), ``prompts`` None its decode
    prompts (the seeds' code, prose and short; ci/prompts for completion)."""
    if protocol not in PROTOCOLS:
        raise ConfigError(NO_SUCH_PROTOCOL.format(protocol=protocol, known=", ".join(PROTOCOLS)))
    prompt_tokens = PROMPT_TOKENS[protocol] if prompt_tokens is None else prompt_tokens
    if not configs:
        raise ConfigError(NO_CONFIG)
    names = [c.name for c in configs]
    for name in names:
        if names.count(name) > 1:
            raise ConfigError(CONFIG_TWICE.format(name=name))
    for flag, value in (("--rounds", rounds), ("--prompt-reps", prompt_reps), ("--decode-reps", decode_reps),
                        ("--decode-tokens", decode_tokens), ("--prompt-tokens", prompt_tokens)):  # fmt: skip
        if value < 1:
            raise ConfigError(AT_LEAST_ONE.format(flag=flag, value=value))
    if warmup_tokens < 0:
        raise ConfigError(BAD_WARMUP.format(value=warmup_tokens))
    if prompt_tokens + (PROMPT_MAX_TOKENS if protocol == SEEDS else 1) > context:
        raise ConfigError(PROMPT_TOO_LONG.format(tokens=prompt_tokens, context=context))
    if not model.is_file():
        raise ConfigError(NO_SUCH_MODEL.format(option="-m", path=model))
    if device == "auto" and llama_server.is_file():
        from ci.gates.serving import devices

        device = devices.auto(llama_server)
    return BenchPlan(
        model=model,
        llama_server=llama_server,
        configs=tuple(configs),
        device=device,
        rounds=rounds,
        prompt_reps=prompt_reps,
        decode_reps=decode_reps,
        decode_tokens=decode_tokens,
        prompt_tokens=prompt_tokens,
        context=context,
        prompts=tuple(prompts) if prompts is not None else seed_prompts() if protocol == SEEDS else load_prompts(),
        warmup_tokens=warmup_tokens,
        protocol=protocol,
    )


def seed_prompts() -> tuple[Prompt, ...]:
    """The seeds' decode prompts, by their names there."""
    return tuple(Prompt(name, text) for name, text in DECODE_PROMPTS.items())


def check_configs(bench_plan: BenchPlan, applied: dict[str, tuple[str, ...]] | None = None) -> dict[str, tuple[str, ...]]:
    """Each config's own launch line through ``1bit serve --dry-run``, in-process: a bad drafter, an unknown option
    or a refused route stops the bench before any server starts, with the launcher's own message. The llama-server
    argv of each config, by name (its draft length is read from it)."""
    import json

    from serve.cli import serve
    from serve.errors import ServeError

    applied = applied if applied is not None else {}
    argvs: dict[str, tuple[str, ...]] = {}
    for config in bench_plan.configs:
        args = list(bench_plan.launch(Run(0, config), 8080).argv[1 + len(LAUNCHER) :])  # a dry run binds no port
        cut = args.index("--") if "--" in args else len(args)
        out = io.StringIO()
        try:
            serve([*args[:cut], "--dry-run", *args[cut:]], os.environ, Path.cwd(), out, io.StringIO())
        except ServeError as exc:
            raise ConfigError(SERVE_REFUSED.format(name=config.name, line=exc.line)) from None
        decided = json.loads(out.getvalue())
        argvs[config.name] = tuple(decided["argv"])
        applied[config.name] = tuple(decided.get("recipes", ()))
    return argvs
