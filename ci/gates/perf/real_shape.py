"""The perf gate on the real-shaped set (:mod:`ci.gates.shapes`): the seeds' speed claims at the scale they were made.

A prompt's speed costs the same whatever the weights hold, so generated models of the 27B's shapes hold the
engine's speed claims; what depends on trained weights is refused (:func:`refusal`). Each config is a *leg*, a
``1bit serve`` launch; legs run in *groups* of live servers, each loaded once and asked in turn, round by round: a
fresh server per round would cost seconds of loading each time. docs/bench.md, "Real shapes", lists the checks.
"""

from __future__ import annotations

import contextlib
import dataclasses
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ci.errors import ConfigError
from ci.gates.serving.bench import Sample, sample_from
from ci.gates.serving.bench_plan import BenchConfig, Run
from ci.gates.serving.llama import LlamaServer, ServerLaunch, free_ports, launcher_argv
from ci.gates.serving.protocol import (
    DECODE_PROMPTS,
    DECODE_TOKENS,
    PATHS,
    PROMPT_MAX_TOKENS,
    PROTOCOLS,
    SEED_PROMPT_TOKENS,
    SEEDS,
    chat_body,
    warmups,
)
from ci.pin.claims import Check, Term

# the seeds' protocol, the bench's too (ci.gates.serving.protocol): what each request asks
PROTOCOL = PROTOCOLS[SEEDS]
CHAT = PATHS[SEEDS]
LONG_PROMPT = "long"  # the prompt a PROMPT argument names: prompt(fa_off, long), ttft(long, long)
LONG_PROMPT_TOKENS = 16384  # "pp16384", "the 16K first token" of engine #205
GROUP_SIZE = 3  # servers up at once: three 15.5 GB targets (or two 19 GB MoE files and a spare) in 80 GB
SECONDS = 150.0  # each group's budget for the sequential test: the set's checks stay under minutes on a GPU box

TARGET, MOE = "target", "moe"  # ci.gates.shapes.models' roles a leg serves
DRAFTER_ARG = "{drafter}"  # a leg's stand-in for the set's drafter file


@dataclass(frozen=True)
class Leg:
    """One config of the set: a model of it, served through ``1bit serve`` with these options."""

    name: str
    role: str
    serve_options: tuple[str, ...] = ()
    extra: tuple[str, ...] = ()  # llama-server's own, after --

    @property
    def drafts(self) -> bool:
        return "--dflash" in self.serve_options

    def config(self, drafter: Path) -> BenchConfig:
        options = tuple(str(drafter) if a == DRAFTER_ARG else a for a in self.serve_options)
        return BenchConfig(self.name, options, self.extra)


LEGS: dict[str, Leg] = {
    leg.name: leg
    for leg in (
        Leg("base", TARGET),  # serve's defaults: llama-server's 512-token micro-batch, flash attention auto
        Leg("dflash", TARGET, ("--dflash", DRAFTER_ARG)),
        Leg("ub1024", TARGET, extra=("-ub", "1024")),
        Leg("fa_off", TARGET, ("-fa", "off")),
        Leg("long", TARGET, ("--long-model",)),
        Leg("moe", MOE),
        Leg("moe_ub1024", MOE, extra=("-ub", "1024")),
    )
}
CONFIGS = tuple(LEGS)
METRICS = ("prompt", "ttft", "decode", "bandwidth")

# Messages, shared with the tests that match on them (tests/support/messages.py)
TRAINED_ONLY = "{metric}: a generated model cannot make it honestly: {why}; keep it for the release models"
WHY_DRAFTING = "a drafter's acceptance and tokens per step follow from trained weights, and these are random"
WHY_DRAFTED_DECODE = "decode with a drafter is as fast as its acceptance, which follows from trained weights"
NOT_A_LEG_METRIC = "{metric}: this set measures {metrics}"
TWO_MODELS = "{check}: {top} serves the {a} file and {bottom} the {b}; a ratio compares one file's configs"
NO_PEAK = "bandwidth: no peak memory bandwidth is known for {device} (ci/gates/serving/devices.py PEAK_BANDWIDTH); name it there or drop the check"
ASKING = "perf: real-shape group {group}: {legs}, {rounds} rounds"


