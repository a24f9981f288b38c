"""The greedy-equivalence gate: the drafter must not change what the model says, and must really draft.

Two llama-servers (through the serve launcher), a baseline and a drafter leg; each prompt goes to both as a greedy
``/completion`` and :func:`judge` compares the token ids. At the first difference the baseline's top-2 logprob margin
decides: at or under the near-tie threshold both legs resume from the common prefix plus the baseline's token; above
it the gate fails with the evidence (exact equality alone fails a correct GPU build at near-ties).
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import json
import logging
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from ci.errors import ServerFailed
from ci.files import sha256_file
from ci.gates.equivalence import NAME
from ci.gates.equivalence.judge import (
    Completion,
    PromptVerdict,
    Segment,
    Timings,
    evidence_shortfall,
    judge,
    parse_completion,
    run_shortfall,
)
from ci.gates.equivalence.plan import EquivalencePlan
from ci.gates.results import CaseResult, GateResult, Status, case_counts
from ci.gates.serving.llama import LlamaServer, ServerFactory, default_server, free_ports
from ci.gates.serving.prompts import Prompt

log = logging.getLogger("onebit-ci")

GATE = NAME
PROBLEM = "{prompt}: {message}"
WITH_LOG_TAIL = "{problem}; log tail:\n{log_tail}"
# the summary: SUMMARY (what held: the prompts whose output was identical), SUMMARY_ACCEPTANCE when anything was
# drafted, then what failed beside the output: SUMMARY_NEVER_DRAFTED, SUMMARY_BELOW_FLOORS, SUMMARY_RUN_BELOW_FLOOR.
# A far drafter whose every prompt was identical but drafted too little had read "0/3 prompts equal" (issue 37).
SUMMARY = "{status}: {identical}/{prompts} prompts identical over {tokens} tokens ({near_ties} near-tie(s) at <= {near_tie:g} nats)"
SUMMARY_ACCEPTANCE = ", acceptance {accepted}/{drafted} ({percent:.1f}%), {tokens_per_step:.2f} tokens/step"
SUMMARY_NEVER_DRAFTED = "; the drafter never drafted on {count}"
SUMMARY_BELOW_FLOORS = "; evidence below the floors on {count} (equivalence.floors)"
# a model file that is not, after the run, the file hashed before it: what the servers loaded is not what the record names
MODEL_CHANGED = "the {leg} model {path} changed while the gate ran (sha256 {judged} when planned, {now} after): the record cannot name what the servers ran"
SUMMARY_RUN_BELOW_FLOOR = "; the run's acceptance below the floor {floor:g}% (equivalence.floors.acceptance)"


# -- the run ----------------------------------------------------------------------------------------------------

@contextlib.contextmanager
def servers(equivalence_plan: EquivalencePlan, logs: Path, factory: ServerFactory = default_server) -> Iterator[tuple[LlamaServer, LlamaServer]]:
    """Both legs' servers (:func:`shared_servers` for one plan), always stopped and reaped; either's failure raised."""
    with shared_servers([equivalence_plan], [logs], factory) as (baseline, (drafter,)):
        if isinstance(drafter, ServerFailed):
            raise drafter
        yield baseline, drafter


def _terminate_all(started: Sequence[LlamaServer]) -> None:
    for server in started:
        server.terminate()


_PAIR = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="onebit-drafter-leg")


def ask(server: LlamaServer, body: Mapping[str, Any], timeout: float, draft_max: int = 0) -> Completion:
    t0 = time.monotonic()
    answer = server.completion(body, timeout=timeout)
    return replace(parse_completion(answer, server.launch.name, draft_max), seconds=time.monotonic() - t0)


def _baseline_answer(server: LlamaServer, body: Mapping[str, Any], timeout: float, answers: dict[str, Completion] | None) -> Completion:
    """The baseline's answer to ``body``: asked, or the one it gave the same request before (``answers``, kept across
    plans that share the server; no cache_prompt, so an answer does not depend on what the server answered before)."""
    if answers is None:
        return ask(server, body, timeout)
    key = json.dumps(body, sort_keys=True)
    if key not in answers:
        answers[key] = ask(server, body, timeout)
    return answers[key]


def judge_prompt(
    equivalence_plan: EquivalencePlan,
    prompt: Prompt,
    baseline: LlamaServer,
    drafter: LlamaServer,
    answers: dict[str, Completion] | None = None,
) -> PromptVerdict:
    t0 = time.monotonic()
    segments: list[Segment] = []
    while True:
        step = judge(prompt, segments, equivalence_plan.tokens, equivalence_plan.near_tie, equivalence_plan.floors)
        if isinstance(step, PromptVerdict):
            return replace(step, seconds=time.monotonic() - t0)
        if segments:
            log.info("%s: near-tie at token %d; both legs resume there", prompt.name, len(step.prefix) - 1)
        body = equivalence_plan.body(prompt, step)
        if not equivalence_plan.overlap_start:
            # on the CPU one after the other: two servers' threads on the same cores slow each other 100-fold
            # (3 prompts x 256 tokens: 133.8 s side by side against 1.9 s in turn; benchmarks/equivalence_cost.py)
            a = _baseline_answer(baseline, body, equivalence_plan.request_timeout, answers)
            b = ask(drafter, body, equivalence_plan.drafter_timeout(a.seconds), equivalence_plan.draft_max)
        else:
            # on a GPU both legs at once: separate processes give the same greedy answers either way. That it saves
            # time there is not shown: on the H200 four whole legs at once took as long as in turn (docs/gates.md)
            later = _PAIR.submit(ask, drafter, body, equivalence_plan.drafter_timeout(None), equivalence_plan.draft_max)
            try:
                a = _baseline_answer(baseline, body, equivalence_plan.request_timeout, answers)
            finally:
                b = later.result()
        segments.append(Segment(len(step.prefix), a, b))


def baseline_launch(p: EquivalencePlan) -> tuple[object, ...]:
    """What the baseline server's launch depends on: plans equal in it can share one (:func:`run_shared`)."""
    return (p.baseline, p.llama_server, p.device, p.context, p.health_timeout, p.overlap_start)


