"""The greedy-equivalence gate: the drafter must not change what the model says, and must really draft.

Two llama-servers (started through the serve launcher): a baseline without a drafter and a drafter leg with one.
Each prompt goes to both as a greedy ``/completion``; :func:`judge` compares the token ids (pure, over the
recorded answers). At the first difference the baseline's top-2 logprob margin decides: at or under the
near-tie threshold both legs resume from the common prefix plus the baseline's token, so one near-tie never
hides a later real divergence; above it the gate fails with the evidence. Exact equality alone would fail a
correct GPU build: on an H200 three of six prompts diverged at near-ties (../shared facts).

Plan apart from run: :func:`plan` turns options into a :class:`GatePlan` (the legs' launcher argv, the request
bodies); :func:`run` starts the servers, asks, judges and returns a :class:`GateResult`.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from importlib import resources
from pathlib import Path
from typing import Any

from ci.errors import ConfigError, ServerFailed
from ci.results import CaseResult, GateResult, Status, case_counts
from ci.server import LlamaServer, ServerFactory, ServerLaunch, default_server, free_ports, launcher_argv

log = logging.getLogger("onebit-ci")

GATE = "equivalence"
# Largest baseline top-2 margin at which a correct build was measured to diverge with a drafter: 0.091 nats
# (H200, upstream build 11434; the others 0.051 and 0.0058; ../shared facts). 0.1 is the round number above it.
DEFAULT_NEAR_TIE = 0.1
DEFAULT_TOKENS = 256
DEFAULT_SEED = 42
DEFAULT_SPEC_TYPE = "draft-simple"
# the facts' probe: 8 drafted tokens a step, no probability cut (the fork's 0.75 default cuts blocks short)
DRAFT_ARGS = ("--spec-draft-n-max", "8", "--spec-draft-p-min", "0")
CONTEXT_CHARS = 60  # text shown either side of a divergence
AFTER_TOKENS = 12


# -- prompts ----------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Prompt:
    name: str
    text: str


def load_prompts(directory: Path | None = None) -> tuple[Prompt, ...]:
    """The ``*.txt`` files of ``directory`` (default: the committed ci/prompts), by name; each one prompt."""
    if directory is None:
        files = [(f.name, f.read_text(encoding="utf-8")) for f in resources.files("ci").joinpath("prompts").iterdir() if f.name.endswith(".txt")]
    else:
        if not directory.is_dir():
            raise ConfigError(f"--prompts {directory}: not a directory")
        files = [(f.name, f.read_text(encoding="utf-8")) for f in directory.iterdir() if f.suffix == ".txt"]
    prompts = tuple(Prompt(name.removesuffix(".txt"), text) for name, text in sorted(files))
    where = directory or "ci/prompts"
    if not prompts:
        raise ConfigError(f"{where}: no *.txt prompt files")
    for p in prompts:
        if not p.text.strip():
            raise ConfigError(f"{where}/{p.name}.txt: the prompt is empty")
    return prompts


# -- one /completion answer, parsed -----------------------------------------------------------------------------


@dataclass(frozen=True)
class Candidate:
    id: int
    text: str
    logprob: float


@dataclass(frozen=True)
class Token:
    """A generated token with the top candidates (pre-sampling logprobs) the server reported at its position."""

    id: int
    text: str
    top: tuple[Candidate, ...] = ()

    @property
    def margin(self) -> float | None:
        """Top-1 minus top-2 logprob, in nats; None when fewer than two candidates came back."""
        if len(self.top) < 2:
            return None
        return self.top[0].logprob - self.top[1].logprob

    def show(self) -> str:
        return f"{self.text!r} (id {self.id})"


@dataclass(frozen=True)
class Timings:
    prompt_n: int = 0
    prompt_ms: float = 0.0
    predicted_n: int = 0
    predicted_ms: float = 0.0
    draft_n: int = 0  # absent from the answer when nothing was drafted
    draft_n_accepted: int = 0

    def __add__(self, other: Timings) -> Timings:
        return Timings(
            self.prompt_n + other.prompt_n,
            self.prompt_ms + other.prompt_ms,
            self.predicted_n + other.predicted_n,
            self.predicted_ms + other.predicted_ms,
            self.draft_n + other.draft_n,
            self.draft_n_accepted + other.draft_n_accepted,
        )

    @property
    def decode_tps(self) -> float:
        return 1000.0 * self.predicted_n / self.predicted_ms if self.predicted_ms > 0 else 0.0

    @property
    def acceptance(self) -> float:
        return self.draft_n_accepted / self.draft_n if self.draft_n else 0.0

    @property
    def tokens_per_step(self) -> float:
        """Generated tokens per target step: a step yields its accepted drafts plus one token of its own."""
        steps = self.predicted_n - self.draft_n_accepted
        return self.predicted_n / steps if steps > 0 else 0.0


@dataclass(frozen=True)
class Completion:
    tokens: tuple[Token, ...]
    stop_type: str  # "eos", "limit", "word" or "none", as the server reports it
    timings: Timings
    seconds: float = 0.0  # wall time of the request, measured here

    @property
    def text(self) -> str:
        return "".join(t.text for t in self.tokens)


def parse_completion(answer: Mapping[str, Any], leg: str = "server") -> Completion:
    """A ``/completion`` answer with ``return_tokens`` and ``n_probs``; :class:`ServerFailed` names what is missing."""
    ids = answer.get("tokens")
    if not isinstance(ids, list) or not all(isinstance(i, int) for i in ids):
        raise ServerFailed(f"{leg} server: the /completion answer has no token ids (\"tokens\"): this llama-server ignores return_tokens")
    probs = answer.get("completion_probabilities") or []
    if probs and len(probs) != len(ids):
        raise ServerFailed(f"{leg} server: {len(ids)} token ids but {len(probs)} completion_probabilities in one answer")
    tokens = []
    for k, tok_id in enumerate(ids):
        if not probs:
            tokens.append(Token(tok_id, ""))
            continue
        p = probs[k]
        if p.get("id") != tok_id:
            raise ServerFailed(f"{leg} server: token {k} is id {tok_id} but its probabilities are for id {p.get('id')}")
        top = tuple(Candidate(int(c["id"]), str(c.get("token", "")), float(c["logprob"])) for c in p.get("top_logprobs", []))
        tokens.append(Token(tok_id, str(p.get("token", "")), tuple(sorted(top, key=lambda c: -c.logprob))))
    t = answer.get("timings") or {}
    timings = Timings(
        prompt_n=int(t.get("prompt_n", 0)),
        prompt_ms=float(t.get("prompt_ms", 0.0)),
        predicted_n=int(t.get("predicted_n", 0)),
        predicted_ms=float(t.get("predicted_ms", 0.0)),
        draft_n=int(t.get("draft_n", 0)),
        draft_n_accepted=int(t.get("draft_n_accepted", 0)),
    )
    return Completion(tuple(tokens), str(answer.get("stop_type", "none")), timings)


# -- the judge (pure) -------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Segment:
    """Both legs' answers to one request: generated tokens from position ``start`` on."""

    start: int
    baseline: Completion
    drafted: Completion


