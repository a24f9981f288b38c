"""The judge on real recorded answers (tiny target, CPU llama-server, build 11434), edited where a case needs a
difference the CPU does not make: a near-tie flip is the baseline's runner-up put in the drafter leg's stream."""

from __future__ import annotations

import re
from dataclasses import replace

import pytest

from ci.defaults import NEAR_TIE as DEFAULT_NEAR_TIE
from ci.errors import ServerFailed
from ci.gates.equivalence import judge as ej
from ci.gates.equivalence.judge import (
    NEVER_ACCEPTED,
    Completion,
    PromptVerdict,
    Resume,
    Segment,
    Timings,
    Token,
    judge,
    parse_completion,
    run_shortfall,
)
from ci.gates.results import Status
from ci.pin.pins import Floors
from tests.support.equivalence import Recorded
from tests.support.messages import said


def flip(c: Completion, at: int, baseline: Completion) -> Completion:
    """The drafter leg's ``c`` with the token at ``at`` replaced by the baseline's runner-up there: what a GPU
    near-tie looks like. (The drafter leg's own answer carries no top logprobs past its first token in this build.)"""
    runner_up = baseline.tokens[at].top[1]
    return replace(c, tokens=(*c.tokens[:at], Token(runner_up.id, runner_up.text), *c.tokens[at + 1 :]))


def runner_up(t: Token) -> Token:
    """The token a :func:`flip` puts in the drafter leg's stream in place of ``t``."""
    return Token(t.top[1].id, t.top[1].text)


def shown(t: Token) -> str:
    return ej.TOKEN.format(text=t.text, id=t.id)


def cut(c: Completion, n: int = 40) -> Completion:
    return replace(c, tokens=c.tokens[:n], stop_type="limit")


def verdict(step: Resume | PromptVerdict) -> PromptVerdict:
    assert isinstance(step, PromptVerdict), step
    return step


def test_no_segments_asks_for_the_whole_run(recorded: Recorded) -> None:
    assert judge(recorded.prompt, [], 64, DEFAULT_NEAR_TIE) == Resume((), 64)


def test_equal_streams_pass_with_the_drafting_figures(recorded: Recorded) -> None:
    seg = Segment(0, recorded.answer("baseline@0"), recorded.answer("drafter@0"))
    v = verdict(judge(recorded.prompt, [seg], 64, DEFAULT_NEAR_TIE))
    assert v.status is Status.PASSED
    assert v.message == ej.IDENTICAL.format(tokens=64)
    assert v.compared == 64
    assert v.near_ties == ()
    d = recorded.raw("drafter@0")["timings"]
    assert (v.drafted.draft_n, v.drafted.draft_n_accepted) == (d["draft_n"], d["draft_n_accepted"])
    assert v.drafted.draft_n > 0
    assert v.drafted.tokens_per_step == pytest.approx(64 / (64 - d["draft_n_accepted"]))
    assert v.baseline.decode_tps == pytest.approx(1000 * 64 / recorded.raw("baseline@0")["timings"]["predicted_ms"])


def test_the_recorded_positions_are_near_ties(recorded: Recorded) -> None:
    base = recorded.answer("baseline@0")
    m27, m45 = base.tokens[27].margin, base.tokens[45].margin
    assert m27 is not None
    assert 0 < m27 <= DEFAULT_NEAR_TIE
    assert m45 is not None
    assert 0 < m45 <= DEFAULT_NEAR_TIE