def refusal(check: Check) -> str | None:
    """Why the real-shaped set cannot judge ``check`` honestly, or None when it can (pins.yaml is refused with it)."""
    for term in (check.top, check.bottom):
        if term is None:
            continue
        if term.metric not in METRICS:
            if term.metric in ("acceptance", "tokens_per_step"):
                return TRAINED_ONLY.format(metric=term.metric, why=WHY_DRAFTING)
            return NOT_A_LEG_METRIC.format(metric=term.metric, metrics=", ".join(METRICS))
        if term.metric in ("decode", "bandwidth") and term.config in LEGS and LEGS[term.config].drafts:
            return TRAINED_ONLY.format(metric=f"{term.metric}({term.config})", why=WHY_DRAFTED_DECODE)
    if check.bottom is not None and LEGS[check.top.config].role != LEGS[check.bottom.config].role:
        a, b = LEGS[check.top.config].role, LEGS[check.bottom.config].role
        return TWO_MODELS.format(check=check.name, top=check.top.config, bottom=check.bottom.config, a=a, b=b)
    return None


@dataclass(frozen=True)
class Protocol:
    """What each request asks: the seeds' by default; a smaller prompt for the reduced set on a 2-core CPU."""

    prompt_tokens: int = SEED_PROMPT_TOKENS
    long_tokens: int = LONG_PROMPT_TOKENS
    decode_tokens: int = DECODE_TOKENS
    prompt_max_tokens: int = PROMPT_MAX_TOKENS
    health_timeout: float = 600.0  # a 15 GB file loads in seconds from the page cache, minutes from a slow disk
    request_timeout: float = 600.0
    threads: tuple[str, ...] = ()  # llama-server's -t on the CPU

    @property
    def context(self) -> int:
        return self.long_tokens + 256  # the long prompt, its template and a few generated tokens

    def describe(self) -> str:
        return f"{PROTOCOL}; prompt {self.prompt_tokens} tokens (max_tokens {self.prompt_max_tokens}), long prompt {self.long_tokens}, decode {self.decode_tokens} tokens"


# -- what each leg is asked (pure) -------------------------------------------------------------------------------------


def prompt_metric(prompt: str | None) -> str:
    """The sample metric of a prompt request: ``prompt`` for the seeds' prompt, ``prompt long`` for the long one."""
    return "prompt" if prompt is None else f"prompt {prompt}"


def roles_of(checks: Sequence[Check]) -> tuple[str, ...]:
    """The set's models the checks' legs serve: the target, the MoE file, and the drafter where a leg drafts."""
    legs = [LEGS[t.config] for c in checks for t in (c.top, c.bottom) if t is not None]
    return tuple(sorted({leg.role for leg in legs} | ({"drafter"} if any(leg.drafts for leg in legs) else set())))


def asks_of(term: Term) -> tuple[str, ...]:
    """The requests (sample metrics) a term needs of its leg."""
    if term.metric in ("prompt", "ttft"):
        return (prompt_metric(term.prompt),)
    return tuple(f"decode {p}" for p in ((term.prompt,) if term.prompt else DECODE_PROMPTS))


@dataclass(frozen=True)
class Group:
    """Legs whose servers are up together, each with the requests its group's checks need, and those checks."""

    legs: tuple[str, ...]
    asks: Mapping[str, tuple[str, ...]]
    checks: tuple[Check, ...]


def groups(checks: Sequence[Check], size: int = GROUP_SIZE) -> tuple[Group, ...]:
    """The checks in groups of at most ``size`` legs of one model, a check's legs always in one group (a leg may be
    in several, base most often), in the checks' order."""
    built: list[tuple[list[str], list[Check]]] = []
    for check in checks:
        legs = [t.config for t in (check.top, check.bottom) if t is not None]
        role = LEGS[legs[0]].role
        for members, held in built:
            if LEGS[members[0]].role == role and len(set(members) | set(legs)) <= size:
                members.extend(leg for leg in legs if leg not in members)
                held.append(check)
                break
        else:
            built.append((list(dict.fromkeys(legs)), [check]))
    out = []
    for members, held in built:
        asks: dict[str, list[str]] = {leg: [] for leg in members}
        for check in held:
            for term in (check.top, check.bottom):
                if term is not None:
                    asks[term.config] += [a for a in asks_of(term) if a not in asks[term.config]]
        out.append(Group(tuple(members), {leg: tuple(a) for leg, a in asks.items()}, tuple(held)))
    return tuple(out)


# -- the run -----------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Models:
    """The set's files, and the text of each prompt of the protocol for its vocabulary."""

    files: Mapping[str, Path]  # by role: target, drafter, moe
    prompts: Mapping[str, str]  # sample metric -> user message: "prompt", "prompt long", "decode code", ...
    bandwidth_per_tps: Mapping[str, float]  # by role: the share of the device's peak one decoded token a second reads

    def model_of(self, leg: Leg) -> Path:
        return self.files[leg.role]