def shares_baseline(a: EquivalencePlan, b: EquivalencePlan) -> bool:
    """One baseline server can answer both plans: the same target, launched the same way."""
    return baseline_launch(a) == baseline_launch(b)


@contextlib.contextmanager
def shared_servers(
    plans: Sequence[EquivalencePlan], logs: Sequence[Path], factory: ServerFactory = default_server
) -> Iterator[tuple[LlamaServer, list[LlamaServer | ServerFailed]]]:
    """One baseline server (its log in the first plan's logs) and each plan's drafter server, always stopped and
    reaped; all started at once unless on the CPU (:attr:`EquivalencePlan.overlap_start`). A drafter server that does
    not come up is its plan's :class:`ServerFailed`, in its place; the baseline's is raised."""
    first = plans[0]
    ports = free_ports(1 + len(plans))
    with contextlib.ExitStack() as stack:
        made: list[LlamaServer] = []
        for plan, leg, port, directory in [(first, first.baseline, ports[0], logs[0])] + [
            (p, p.drafter, port, log) for p, port, log in zip(plans, ports[1:], logs, strict=True)
        ]:
            server = factory(plan.launch(leg, port), directory / f"{leg.name}.log", plan.health_timeout)
            stack.callback(server.stop)
            made.append(server)
        # runs first on the way out (last in, first out): all get SIGTERM, then each is waited for, so their
        # shutdowns overlap as their start-ups do
        stack.callback(_terminate_all, made)
        outcome: list[LlamaServer | ServerFailed] = []
        if first.overlap_start:
            for server in made:
                server.start()
        for server in made:
            try:
                if not first.overlap_start:
                    server.start()
                server.wait_healthy()
                outcome.append(server)
            except ServerFailed as exc:
                if server is made[0]:
                    raise
                outcome.append(exc)
        yield made[0], outcome[1:]


def run(equivalence_plan: EquivalencePlan, logs: Path, factory: ServerFactory = default_server) -> GateResult:
    """Start both servers, judge every prompt, stop them; a server problem is an ERROR verdict with its log tail."""
    return run_shared([equivalence_plan], [logs], factory)[0]