@dataclass(frozen=True)
class Resume:
    """Ask both legs again: the prompt followed by ``prefix`` (token ids), for ``n_predict`` more tokens."""

    prefix: tuple[int, ...]
    n_predict: int


@dataclass(frozen=True)
class NearTie:
    position: int
    baseline: Token
    drafted: Token
    margin: float

    def describe(self) -> str:
        return f"token {self.position}: baseline {self.baseline.show()} vs drafter {self.drafted.show()}, margin {self.margin:.4f} nats"


@dataclass(frozen=True)
class Divergence:
    """The evidence of a real divergence: where, which tokens, the text around it, the baseline's margin."""

    position: int
    baseline: Token
    drafted: Token
    margin: float | None
    before: str  # the text just before the position (prompt and common output)
    baseline_after: str  # the baseline's text from the position on
    drafted_after: str

    @property
    def runner_up(self) -> bool:
        """Whether the drafter leg chose the baseline's second-best token."""
        return len(self.baseline.top) >= 2 and self.baseline.top[1].id == self.drafted.id

    def describe(self, near_tie: float) -> str:
        margin = "no top-2 logprobs to judge by" if self.margin is None else f"baseline top-2 margin {self.margin:.4f} nats > near-tie {near_tie:g}"
        return f"diverged at token {self.position}: baseline {self.baseline.show()} vs drafter {self.drafted.show()}, {margin}"

    def evidence(self) -> str:
        return f"…{self.before!r} → baseline {self.baseline_after!r} | drafter {self.drafted_after!r}" + (
            " (the drafter took the baseline's runner-up)" if self.runner_up else ""
        )