def test_near_tie_then_resume_from_prefix_plus_baseline_token(recorded: Recorded) -> None:
    base0, draft0 = recorded.answer("baseline@0"), recorded.answer("drafter@0")
    segments = [Segment(0, base0, flip(draft0, 27, base0))]
    step = judge(recorded.prompt, segments, 64, DEFAULT_NEAR_TIE)
    # both legs go on from the common prefix and the baseline's own token at the near-tie, for the rest
    assert step == Resume(tuple(t.id for t in base0.tokens[:28]), 36)

    # the answers to that resume, recorded from the real servers; a second near-tie at 45 (17 into the segment)
    segments.append(Segment(28, recorded.answer("baseline@28"), flip(recorded.answer("drafter@28"), 45 - 28, recorded.answer("baseline@28"))))
    step = judge(recorded.prompt, segments, 64, DEFAULT_NEAR_TIE)
    assert step == Resume(tuple(t.id for t in base0.tokens[:46]), 18)

    segments.append(Segment(46, recorded.answer("baseline@46"), recorded.answer("drafter@46")))
    v = verdict(judge(recorded.prompt, segments, 64, DEFAULT_NEAR_TIE))
    assert v.status is Status.PASSED
    assert [n.position for n in v.near_ties] == [27, 45]
    assert [n.baseline.id for n in v.near_ties] == [base0.tokens[27].id, base0.tokens[45].id]
    assert [n.drafted.id for n in v.near_ties] == [base0.tokens[27].top[1].id, base0.tokens[45].top[1].id]
    assert v.near_ties[0].margin == base0.tokens[27].margin
    assert v.compared == 64
    assert v.requests == 3
    ties = [(27, base0.tokens[27]), (45, recorded.answer("baseline@28").tokens[45 - 28])]
    near_ties = "; ".join(
        ej.NEAR_TIE.format(position=at, baseline=shown(t), drafted=shown(runner_up(t)), margin=t.margin) for at, t in ties
    )
    assert v.message == ej.IDENTICAL_AFTER_NEAR_TIES.format(tokens=64, count=2, near_ties=near_ties)
    # drafting is summed over the three requests
    assert v.drafted.draft_n == sum(recorded.raw(k)["timings"]["draft_n"] for k in ("drafter@0", "drafter@28", "drafter@46"))


def test_a_near_tie_does_not_hide_a_later_real_divergence(recorded: Recorded) -> None:
    base0 = recorded.answer("baseline@0")
    resumed = recorded.answer("baseline@28")
    k = next(i for i, t in enumerate(resumed.tokens) if t.margin is not None and t.margin > 1.0)
    segments = [
        Segment(0, base0, flip(recorded.answer("drafter@0"), 27, base0)),
        Segment(28, resumed, flip(recorded.answer("drafter@28"), k, resumed)),
    ]
    v = verdict(judge(recorded.prompt, segments, 64, DEFAULT_NEAR_TIE))
    assert v.status is Status.FAILED
    assert [n.position for n in v.near_ties] == [27]
    assert v.divergence is not None
    assert v.divergence.position == 28 + k
    assert v.divergence.runner_up
    t = resumed.tokens[k]
    margin = ej.MARGIN_ABOVE.format(margin=t.margin, near_tie=DEFAULT_NEAR_TIE)
    assert v.message.startswith(ej.DIVERGED.format(position=28 + k, baseline=shown(t), drafted=shown(runner_up(t)), margin=margin))


def test_real_divergence_fails_with_the_evidence(recorded: Recorded) -> None:
    base, other = recorded.answer("baseline@0"), recorded.answer("other_target@0")
    i = next(j for j, (a, b) in enumerate(zip(base.tokens, other.tokens, strict=True)) if a.id != b.id)
    v = verdict(judge(recorded.prompt, [Segment(0, base, other)], 64, DEFAULT_NEAR_TIE))
    assert v.status is Status.FAILED
    d = v.divergence
    assert d is not None
    assert d.position == i
    assert (d.baseline.id, d.drafted.id) == (base.tokens[i].id, other.tokens[i].id)
    assert d.margin == base.tokens[i].margin
    assert d.margin is not None
    assert d.margin > DEFAULT_NEAR_TIE
    assert d.before == (recorded.prompt.text + base.text[: sum(len(t.text) for t in base.tokens[:i])])[-60:]
    assert d.baseline_after.startswith(base.tokens[i].text)
    assert d.drafted_after.startswith(other.tokens[i].text)
    margin = ej.MARGIN_ABOVE.format(margin=d.margin, near_tie=DEFAULT_NEAR_TIE)
    assert v.message.startswith(ej.DIVERGED.format(position=i, baseline=shown(base.tokens[i]), drafted=shown(other.tokens[i]), margin=margin))
    assert d.evidence() in v.detail


def test_the_threshold_is_inclusive_and_configurable(recorded: Recorded) -> None:
    base0 = recorded.answer("baseline@0")
    m = base0.tokens[27].margin
    assert m is not None
    seg = [Segment(0, base0, flip(recorded.answer("drafter@0"), 27, base0))]
    assert isinstance(judge(recorded.prompt, seg, 64, m), Resume)  # at the threshold: a near-tie
    v = verdict(judge(recorded.prompt, seg, 64, m * 0.999))  # just under it: a real divergence
    assert v.status is Status.FAILED
    assert v.divergence is not None
    assert v.divergence.position == 27