def run_shared(plans: Sequence[EquivalencePlan], logs: Sequence[Path], factory: ServerFactory = default_server) -> list[GateResult]:
    """:func:`run` for plans that share one baseline server (:func:`shares_baseline`), each with its drafter server:
    every server is started at once, so a GPU pays for start-up once (3.1 s a llama-server on the H200's CUDA,
    docs/gates.md), and a request the baseline has answered is not asked again. Each plan's result is what
    :func:`run` gives it alone; a drafter server's failure is its plan's error, the baseline's every plan's."""
    if not plans:
        return []
    if any(not shares_baseline(plans[0], p) for p in plans[1:]):
        raise ValueError("run_shared: the plans do not share a baseline launch")  # a caller's bug, not the user's
    t0 = time.monotonic()
    results: list[GateResult] = []
    answers: dict[str, Completion] = {}
    try:
        with shared_servers(plans, logs, factory) as (baseline, drafters):
            started = time.monotonic() - t0
            for plan, drafter in zip(plans, drafters, strict=True):
                t1 = time.monotonic()
                spent = started if not results else 0.0  # the start-up is the first plan's
                if isinstance(drafter, ServerFailed):
                    results.append(gate_result(plan, [], drafter, (baseline.seconds_to_healthy, 0.0), spent + time.monotonic() - t1))
                    continue
                verdicts, failure = _judge_all(plan, baseline, drafter, answers)
                startup = (baseline.seconds_to_healthy, drafter.seconds_to_healthy)
                results.append(gate_result(plan, verdicts, failure, startup, spent + time.monotonic() - t1))
    except ServerFailed as exc:  # the baseline did not come up: no plan ran
        elapsed = time.monotonic() - t0
        return [gate_result(p, [], exc, (0.0, 0.0), elapsed if k == 0 else 0.0) for k, p in enumerate(plans)]
    now: dict[Path, str] = {}
    return [models_held(plan, result, now) for plan, result in zip(plans, results, strict=True)]


def sha256_now(path: Path) -> str:
    """The file's sha256 as it is now, read whole (no cache: the stamp a swap keeps is not evidence)."""
    try:
        return sha256_file(path)
    except OSError:
        return "gone"


def models_held(plan: EquivalencePlan, result: GateResult, now: dict[Path, str]) -> GateResult:
    """``result``, or an ERROR naming each model file that is not, after the run, the file the plan hashed before it
    (a drafter renamed over while the servers ran); ``now`` keeps each file's digest across the plans of one run."""
    if plan.identity is None:
        return result
    changed = []
    for leg, path, judged in (("target", plan.baseline.model, plan.identity.model_sha256), ("drafter", plan.drafter_model, plan.identity.drafter_sha256)):
        if path is None:
            continue
        if Path(path) not in now:  # each file once across the plans of a run
            now[Path(path)] = sha256_now(Path(path))
        digest = now[Path(path)]
        if digest != judged:
            changed.append(MODEL_CHANGED.format(leg=leg, path=path, judged=judged[:12], now=digest[:12]))
    if not changed:
        return result
    return replace(result, status=Status.ERROR, problems=(*changed, *result.problems), summary=f"ERROR: {changed[0]}")


def _judge_all(
    plan: EquivalencePlan, baseline: LlamaServer, drafter: LlamaServer, answers: dict[str, Completion]
) -> tuple[list[PromptVerdict], ServerFailed | None]:
    verdicts: list[PromptVerdict] = []
    try:
        for prompt in plan.prompts:
            for server in (baseline, drafter):  # the answers must come from the servers this gate started
                server.check_own()
            v = judge_prompt(plan, prompt, baseline, drafter, answers)
            log.info("%s: %s: %s", prompt.name, v.status.value, v.message)
            verdicts.append(v)
            for server in (baseline, drafter):
                server.check_own()
    except ServerFailed as exc:
        return verdicts, exc
    return verdicts, None


# -- the result -------------------------------------------------------------------------------------------------