@dataclass(frozen=True)
class PromptVerdict:
    prompt: str
    status: Status
    message: str
    requested: int
    compared: int  # generated tokens judged equal (near-ties resolved to the baseline's token)
    near_ties: tuple[NearTie, ...] = ()
    divergence: Divergence | None = None
    detail: str = ""
    baseline: Timings = field(default_factory=Timings)
    drafted: Timings = field(default_factory=Timings)
    requests: int = 0  # requests per leg
    seconds: float = 0.0

    @property
    def drafted_anything(self) -> bool:
        return self.drafted.draft_n > 0


NEVER_DRAFTED = "drafter loaded but never drafted"


def judge(prompt: Prompt, segments: Sequence[Segment], requested: int, near_tie: float) -> Resume | PromptVerdict:
    """Either the next request both legs must answer, or the prompt's verdict. Pure: the answers are the input."""
    if not segments:
        return Resume((), requested)
    common: list[Token] = []
    near_ties: list[NearTie] = []
    base_t, draft_t = Timings(), Timings()
    for k, seg in enumerate(segments):
        if seg.start != len(common):
            raise ValueError(f"segment {k} starts at token {seg.start}, the common prefix is {len(common)} tokens")
        last = k == len(segments) - 1
        base_t, draft_t = base_t + seg.baseline.timings, draft_t + seg.drafted.timings
        want = requested - seg.start
        # a speculative step may overshoot n_predict; what was not asked for is not judged
        a, b = seg.baseline.tokens[:want], seg.drafted.tokens[:want]
        i = next((j for j, (x, y) in enumerate(zip(a, b, strict=False)) if x.id != y.id), None)

        verdict = functools.partial(_finish, prompt, requested, near_ties=near_ties, baseline=base_t, drafted=draft_t, requests=len(segments))
        if i is None:
            if not last:
                raise ValueError(f"segment {k} matched to its end, yet segment {k + 1} follows")
            common += a
            covered = len(common)
            if len(a) != len(b):
                short, stop = ("drafter", seg.drafted.stop_type) if len(b) < len(a) else ("baseline", seg.baseline.stop_type)
                n_short, n_long = seg.start + min(len(a), len(b)), seg.start + max(len(a), len(b))
                return verdict(
                    Status.FAILED,
                    f"truncated: the {short} leg stopped after {n_short} tokens (stop: {stop}) where the other went on to {n_long}",
                    compared=n_short,
                )
            ended = seg.baseline.stop_type == "eos" and seg.drafted.stop_type == "eos"
            if len(a) < want and not ended:
                return verdict(
                    Status.ERROR,
                    f"both legs stopped after {covered} of {requested} tokens (stop: {seg.baseline.stop_type}): raise -c or lower --tokens",
                    compared=covered,
                )
            what = f"identical over {covered} tokens" + ("" if covered >= requested else f" (both ended with end-of-generation before {requested})")
            if near_ties:
                what += f" after {len(near_ties)} near-tie(s): " + "; ".join(n.describe() for n in near_ties)
            return verdict(Status.PASSED, what, compared=covered)

        base_tok, draft_tok = a[i], b[i]
        margin = base_tok.margin
        position = seg.start + i
        if margin is not None and margin <= near_tie:
            near_ties.append(NearTie(position, base_tok, draft_tok, margin))
            common += a[: i + 1]
            if not last:
                continue
            baseline_ended = seg.baseline.stop_type == "eos" and i == len(a) - 1
            if len(common) >= requested or baseline_ended:
                what = f"identical over {len(common)} tokens after {len(near_ties)} near-tie(s): " + "; ".join(n.describe() for n in near_ties)
                return verdict(Status.PASSED, what, compared=len(common))
            return Resume(tuple(t.id for t in common), requested - len(common))

        before = prompt.text + "".join(t.text for t in common) + "".join(t.text for t in a[:i])
        div = Divergence(
            position=position,
            baseline=base_tok,
            drafted=draft_tok,
            margin=margin,
            before=before[-CONTEXT_CHARS:],
            baseline_after="".join(t.text for t in a[i : i + AFTER_TOKENS]),
            drafted_after="".join(t.text for t in b[i : i + AFTER_TOKENS]),
        )
        return verdict(Status.FAILED, div.describe(near_tie), div, div.evidence(), compared=position)
    raise AssertionError("unreachable: the last segment always decides")