def test_never_drafted_fails_even_when_equal(recorded: Recorded) -> None:
    nodraft = recorded.answer("never_drafts@0")
    assert nodraft.timings.draft_n == 0  # the real answer had no draft_n at all
    assert "draft_n" not in recorded.raw("never_drafts@0")["timings"]
    v = verdict(judge(recorded.prompt, [Segment(0, recorded.answer("baseline@0"), nodraft)], 64, DEFAULT_NEAR_TIE))
    assert v.status is Status.FAILED
    assert v.message == ej.DRAFTED_NOTHING.format(requests=1, verdict=ej.IDENTICAL.format(tokens=64))


@pytest.mark.parametrize("short_leg", ["drafter", "baseline"])
def test_truncated_stream_fails(recorded: Recorded, short_leg: str) -> None:
    base, drafted = recorded.answer("baseline@0"), recorded.answer("drafter@0")
    seg = Segment(0, cut(base), drafted) if short_leg == "baseline" else Segment(0, base, cut(drafted))
    v = verdict(judge(recorded.prompt, [seg], 64, DEFAULT_NEAR_TIE))
    assert v.status is Status.FAILED
    assert v.message == ej.TRUNCATED.format(leg=short_leg, stopped=40, stop="limit", other=64)


def test_both_legs_short_is_insufficient_evidence(recorded: Recorded) -> None:
    seg = Segment(0, cut(recorded.answer("baseline@0")), cut(recorded.answer("drafter@0")))
    v = verdict(judge(recorded.prompt, [seg], 64, DEFAULT_NEAR_TIE))
    assert v.status is Status.FAILED
    assert v.message.startswith(ej.TOO_FEW_COMPARED.format(compared=40, requested=64, stop="limit"))


def test_both_legs_ending_with_eos_early_is_insufficient_evidence_too(recorded: Recorded) -> None:
    # the gate ignores the end of generation; a server that stopped anyway compared too little to certify
    eos = Token(2, "", ())

    def end(c: Completion) -> Completion:
        return replace(c, tokens=(*c.tokens[:3], eos), stop_type="eos")

    seg = Segment(0, end(recorded.answer("baseline@0")), end(recorded.answer("drafter@0")))
    v = verdict(judge(recorded.prompt, [seg], 256, DEFAULT_NEAR_TIE))
    assert v.status is Status.FAILED
    assert v.compared == 4
    assert v.message.startswith(ej.TOO_FEW_COMPARED.format(compared=4, requested=256, stop="eos"))


def test_a_drafter_whose_drafts_are_never_accepted_fails(recorded: Recorded) -> None:
    seg = Segment(0, recorded.answer("baseline@0"), recorded.answer("never_accepted@0"))
    v = verdict(judge(recorded.prompt, [seg], 64, DEFAULT_NEAR_TIE))
    assert v.status is Status.FAILED
    drafted = recorded.raw("never_accepted@0")["timings"]["draft_n"]
    shortfall = ej.TOO_FEW_ACCEPTED.format(what=NEVER_ACCEPTED, accepted=0, drafted=drafted, requests=1, floor=Floors().accepted)
    assert v.message == shortfall + "; " + ej.IDENTICAL.format(tokens=64)


def test_a_drafter_below_a_floor_is_insufficient_evidence_naming_the_figure_and_the_floor(recorded: Recorded) -> None:
    seg = Segment(0, recorded.answer("baseline@0"), recorded.answer("drafter@0"))
    t = recorded.raw("drafter@0")["timings"]
    drafted, accepted = t["draft_n"], t["draft_n_accepted"]
    rejected = drafted - accepted
    assert verdict(judge(recorded.prompt, [seg], 64, DEFAULT_NEAR_TIE, Floors(accepted=accepted, rejected=rejected))).status is Status.PASSED
    v = verdict(judge(recorded.prompt, [seg], 64, DEFAULT_NEAR_TIE, Floors(accepted=accepted + 1)))
    assert v.status is Status.FAILED
    what = ej.SOME_ACCEPTED.format(accepted=accepted)
    assert v.message.startswith(ej.TOO_FEW_ACCEPTED.format(what=what, accepted=accepted, drafted=drafted, requests=1, floor=accepted + 1))
    v = verdict(judge(recorded.prompt, [seg], 64, DEFAULT_NEAR_TIE, Floors(rejected=rejected + 1)))
    assert v.status is Status.FAILED
    what = ej.SOME_REJECTED.format(rejected=rejected)
    assert v.message.startswith(ej.TOO_FEW_REJECTED.format(what=what, rejected=rejected, drafted=drafted, requests=1, floor=rejected + 1))


