"""The greedy-equivalence judge, pure: one ``/completion`` answer parsed, and two legs' answers compared.

:func:`judge` compares the token ids; at the first difference the baseline's top-2 logprob margin decides: at or
under the near-tie threshold both legs resume from the common prefix plus the baseline's token (exact equality alone
would fail a correct GPU build), above it the prompt fails with the evidence. A NaN or inf figure (null in the
server's JSON) fails the prompt before anything is compared: NaN logits can still pick equal tokens.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ci.errors import ServerFailed
from ci.gates.results import Status
from ci.gates.serving import drafting
from ci.gates.serving.prompts import Prompt
from ci.pin.pins import Floors

CONTEXT_CHARS = 60  # text shown either side of a divergence
AFTER_TOKENS = 12

# Messages, shared with the tests that match on them (tests/support/messages.py)
NO_TOKEN_IDS = '{leg} server: the /completion answer has no token ids ("tokens"): this llama-server ignores return_tokens'
PROBABILITIES_ELSEWHERE = "{leg} server: token {index} is id {id} but its probabilities are for id {other}"
SEGMENT_ASTRAY = "segment {segment} starts at token {start}, the common prefix is {common} tokens"
TOKEN = "{text!r} (id {id})"
# a figure that is NaN or inf: NON_FINITE, its {what} a NON_FINITE_FIELD, whose field is the token's own key or a CANDIDATE_FIELD
NON_FINITE = "the {leg} leg's token {position} {token} has {what}: not a finite number, so the legs were not compared"
NON_FINITE_FIELD = "{field} = {value}"
CANDIDATE_FIELD = "{group}[{index}] (id {id}) {key}"
NULL_FIGURE = "null (how the server's JSON writes NaN and inf)"
NEAR_TIE = "token {position}: baseline {baseline} vs drafter {drafted}, margin {margin:.4f} nats"
DIVERGED = "diverged at token {position}: baseline {baseline} vs drafter {drafted}, {margin}"
NO_MARGIN = "no top-2 logprobs to judge by"
MARGIN_ABOVE = "baseline top-2 margin {margin:.4f} nats > near-tie {near_tie:g}"
EVIDENCE = "…{before!r} → baseline {baseline!r} | drafter {drafted!r}"
RUNNER_UP = " (the drafter took the baseline's runner-up)"
IDENTICAL = "identical over {tokens} tokens"
IDENTICAL_AFTER_NEAR_TIES = "identical over {tokens} tokens after {count} near-tie(s): {near_ties}"
TRUNCATED = "truncated: the {leg} leg stopped after {stopped} tokens (stop: {stop}) where the other went on to {other}"
NEVER_DRAFTED = "drafter loaded but never drafted"
NEVER_ACCEPTED = "no draft was accepted"
NEVER_REJECTED = "no draft was rejected"
INSUFFICIENT = "insufficient evidence"
DRAFTED_NOTHING = NEVER_DRAFTED + " (timings.draft_n absent or 0 in {requests} request(s)); {verdict}"
TOO_FEW_COMPARED = INSUFFICIENT + ": {compared} of {requested} tokens compared (both legs stopped: {stop}); raise -c or lower --tokens"
SOME_ACCEPTED = "{accepted} drafted tokens accepted"
SOME_REJECTED = "{rejected} drafted tokens rejected"
TOO_FEW_ACCEPTED = (
    INSUFFICIENT + ": {what} ({accepted} of {drafted} drafted tokens in {requests} request(s)), below the floor {floor} "
    "(equivalence.floors.accepted): the accept path ran too little"
)
TOO_FEW_REJECTED = (
    INSUFFICIENT + ": {what} ({rejected} of {drafted} drafted tokens in {requests} request(s)), below the floor {floor} "
    "(equivalence.floors.rejected): the rollback path ran too little"
)
RUN_TOO_FEW = (
    INSUFFICIENT + ": the run's acceptance {accepted}/{drafted} ({percent:.1f}%) is below the floor {floor:g}% "
    "(equivalence.floors.acceptance): a drafter that almost never drafts right proves little"
)


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
    non_finite: str = ""  # the first figure of its answer that is NaN or inf (a NON_FINITE_FIELD), or ""

    @property
    def margin(self) -> float | None:
        """Top-1 minus top-2 logprob, in nats; None when fewer than two candidates came back."""
        if len(self.top) < 2:
            return None
        return self.top[0].logprob - self.top[1].logprob

    def show(self) -> str:
        return TOKEN.format(text=self.text, id=self.id)


@dataclass(frozen=True)
class Timings:
    prompt_n: int = 0
    prompt_ms: float = 0.0
    predicted_n: int = 0
    predicted_ms: float = 0.0
    draft_n: int = 0  # absent from the answer when nothing was drafted
    draft_n_accepted: int = 0
    draft_max: int = 0  # tokens drafted per step at most, when known (not in the answer: the leg's setting)

    def __add__(self, other: Timings) -> Timings:
        return Timings(
            self.prompt_n + other.prompt_n,
            self.prompt_ms + other.prompt_ms,
            self.predicted_n + other.predicted_n,
            self.predicted_ms + other.predicted_ms,
            self.draft_n + other.draft_n,
            self.draft_n_accepted + other.draft_n_accepted,
            max(self.draft_max, other.draft_max),
        )

    @property
    def decode_tps(self) -> float:
        return 1000.0 * self.predicted_n / self.predicted_ms if self.predicted_ms > 0 else 0.0

    @property
    def acceptance(self) -> float:
        return drafting.acceptance(self.draft_n, self.draft_n_accepted)

    @property
    def steps(self) -> int:
        """Target steps (:func:`ci.gates.serving.drafting.steps`)."""
        return drafting.steps(self.predicted_n, self.draft_n, self.draft_n_accepted, self.draft_max)

    @property
    def tokens_per_step(self) -> float:
        """Generated tokens per target step."""
        return drafting.tokens_per_step(self.predicted_n, self.draft_n, self.draft_n_accepted, self.draft_max)


@dataclass(frozen=True)
class Completion:
    tokens: tuple[Token, ...]
    stop_type: str  # "eos", "limit", "word" or "none", as the server reports it
    timings: Timings
    seconds: float = 0.0  # wall time of the request, measured here

    @property
    def text(self) -> str:
        return "".join(t.text for t in self.tokens)


def parse_completion(answer: Mapping[str, Any], leg: str = "server", draft_max: int = 0) -> Completion:
    """A ``/completion`` answer with ``return_tokens`` and ``n_probs``; :class:`ServerFailed` names what is missing."""
    ids = answer.get("tokens")
    if not isinstance(ids, list) or not all(isinstance(i, int) for i in ids):
        raise ServerFailed(NO_TOKEN_IDS.format(leg=leg))
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
            raise ServerFailed(PROBABILITIES_ELSEWHERE.format(leg=leg, index=k, id=tok_id, other=p.get("id")))
        top = tuple(Candidate(int(c["id"]), str(c.get("token", "")), _figure(c["logprob"])) for c in p.get("top_logprobs", []))
        tokens.append(Token(tok_id, str(p.get("token", "")), tuple(sorted(top, key=lambda c: -c.logprob)), _non_finite(p)))
    t = answer.get("timings") or {}
    timings = Timings(
        prompt_n=int(t.get("prompt_n", 0)),
        prompt_ms=float(t.get("prompt_ms", 0.0)),
        predicted_n=int(t.get("predicted_n", 0)),
        predicted_ms=float(t.get("predicted_ms", 0.0)),
        draft_n=int(t.get("draft_n", 0)),
        draft_n_accepted=int(t.get("draft_n_accepted", 0)),
        draft_max=draft_max,
    )
    return Completion(tuple(tokens), str(answer.get("stop_type", "none")), timings)


_FIGURES = ("logprob", "prob")  # the server's keys: logprobs, or with post_sampling_probs probabilities
_CANDIDATES = ("top_logprobs", "top_probs")


def _figure(value: Any) -> float:
    """A figure of the answer as a float: null (the server's NaN or inf) as NaN."""
    return math.nan if value is None else float(value)


def _shown(value: Any) -> str:
    return NULL_FIGURE if value is None else str(value)


def _non_finite(entry: Mapping[str, Any]) -> str:
    """The first figure of one token's probabilities that is NaN or inf, as a NON_FINITE_FIELD; "" when there is none."""
    for key in _FIGURES:
        if key in entry and not math.isfinite(_figure(entry[key])):
            return NON_FINITE_FIELD.format(field=key, value=_shown(entry[key]))
    for group in _CANDIDATES:
        for index, c in enumerate(entry.get(group) or ()):
            for key in _FIGURES:
                if key in c and not math.isfinite(_figure(c[key])):
                    field = CANDIDATE_FIELD.format(group=group, index=index, id=c.get("id"), key=key)
                    return NON_FINITE_FIELD.format(field=field, value=_shown(c[key]))
    return ""


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
        return NEAR_TIE.format(position=self.position, baseline=self.baseline.show(), drafted=self.drafted.show(), margin=self.margin)


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
        margin = NO_MARGIN if self.margin is None else MARGIN_ABOVE.format(margin=self.margin, near_tie=near_tie)
        return DIVERGED.format(position=self.position, baseline=self.baseline.show(), drafted=self.drafted.show(), margin=margin)

    def evidence(self) -> str:
        return EVIDENCE.format(before=self.before, baseline=self.baseline_after, drafted=self.drafted_after) + (RUNNER_UP if self.runner_up else "")


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


DEFAULT_FLOORS = Floors()


def judge(prompt: Prompt, segments: Sequence[Segment], requested: int, near_tie: float, floors: Floors = DEFAULT_FLOORS) -> Resume | PromptVerdict:
    """Either the next request both legs must answer, or the prompt's verdict. Pure: the answers are the input."""
    if not segments:
        return Resume((), requested)
    common: list[Token] = []
    near_ties: list[NearTie] = []
    base_t, draft_t = Timings(), Timings()
    for k, seg in enumerate(segments):
        if seg.start != len(common):
            raise ValueError(SEGMENT_ASTRAY.format(segment=k, start=seg.start, common=len(common)))
        last = k == len(segments) - 1
        base_t, draft_t = base_t + seg.baseline.timings, draft_t + seg.drafted.timings
        want = requested - seg.start
        # a speculative step may overshoot n_predict; what was not asked for is not judged
        a, b = seg.baseline.tokens[:want], seg.drafted.tokens[:want]
        verdict = functools.partial(_finish, prompt, requested, near_ties=near_ties, baseline=base_t, drafted=draft_t, requests=len(segments), floors=floors)
        broken = [(j, leg, t) for leg, part in (("baseline", a), ("drafter", b)) for j, t in enumerate(part) if t.non_finite]
        if broken:
            j, leg, t = min(broken, key=lambda x: x[0])
            return verdict(Status.FAILED, NON_FINITE.format(leg=leg, position=seg.start + j, token=t.show(), what=t.non_finite), compared=len(common))
        i = next((j for j, (x, y) in enumerate(zip(a, b, strict=False)) if x.id != y.id), None)

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
                    TRUNCATED.format(leg=short, stopped=n_short, stop=stop, other=n_long),
                    compared=n_short,
                )
            if len(a) < want:
                # the end of generation is ignored, so this is a full context or a stop word: too little to certify
                return verdict(
                    Status.FAILED,
                    TOO_FEW_COMPARED.format(compared=covered, requested=requested, stop=seg.baseline.stop_type),
                    compared=covered,
                )
            what = _identical(covered, near_ties)
            return verdict(Status.PASSED, what, compared=covered)

        base_tok, draft_tok = a[i], b[i]
        margin = base_tok.margin
        position = seg.start + i
        if margin is not None and margin <= near_tie:
            near_ties.append(NearTie(position, base_tok, draft_tok, margin))
            common += a[: i + 1]
            if not last:
                continue
            if len(common) >= requested:
                what = _identical(len(common), near_ties)
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