def _finish(
    prompt: Prompt,
    requested: int,
    status: Status,
    message: str,
    divergence: Divergence | None = None,
    detail: str = "",
    *,
    compared: int,
    near_ties: Sequence[NearTie],
    baseline: Timings,
    drafted: Timings,
    requests: int,
) -> PromptVerdict:
    if drafted.draft_n == 0:
        # greedy equality proves nothing about a drafter that never drafted (`-md` without --spec-type, facts)
        message = f"{NEVER_DRAFTED} (timings.draft_n absent or 0 in {requests} request(s)); {message}"
        if status is Status.PASSED:
            status = Status.FAILED
    return PromptVerdict(prompt.name, status, message, requested, compared, tuple(near_ties), divergence, detail, baseline, drafted, requests)


# -- the plan ---------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Leg:
    """One server of the gate: its model and the launcher options and llama-server args beyond the common ones."""

    name: str  # "baseline" or "drafter"
    model: Path
    serve_options: tuple[str, ...] = ()
    extra: tuple[str, ...] = ()


@dataclass(frozen=True)
class GatePlan:
    baseline: Leg
    drafter: Leg
    prompts: tuple[Prompt, ...]
    llama_server: Path
    device: str = "cpu"
    tokens: int = DEFAULT_TOKENS
    near_tie: float = DEFAULT_NEAR_TIE
    seed: int = DEFAULT_SEED
    context: int = 2048
    drafter_model: Path | None = None  # the drafter GGUF, for the record
    spec_type: str = DEFAULT_SPEC_TYPE
    build_key: str = ""  # of the llama-server under test, for the record
    health_timeout: float = 120.0
    request_timeout: float = 600.0
    start_together: bool | None = None  # None: see overlap_start

    @property
    def overlap_start(self) -> bool:
        """Start both servers at once, except on the CPU: there the two warm-ups fight for the cores (tiny models on
        2 cores: model load 0.010-0.014 s alone, 0.28-0.70 s side by side; both up in 0.21-0.89 s together against
        0.29-0.31 s in turn; benchmarks/equivalence_cost.py --overlap-start, docs/equivalence.md)."""
        return self.start_together if self.start_together is not None else self.device != "cpu"

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
        return ServerLaunch(leg.name, argv, "127.0.0.1", port)

    def body(self, prompt: Prompt, resume: Resume) -> dict[str, Any]:
        """The greedy ``/completion`` request; a resume sends the prompt text followed by the prefix's token ids."""
        return {
            # a mixed list: the text is tokenized (with BOS) and the ids follow as they are (tokenize_mixed)
            "prompt": [prompt.text, *resume.prefix] if resume.prefix else prompt.text,
            "n_predict": resume.n_predict,
            "temperature": 0,
            "top_k": 1,
            "seed": self.seed,
            "cache_prompt": False,
            "n_probs": 2,
            "return_tokens": True,
        }