def test_a_run_whose_acceptance_is_below_the_floor_is_insufficient_evidence() -> None:
    """The issue's case: a drafter of another seed, 11 of 5924 drafted tokens accepted, once passed the gate."""
    other_seed = Timings(predicted_n=768, draft_n=5924, draft_n_accepted=11, draft_max=8)
    assert run_shortfall(other_seed, Floors()) == ej.RUN_TOO_FEW.format(accepted=11, drafted=5924, percent=0.2, floor=10)
    near = Timings(predicted_n=768, draft_n=1739, draft_n_accepted=965, draft_max=8)  # the near drafter on the H200
    assert run_shortfall(near, Floors()) == ""


def test_tokens_per_step_at_full_acceptance_counts_a_step_per_draft_block() -> None:
    every = Timings(predicted_n=16, draft_n=16, draft_n_accepted=16, draft_max=8)
    assert every.steps == 2
    assert every.tokens_per_step == 8.0
    assert Timings(predicted_n=16, draft_n=16, draft_n_accepted=16).tokens_per_step == 16.0  # draft length unknown: one step at least
    assert Timings(predicted_n=64, draft_n=74, draft_n_accepted=53, draft_max=8).tokens_per_step == pytest.approx(64 / 11)
    assert Timings().tokens_per_step == 0.0


def test_tokens_beyond_the_request_are_not_judged(recorded: Recorded) -> None:
    # a speculative step may return more than n_predict; a difference past the request is not the gate's business
    base, drafted = recorded.answer("baseline@0"), recorded.answer("drafter@0")
    seg = Segment(0, base, flip(drafted, 45, base))
    assert verdict(judge(recorded.prompt, [seg], 40, 0.0)).status is Status.PASSED
    assert verdict(judge(recorded.prompt, [seg], 46, 0.0)).status is Status.FAILED


def test_a_missing_margin_is_never_a_near_tie(recorded: Recorded) -> None:
    raw = recorded.raw("baseline@0")
    for p in raw["completion_probabilities"]:
        p["top_logprobs"] = p["top_logprobs"][:1]
    base = parse_completion(raw)
    v = verdict(judge(recorded.prompt, [Segment(0, base, flip(recorded.answer("drafter@0"), 27, recorded.answer("baseline@0")))], 64, 10.0))
    assert v.status is Status.FAILED
    assert said(ej.DIVERGED, v.message, position=27, margin=ej.NO_MARGIN)


def test_segments_must_follow_the_common_prefix(recorded: Recorded) -> None:
    seg = Segment(5, recorded.answer("baseline@0"), recorded.answer("drafter@0"))
    with pytest.raises(ValueError, match=re.escape(ej.SEGMENT_ASTRAY.format(segment=0, start=5, common=0))):
        judge(recorded.prompt, [seg], 64, DEFAULT_NEAR_TIE)


def test_parse_rejects_an_answer_without_token_ids(recorded: Recorded) -> None:
    raw = recorded.raw("baseline@0")
    del raw["tokens"]
    with pytest.raises(ServerFailed, match=re.escape(ej.NO_TOKEN_IDS.format(leg="baseline"))):
        parse_completion(raw, "baseline")


def test_parse_rejects_probabilities_for_other_tokens(recorded: Recorded) -> None:
    raw = recorded.raw("baseline@0")
    raw["tokens"][3] += 1
    wrong = ej.PROBABILITIES_ELSEWHERE.format(leg="baseline", index=3, id=raw["tokens"][3], other=raw["completion_probabilities"][3]["id"])
    with pytest.raises(ServerFailed, match=re.escape(wrong)):
        parse_completion(raw, "baseline")


def test_timings_add_up() -> None:
    t = Timings(10, 1.0, 100, 50.0, 80, 20) + Timings(5, 1.0, 28, 14.0, 16, 4)
    assert t == Timings(15, 2.0, 128, 64.0, 96, 24)
    assert t.decode_tps == pytest.approx(2000.0)
    assert t.acceptance == pytest.approx(0.25)
    assert t.tokens_per_step == pytest.approx(128 / 104)
    assert Timings().tokens_per_step == 0.0


# -- non-finite logprobs ------------------------------------------------------------------------------------------
# llama-server writes its JSON with nlohmann::json, which writes NaN and inf as null; Python's own json reads a NaN
# or Infinity literal as a float. Either way the recorded answers' shape, with one figure forged.