class LiveGroup:
    """A group's servers, started together and kept up; each :meth:`rounds` call asks every leg in turn."""

    def __init__(self, group: Group, models: Models, llama_server: Path, device: str, protocol: Protocol, logs: Path) -> None:
        self.group = group
        self.models = models
        self.protocol = protocol
        self.servers: dict[str, LlamaServer] = {}
        self._stack = contextlib.ExitStack()
        ports = free_ports(len(group.legs))
        for leg_name, port in zip(group.legs, ports, strict=True):
            leg = LEGS[leg_name]
            config = leg.config(models.files["drafter"]) if leg.drafts else leg.config(Path())
            argv = launcher_argv(model=models.model_of(leg), llama_server=llama_server, port=port, device=device, context=protocol.context,
                                 serve_options=config.serve_options, extra=(*config.extra, *protocol.threads))  # fmt: skip
            launch = ServerLaunch(leg_name, argv, "127.0.0.1", port)
            self.servers[leg_name] = LlamaServer(launch, logs / f"{leg_name}.log", health_timeout=protocol.health_timeout)

    def __enter__(self) -> LiveGroup:
        try:
            for server in self.servers.values():  # every model loads at once: the group waits for the slowest, not the sum
                self._stack.callback(server.stop)
                server.start()
            for leg_name, server in self.servers.items():
                server.wait_healthy()
                for content, tokens in self._warmups(leg_name):
                    server.post(CHAT, chat_body(content, tokens), self.protocol.request_timeout)
        except BaseException:
            self._stack.close()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self._stack.close()

    def _warmups(self, leg_name: str) -> list[tuple[str, int]]:
        """Each server's unmeasured first requests (:func:`~ci.gates.serving.protocol.warmups`): the seeds' prompt
        among them where the leg is asked it."""
        return warmups(self.models.prompts["prompt"] if "prompt" in self.group.asks[leg_name] else None)

    def rounds(self, n: int) -> list[Sample]:
        """``n`` more rounds: each leg, in the group's order, asked each of its requests once."""
        samples: list[Sample] = []
        for k in range(1, n + 1):
            for leg_name in self.group.legs:
                leg = LEGS[leg_name]
                for metric in self.group.asks[leg_name]:
                    samples.append(self._ask(leg, metric, k))
        return samples

    def _ask(self, leg: Leg, metric: str, round_: int) -> Sample:
        server = self.servers[leg.name]
        decode = metric.startswith("decode")
        # the long prompt's request asks one token: its wall time is the first token's (ttft), its timings the prompt's
        tokens = self.protocol.decode_tokens if decode else 1 if metric == prompt_metric(LONG_PROMPT) else self.protocol.prompt_max_tokens
        body = chat_body(self.models.prompts[metric], tokens)
        t0 = time.monotonic()
        answer = server.post(CHAT, body, self.protocol.request_timeout)
        seconds = time.monotonic() - t0
        run = Run(round_, BenchConfig(leg.name))
        sample = sample_from(answer, run, metric, 1, seconds, server.launch.name)
        per_tps = self.models.bandwidth_per_tps.get(leg.role, 0.0) if decode else 0.0
        return dataclasses.replace(sample, bandwidth_per_tps=per_tps)


def settle_groups(
    checks: Sequence[Check],
    models: Models,
    llama_server: Path,
    device: str,
    protocol: Protocol,
    logs: Path,
    judge: Callable[[Sequence[Check], Callable[[int], Sequence[Sample]]], Any],
    say: Callable[[str], None] = lambda line: None,
) -> list[Any]:
    """Each group's servers up, its checks settled by ``judge(checks, measure)`` (the gate's sequential test, whose
    ``measure(n)`` asks n more rounds), then its servers stopped: one group's outcome after another."""
    outcomes = []
    for i, group in enumerate(groups(checks), 1):
        say(ASKING.format(group=i, legs=", ".join(group.legs), rounds="sequential"))
        with LiveGroup(group, models, llama_server, device, protocol, logs / f"group{i}") as live:
            outcomes.append(judge(group.checks, live.rounds))
    return outcomes


def peak_or_refuse(device: str, peak: float | None, checks: Sequence[Check]) -> float:
    """The device's peak bandwidth; a ConfigError when a bandwidth check asks for it and none is known."""
    if peak is None:
        if any(t is not None and t.metric == "bandwidth" for c in checks for t in (c.top, c.bottom)):
            raise ConfigError(NO_PEAK.format(device=device))
        return 0.0
    return peak