def gguf_architecture(path: Path) -> str:
    """``general.architecture`` of a GGUF file, read the way the launcher reads it (its header walk: gguf's own
    reader takes seconds over a large vocabulary); a :class:`ConfigError` naming the file otherwise."""
    from serve.errors import ServeError
    from serve.facts import read_facts

    if not path.is_file():
        raise ConfigError(f"{path}: no such file")
    try:
        return read_facts(str(path)).architecture
    except ServeError as exc:
        raise ConfigError(f"{path}: not a GGUF model file ({exc.problem})") from None


def drafter_leg(drafter: Path, spec_type: str | None, model: Path) -> tuple[Leg, str]:
    """The drafter leg: a DFlash drafter through the launcher's ``--dflash`` (its route and recipes); any other
    drafter, or an explicit ``--spec-type``, as ``-md`` plus the speculative args after ``--``."""
    if spec_type is None and gguf_architecture(drafter) == "dflash":
        return Leg("drafter", model, serve_options=("--dflash", str(drafter))), "draft-dflash"
    kind = spec_type or DEFAULT_SPEC_TYPE
    return Leg("drafter", model, extra=("-md", str(drafter), "--spec-type", kind, *DRAFT_ARGS)), kind


def plan(
    *,
    model: Path,
    drafter: Path,
    llama_server: Path,
    spec_type: str | None = None,
    prompts: Sequence[Prompt] | None = None,
    tokens: int = DEFAULT_TOKENS,
    near_tie: float = DEFAULT_NEAR_TIE,
    device: str = "cpu",
    seed: int = DEFAULT_SEED,
    context: int = 2048,
    build_key: str = "",
) -> GatePlan:
    if tokens < 1:
        raise ConfigError(f"--tokens {tokens}: must be at least 1")
    if near_tie < 0:
        raise ConfigError(f"--near-tie {near_tie:g}: must be 0 or more nats")
    for what, path in (("--model", model), ("--drafter", drafter)):
        if not path.is_file():
            raise ConfigError(f"{what} {path}: no such file")
    leg, kind = drafter_leg(drafter, spec_type, model)
    return GatePlan(
        baseline=Leg("baseline", model),
        drafter=leg,
        prompts=tuple(prompts) if prompts is not None else load_prompts(),
        llama_server=llama_server,
        device=device,
        tokens=tokens,
        near_tie=near_tie,
        seed=seed,
        context=context,
        drafter_model=drafter,
        spec_type=kind,
        build_key=build_key,
    )


# -- the run ----------------------------------------------------------------------------------------------------

@contextlib.contextmanager
def servers(the_plan: GatePlan, logs: Path, factory: ServerFactory = default_server) -> Iterator[tuple[LlamaServer, LlamaServer]]:
    """Both legs' servers, always stopped and reaped; started together unless on the CPU (:attr:`GatePlan.overlap_start`)."""
    ports = free_ports(2)
    with contextlib.ExitStack() as stack:
        pair: list[LlamaServer] = []
        for leg, port in zip((the_plan.baseline, the_plan.drafter), ports, strict=True):
            server = factory(the_plan.launch(leg, port), logs / f"{leg.name}.log", the_plan.health_timeout)
            stack.callback(server.stop)
            pair.append(server)
        # runs first on the way out (last in, first out): both get SIGTERM, then each is waited for, so their
        # shutdowns overlap as their start-ups do
        stack.callback(_terminate_all, pair)
        if the_plan.overlap_start:
            for server in pair:
                server.start()
            for server in pair:
                server.wait_healthy()
        else:
            for server in pair:
                server.start()
                server.wait_healthy()
        yield pair[0], pair[1]