def _identical(tokens: int, near_ties: Sequence[NearTie]) -> str:
    if not near_ties:
        return IDENTICAL.format(tokens=tokens)
    return IDENTICAL_AFTER_NEAR_TIES.format(tokens=tokens, count=len(near_ties), near_ties="; ".join(n.describe() for n in near_ties))


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
    floors: Floors,
) -> PromptVerdict:
    if drafted.draft_n == 0:
        # greedy equality proves nothing about a drafter that never drafted (`-md` without --spec-type, facts)
        message = DRAFTED_NOTHING.format(requests=requests, verdict=message)
        if status is Status.PASSED:
            status = Status.FAILED
    else:
        short = evidence_shortfall(drafted, requests, floors)
        if short:
            if status is Status.PASSED:
                status, message = Status.FAILED, f"{short}; {message}"
            else:  # a divergence says more; the shortfall comes after it
                message = f"{message}; {short}"
    return PromptVerdict(prompt.name, status, message, requested, compared, tuple(near_ties), divergence, detail, baseline, drafted, requests)


def evidence_shortfall(drafted: Timings, requests: int, floors: Floors) -> str:
    """Why one prompt's drafter leg proves too little (pins.yaml ``equivalence.floors``), or "": the accept path and
    the rollback path must each have run at least the floor's number of drafted tokens."""
    accepted, rejected = drafted.draft_n_accepted, drafted.draft_n - drafted.draft_n_accepted
    if accepted < floors.accepted:
        what = NEVER_ACCEPTED if accepted == 0 else SOME_ACCEPTED.format(accepted=accepted)
        return TOO_FEW_ACCEPTED.format(what=what, accepted=accepted, drafted=drafted.draft_n, requests=requests, floor=floors.accepted)
    if rejected < floors.rejected:
        what = NEVER_REJECTED if rejected == 0 else SOME_REJECTED.format(rejected=rejected)
        return TOO_FEW_REJECTED.format(what=what, rejected=rejected, drafted=drafted.draft_n, requests=requests, floor=floors.rejected)
    return ""


def run_shortfall(drafted: Timings, floors: Floors) -> str:
    """Why the whole run's acceptance proves too little, or ""."""
    if drafted.draft_n and drafted.acceptance < floors.acceptance:
        return RUN_TOO_FEW.format(accepted=drafted.draft_n_accepted, drafted=drafted.draft_n, percent=100 * drafted.acceptance, floor=100 * floors.acceptance)
    return ""