@pytest.mark.parametrize("value", [None, float("nan"), float("inf"), float("-inf")])
def test_a_non_finite_logprob_where_the_legs_agree_fails_the_prompt_naming_it(recorded: Recorded, value: float | None) -> None:
    raw = recorded.raw("baseline@0")
    raw["completion_probabilities"][5]["top_logprobs"][1]["logprob"] = value
    base = parse_completion(raw, "baseline@0")
    drafted = recorded.answer("drafter@0")
    assert [t.id for t in base.tokens] == [t.id for t in drafted.tokens]  # equal streams: this passed as identical
    v = verdict(judge(recorded.prompt, [Segment(0, base, drafted)], 64, DEFAULT_NEAR_TIE))
    assert v.status is Status.FAILED
    figure = ej.NULL_FIGURE if value is None else str(value)
    runner_up = raw["completion_probabilities"][5]["top_logprobs"][1]["id"]
    what = ej.NON_FINITE_FIELD.format(field=ej.CANDIDATE_FIELD.format(group="top_logprobs", index=1, id=runner_up, key="logprob"), value=figure)
    assert v.message == ej.NON_FINITE.format(leg="baseline", position=5, token=shown(base.tokens[5]), what=what)
    assert v.divergence is None
    assert v.near_ties == ()


def test_a_non_finite_logprob_at_a_near_tie_is_not_a_near_tie(recorded: Recorded) -> None:
    """Position 27 is a recorded near-tie: with its runner-up's logprob NaN the judge neither resumes past it nor
    reports a divergence by a NaN margin."""
    raw = recorded.raw("baseline@0")
    raw["completion_probabilities"][27]["top_logprobs"][1]["logprob"] = float("nan")
    base = parse_completion(raw, "baseline@0")
    seg = Segment(0, base, flip(recorded.answer("drafter@0"), 27, recorded.answer("baseline@0")))
    v = verdict(judge(recorded.prompt, [seg], 64, DEFAULT_NEAR_TIE))
    assert v.status is Status.FAILED
    assert said(ej.NON_FINITE, v.message, leg="baseline", position=27, token=shown(base.tokens[27]))
    assert v.near_ties == ()
    assert v.divergence is None


def test_a_non_finite_figure_in_the_drafter_legs_answer_fails_too(recorded: Recorded) -> None:
    raw = recorded.raw("drafter@0")
    raw["completion_probabilities"][9]["logprob"] = None  # the chosen token's own logprob
    drafted = parse_completion(raw, "drafter@0")
    v = verdict(judge(recorded.prompt, [Segment(0, recorded.answer("baseline@0"), drafted)], 64, DEFAULT_NEAR_TIE))
    what = ej.NON_FINITE_FIELD.format(field="logprob", value=ej.NULL_FIGURE)
    assert v.message == ej.NON_FINITE.format(leg="drafter", position=9, token=shown(drafted.tokens[9]), what=what)


def test_a_non_finite_probability_counts_as_well(recorded: Recorded) -> None:
    """With post_sampling_probs the server sends probabilities (prob, top_probs) in place of logprobs."""
    raw = recorded.raw("baseline@0")
    p = raw["completion_probabilities"][3]
    p["prob"] = 0.5
    p["top_probs"] = [{"id": c["id"], "token": c["token"], "prob": 0.25} for c in p.pop("top_logprobs")]
    p["top_probs"][0]["prob"] = None
    base = parse_completion(raw, "baseline@0")
    v = verdict(judge(recorded.prompt, [Segment(0, base, recorded.answer("drafter@0"))], 64, DEFAULT_NEAR_TIE))
    field = ej.CANDIDATE_FIELD.format(group="top_probs", index=0, id=p["top_probs"][0]["id"], key="prob")
    what = ej.NON_FINITE_FIELD.format(field=field, value=ej.NULL_FIGURE)
    assert v.message == ej.NON_FINITE.format(leg="baseline", position=3, token=shown(base.tokens[3]), what=what)


def test_a_non_finite_figure_past_the_request_is_not_judged(recorded: Recorded) -> None:
    raw = recorded.raw("baseline@0")
    raw["completion_probabilities"][50]["logprob"] = None
    seg = Segment(0, parse_completion(raw, "baseline@0"), recorded.answer("drafter@0"))
    assert verdict(judge(recorded.prompt, [seg], 40, DEFAULT_NEAR_TIE)).status is Status.PASSED