def _terminate_all(pair: Sequence[LlamaServer]) -> None:
    for server in pair:
        server.terminate()


def ask(server: LlamaServer, body: Mapping[str, Any], timeout: float) -> Completion:
    t0 = time.monotonic()
    answer = server.completion(body, timeout=timeout)
    return replace(parse_completion(answer, server.launch.name), seconds=time.monotonic() - t0)


def judge_prompt(the_plan: GatePlan, prompt: Prompt, baseline: LlamaServer, drafter: LlamaServer) -> PromptVerdict:
    t0 = time.monotonic()
    segments: list[Segment] = []
    while True:
        step = judge(prompt, segments, the_plan.tokens, the_plan.near_tie)
        if isinstance(step, PromptVerdict):
            return replace(step, seconds=time.monotonic() - t0)
        if segments:
            log.info("%s: near-tie at token %d; both legs resume there", prompt.name, len(step.prefix) - 1)
        body = the_plan.body(prompt, step)
        a = ask(baseline, body, the_plan.request_timeout)
        b = ask(drafter, body, the_plan.request_timeout)
        segments.append(Segment(len(step.prefix), a, b))


def run(the_plan: GatePlan, logs: Path, factory: ServerFactory = default_server) -> GateResult:
    """Start both servers, judge every prompt, stop them; a server problem is an ERROR verdict with its log tail."""
    t0 = time.monotonic()
    verdicts: list[PromptVerdict] = []
    failure: ServerFailed | None = None
    startup: tuple[float, float] = (0.0, 0.0)
    try:
        with servers(the_plan, logs, factory) as (baseline, drafter):
            startup = (baseline.seconds_to_healthy, drafter.seconds_to_healthy)
            for prompt in the_plan.prompts:
                v = judge_prompt(the_plan, prompt, baseline, drafter)
                log.info("%s: %s: %s", prompt.name, v.status.value, v.message)
                verdicts.append(v)
    except ServerFailed as exc:
        failure = exc
    return gate_result(the_plan, verdicts, failure, startup, time.monotonic() - t0)


# -- the result -------------------------------------------------------------------------------------------------