def gate_result(
    equivalence_plan: EquivalencePlan,
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
    problems = [PROBLEM.format(prompt=v.prompt, message=v.message) for v in verdicts if not v.status.ok]
    if failure is not None:
        # the prompt that was running gets the error and the log's tail; those after it never ran
        pending = [p for p in equivalence_plan.prompts if p.name not in {v.prompt for v in verdicts}]
        for k, p in enumerate(pending):
            if k == 0:
                cases.append(CaseResult(p.name, Status.ERROR, failure.message, classname=GATE, detail=failure.log_tail))
            else:
                cases.append(CaseResult(p.name, Status.SKIPPED, "not run: a server failed first", classname=GATE))
        tail = failure.log_tail.rstrip()
        problems.append(WITH_LOG_TAIL.format(problem=failure.message, log_tail=tail) if tail.strip() else failure.message)

    base = sum((v.baseline for v in verdicts), Timings())
    drafted = sum((v.drafted for v in verdicts), Timings())
    # a failed prompt says more; the run's acceptance is judged when every prompt passed
    short = run_shortfall(drafted, equivalence_plan.floors) if failure is None and verdicts and all(v.status.ok for v in verdicts) else ""
    if short:
        problems.append(short)
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
            (f"{v.prompt}.draft_n", v.drafted.draft_n),
            (f"{v.prompt}.draft_n_accepted", v.drafted.draft_n_accepted),
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
        ("model", str(equivalence_plan.baseline.model)),
        ("drafter", str(equivalence_plan.drafter_model or "")),
        ("drafter_leg_model", str(equivalence_plan.drafter.model)),
        ("llama_server", str(equivalence_plan.llama_server)),
        ("device", equivalence_plan.device),
        ("spec_type", equivalence_plan.spec_type),
        ("tokens", str(equivalence_plan.tokens)),
        ("near_tie_nats", f"{equivalence_plan.near_tie:g}"),
        ("seed", str(equivalence_plan.seed)),
        ("acceptance", f"{drafted.draft_n_accepted}/{drafted.draft_n}"),
        ("floors", equivalence_plan.floors.describe()),
        ("build_key", equivalence_plan.build_key),
        *(equivalence_plan.identity.properties() if equivalence_plan.identity else ()),
    )
    status = _overall(cases, failure)
    if short and status is Status.PASSED:
        status = Status.FAILED
    return GateResult(
        gate=GATE,
        status=status,
        summary=_summary(status, verdicts, equivalence_plan, drafted, failure),
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


def _summary(status: Status, verdicts: Sequence[PromptVerdict], equivalence_plan: EquivalencePlan, drafted: Timings, failure: ServerFailed | None) -> str:
    """What held first (the prompts whose output was identical over every token asked for), then what did not beside
    the output: a drafter that never drafted, evidence below the floors per prompt, the run's acceptance."""
    identical = sum(v.divergence is None and v.compared >= v.requested for v in verdicts)
    ties = sum(len(v.near_ties) for v in verdicts)
    head = SUMMARY.format(
        status=status.value.upper(), identical=identical, prompts=len(equivalence_plan.prompts), tokens=equivalence_plan.tokens,
        near_ties=ties, near_tie=equivalence_plan.near_tie,
    )  # fmt: skip
    if drafted.draft_n:
        head += SUMMARY_ACCEPTANCE.format(
            accepted=drafted.draft_n_accepted, drafted=drafted.draft_n, percent=100 * drafted.acceptance, tokens_per_step=drafted.tokens_per_step
        )
    never = sum(v.drafted.draft_n == 0 for v in verdicts)
    below = sum(v.drafted.draft_n > 0 and bool(evidence_shortfall(v.drafted, v.requests, equivalence_plan.floors)) for v in verdicts)
    if never:
        head += SUMMARY_NEVER_DRAFTED.format(count=never)
    if below:
        head += SUMMARY_BELOW_FLOORS.format(count=below)
    if failure is None and verdicts and all(v.status.ok for v in verdicts) and run_shortfall(drafted, equivalence_plan.floors):
        head += SUMMARY_RUN_BELOW_FLOOR.format(floor=100 * equivalence_plan.floors.acceptance)
    if failure is not None:
        head += f"; {failure.message}"
    return head


def _stats(v: PromptVerdict) -> str:
    return (
        f"compared {v.compared}/{v.requested} tokens in {v.requests} request(s) per leg; "
        f"drafted {v.drafted.draft_n}, accepted {v.drafted.draft_n_accepted} ({100 * v.drafted.acceptance:.1f}%), "
        f"{v.drafted.tokens_per_step:.2f} tokens/step; decode {v.baseline.decode_tps:.1f} t/s baseline, {v.drafted.decode_tps:.1f} t/s drafter"
    )