def gate_result(
    the_plan: GatePlan,
    verdicts: Sequence[PromptVerdict],
    failure: ServerFailed | None = None,
    startup: tuple[float, float] = (0.0, 0.0),
    seconds: float = 0.0,
) -> GateResult:
    """The verdicts as a :class:`GateResult`: one case per prompt, metrics per prompt and overall (pure)."""
    cases = [
        CaseResult(
            v.prompt,
            v.status,
            v.message,
            classname=GATE,
            detail="\n".join(x for x in (v.detail, _stats(v)) if x),
            seconds=v.seconds,
        )
        for v in verdicts
    ]
    problems = [f"{v.prompt}: {v.message}" for v in verdicts if not v.status.ok]
    if failure is not None:
        # the prompt that was running gets the error and the log's tail; those after it never ran
        pending = [p for p in the_plan.prompts if p.name not in {v.prompt for v in verdicts}]
        for k, p in enumerate(pending):
            if k == 0:
                cases.append(CaseResult(p.name, Status.ERROR, failure.message, classname=GATE, detail=failure.log_tail))
            else:
                cases.append(CaseResult(p.name, Status.SKIPPED, "not run: a server failed first", classname=GATE))
        problems.append(failure.message + (f"; log tail:\n{failure.log_tail.rstrip()}" if failure.log_tail.strip() else ""))

    base = sum((v.baseline for v in verdicts), Timings())
    drafted = sum((v.drafted for v in verdicts), Timings())
    metrics: list[tuple[str, float]] = [
        ("acceptance", round(drafted.acceptance, 4)),
        ("draft_n", drafted.draft_n),
        ("draft_n_accepted", drafted.draft_n_accepted),
        ("tokens_per_step", round(drafted.tokens_per_step, 3)),
        ("baseline_decode_tps", round(base.decode_tps, 1)),
        ("drafter_decode_tps", round(drafted.decode_tps, 1)),
        ("near_ties", sum(len(v.near_ties) for v in verdicts)),
        ("baseline_start_s", round(startup[0], 3)),
        ("drafter_start_s", round(startup[1], 3)),
    ]
    for v in verdicts:
        metrics += [
            (f"{v.prompt}.compared", v.compared),
            (f"{v.prompt}.near_ties", len(v.near_ties)),
            (f"{v.prompt}.acceptance", round(v.drafted.acceptance, 4)),
            (f"{v.prompt}.tokens_per_step", round(v.drafted.tokens_per_step, 3)),
            (f"{v.prompt}.baseline_decode_tps", round(v.baseline.decode_tps, 1)),
            (f"{v.prompt}.drafter_decode_tps", round(v.drafted.decode_tps, 1)),
        ]
        for n in v.near_ties:
            metrics.append((f"{v.prompt}.near_tie_at_{n.position}.margin", round(n.margin, 6)))
        if v.divergence is not None:
            metrics.append((f"{v.prompt}.divergence_position", v.divergence.position))
            if v.divergence.margin is not None:
                metrics.append((f"{v.prompt}.divergence_margin", round(v.divergence.margin, 6)))
    properties = (
        ("model", str(the_plan.baseline.model)),
        ("drafter", str(the_plan.drafter_model or "")),
        ("drafter_leg_model", str(the_plan.drafter.model)),
        ("llama_server", str(the_plan.llama_server)),
        ("device", the_plan.device),
        ("spec_type", the_plan.spec_type),
        ("tokens", str(the_plan.tokens)),
        ("near_tie_nats", f"{the_plan.near_tie:g}"),
        ("seed", str(the_plan.seed)),
        ("acceptance", f"{drafted.draft_n_accepted}/{drafted.draft_n}"),
        ("build_key", the_plan.build_key),
    )
    status = _overall(cases, failure)
    return GateResult(
        gate=GATE,
        status=status,
        summary=_summary(status, verdicts, the_plan, drafted, failure),
        cases=tuple(cases),
        problems=tuple(problems),
        counts=case_counts(cases),
        properties=properties,
        metrics=tuple(metrics),
        seconds=seconds,
    )


def _overall(cases: Sequence[CaseResult], failure: ServerFailed | None) -> Status:
    if failure is not None or any(c.status is Status.ERROR for c in cases):
        return Status.ERROR
    if not cases or any(c.status is not Status.PASSED for c in cases):
        return Status.FAILED
    return Status.PASSED


def _summary(status: Status, verdicts: Sequence[PromptVerdict], the_plan: GatePlan, drafted: Timings, failure: ServerFailed | None) -> str:
    passed = sum(v.status.ok for v in verdicts)
    ties = sum(len(v.near_ties) for v in verdicts)
    head = f"{GATE}: {status.value.upper()}: {passed}/{len(the_plan.prompts)} prompts equal over {the_plan.tokens} tokens"
    head += f" ({ties} near-tie(s) at <= {the_plan.near_tie:g} nats)"
    if drafted.draft_n:
        head += f", acceptance {drafted.draft_n_accepted}/{drafted.draft_n} ({100 * drafted.acceptance:.1f}%), {drafted.tokens_per_step:.2f} tokens/step"
    if failure is not None:
        head += f"; {failure.message}"
    return head


def _stats(v: PromptVerdict) -> str:
    return (
        f"compared {v.compared}/{v.requested} tokens in {v.requests} request(s) per leg; "
        f"drafted {v.drafted.draft_n}, accepted {v.drafted.draft_n_accepted} ({100 * v.drafted.acceptance:.1f}%), "
        f"{v.drafted.tokens_per_step:.2f} tokens/step; decode {v.baseline.decode_tps:.1f} t/s baseline, {v.drafted.decode_tps:.1f} t/s drafter"
    )
