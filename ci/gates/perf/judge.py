"""The perf gate: the seeds' performance claims as ratios measured in one run, against that run's own baseline.

pins.yaml ``expect.perf`` declares checks per model set: the release models' per profile, the tiny generated
models' (smoke-level) under ``tiny``. A check reads ``METRIC(CONFIG[, PROMPT]) [/ METRIC(CONFIG[, PROMPT])] >=
FLOOR``: metrics ``prompt`` and ``decode`` (t/s), ``tokens_per_step`` and ``acceptance``; configs ``base`` (no
drafter) and ``draft`` (the drafter: the release's DFlash drafter through ``--dflash``, else ``-md``). Machines are
shared and noisy, so the gate never judges an absolute time: the configs run interleaved, round by round, on fresh
servers (the bench), every sample is kept, and each check is one value per round. Its verdict comes from a
bootstrap 95% interval of the median over the rounds: above the floor passes, below fails, and an interval that
straddles the floor is *inconclusive: raise --rounds*, never a pass. An inconclusive check has the gate measure as
many rounds again, once, and judge all of them together (a noisy GPU round on tiny models was seen to straddle).

When a build of the same profile and models shipped before, each check is also compared with that release's
median (the ledger's perf record of the shipped build): a drop beyond the declared tolerance fails, naming both
figures and both pins, so a "6.7 -> 5.4 tokens per step" is caught at bump time.
"""

from __future__ import annotations

import dataclasses
import statistics
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from ci.gates.equivalence import drafting
from ci.gates.perf import NAME
from ci.gates.results import CaseResult, GateResult, Status, case_counts
from ci.gates.serving.bench import Sample, Spread, pyplot, spread
from ci.pin.claims import Check, Term

GATE = NAME
INCONCLUSIVE = "inconclusive: raise --rounds"

# Messages, shared with the tests that match on them (tests/support/messages.py)
NO_SAMPLES = "{check}: no samples (did both configs run?)"
# a check's message: FIGURE, then PASSES, FAILS or IS_INCONCLUSIVE, then REGRESSION when it dropped since the last release
FIGURE = "{check} = {median:.3f} (95% interval {low:.3f}-{high:.3f}, {rounds} rounds) against the floor {floor:g}"
PASSES = ": passes"
FAILS = ": fails"
IS_INCONCLUSIVE = ": " + INCONCLUSIVE
REGRESSION = (
    "; a regression: {median:.3f} at pin {pin} against {before:.3f} at the last release (pin {released}), "
    "{change:+.1f}% beyond the {tolerance:g}% tolerance"
)
SUMMARY = "{verdict}: {held}/{checks} checks hold on {models}"
SUMMARY_INCONCLUSIVE = ", {count} inconclusive"
FLOOR_LABEL = "floor {floor:g}"  # the chart's floor line


# -- the samples, per round --------------------------------------------------------------------------------------------


def value(term: Term, samples: Sequence[Sample], round_: int) -> float | None:
    """``term`` in one round: the median t/s over the reps, or tokens/step or acceptance over them."""
    if term.metric == "prompt":
        mine = [s for s in samples if s.round == round_ and s.config == term.config and s.metric == "prompt"]
    else:
        want = f"decode {term.prompt}" if term.prompt else None
        mine = [s for s in samples if s.round == round_ and s.config == term.config and s.metric.startswith("decode") and (want is None or s.metric == want)]
    if not mine:
        return None
    if term.metric in ("prompt", "decode"):
        return statistics.median(s.tps for s in mine)
    drafted = sum(s.draft_n for s in mine)
    accepted = sum(s.draft_n_accepted for s in mine)
    if term.metric == "acceptance":
        return drafting.acceptance(drafted, accepted)
    steps = sum(drafting.steps(s.generated, s.draft_n, s.draft_n_accepted, s.draft_max) for s in mine)
    return sum(s.generated for s in mine) / steps if steps else 0.0


def per_round(check: Check, samples: Sequence[Sample]) -> list[float]:
    out = []
    for r in sorted({s.round for s in samples}):
        top = value(check.top, samples, r)
        bottom = value(check.bottom, samples, r) if check.bottom else 1.0
        if top is not None and bottom:
            out.append(top / bottom)
    return out


@dataclass(frozen=True)
class Released:
    """The last release's figures for the same profile and models: each check's median, and its pin."""

    pin: str
    medians: Mapping[str, float]


@dataclass(frozen=True)
class Judged:
    check: Check
    values: tuple[float, ...]
    spread: Spread | None
    status: Status
    message: str
    inconclusive: bool = False  # the interval straddles the floor: more rounds may settle it


def judge_check(check: Check, values: Sequence[float], released: Released | None, pin: str) -> Judged:
    if not values:
        return Judged(check, (), None, Status.ERROR, NO_SAMPLES.format(check=check.name))
    s = spread(values)
    figure = FIGURE.format(check=check.name, median=s.median, low=s.low, high=s.high, rounds=s.n, floor=check.floor)
    if s.low >= check.floor:
        status, message = Status.PASSED, figure + PASSES
    elif s.high < check.floor:
        status, message = Status.FAILED, figure + FAILS
    else:
        status, message = Status.FAILED, figure + IS_INCONCLUSIVE
    inconclusive = status is Status.FAILED and s.low < check.floor <= s.high
    if released is not None and check.name in released.medians:
        before = released.medians[check.name]
        if before > 0 and s.median < before * (1 - check.tolerance):
            status, inconclusive = Status.FAILED, False  # a regression is decisive, whatever the floor's interval
            message += REGRESSION.format(
                median=s.median, pin=pin[:7], before=before, released=released.pin[:7], change=100 * (s.median / before - 1), tolerance=100 * check.tolerance
            )
    return Judged(check, tuple(values), s, status, message, inconclusive=inconclusive)


def judge_all(checks: Sequence[Check], samples: Sequence[Sample], released: Released | None, pin: str) -> list[Judged]:
    return [judge_check(c, per_round(c, samples), released, pin) for c in checks]


def more_rounds(first: Sequence[Sample], second: Sequence[Sample]) -> list[Sample]:
    """Two measurements as one: the second's rounds numbered after the first's, so every round stays its own pair
    of interleaved configs."""
    offset = max((s.round for s in first), default=0)
    return [*first, *(dataclasses.replace(s, round=s.round + offset) for s in second)]


def judge_settled(
    checks: Sequence[Check], measure: Callable[[int], Sequence[Sample]], rounds: int, released: Released | None, pin: str
) -> tuple[list[Judged], list[Sample], int]:
    """Judge ``rounds`` rounds; when a check is inconclusive (its interval straddles the floor), measure as many
    rounds again, once, and judge every round together. A check is never re-judged on a fresh draw alone: the
    samples only grow. Returns the verdicts, every sample and the rounds measured."""
    samples = list(measure(rounds))
    judged = judge_all(checks, samples, released, pin)
    if any(j.inconclusive for j in judged):
        samples = more_rounds(samples, measure(rounds))
        judged = judge_all(checks, samples, released, pin)
        rounds *= 2
    return judged, samples, rounds


def result(judged: Sequence[Judged], released: Released | None, pin: str, models: str, seconds: float) -> GateResult:
    cases = tuple(
        CaseResult(j.check.name, j.status, j.message, classname=GATE, detail=f"{j.check.text}; measured: {j.check.measured}; values {', '.join(f'{v:.3f}' for v in j.values)}", inconclusive=j.inconclusive)
        for j in judged
    )
    problems = tuple(j.message for j in judged if not j.status.ok)
    status = Status.PASSED if judged and all(j.status.ok for j in judged) else (Status.ERROR if any(j.status is Status.ERROR for j in judged) else Status.FAILED)
    inconclusive = sum(j.inconclusive for j in judged)
    summary = SUMMARY.format(verdict=status.value.upper(), held=sum(j.status.ok for j in judged), checks=len(judged), models=models)
    summary += SUMMARY_INCONCLUSIVE.format(count=inconclusive) if inconclusive else ""
    metrics: list[tuple[str, float]] = []
    for j in judged:
        if j.spread is not None:
            metrics += [(f"{j.check.name}.median", round(j.spread.median, 4)), (f"{j.check.name}.low", round(j.spread.low, 4)), (f"{j.check.name}.high", round(j.spread.high, 4))]
            metrics += [(f"{j.check.name}.round{k}", round(v, 4)) for k, v in enumerate(j.values, 1)]
    props = (("models", models), ("pin", pin), *((("released_pin", released.pin),) if released else ()))
    return GateResult(GATE, status, summary, cases, problems, case_counts(cases), props, tuple(metrics), seconds)


def medians(metrics: Mapping[str, float]) -> dict[str, float]:
    """Each check's median from a perf record's metrics (what a release keeps for the next bump to compare with)."""
    return {k[: -len(".median")]: float(v) for k, v in metrics.items() if k.endswith(".median")}


def chart(judged: Sequence[Judged], path: Path, title: str) -> Path | None:
    """Each judged check as the gate judged it: its per-round values, their median, the bootstrap 95% interval of the
    median and the floor, one panel a check, titled with the profile, the pin and the models (matplotlib, the ``plot``
    extra; None when it is not installed)."""
    plt = pyplot()
    if plt is None or not judged:
        return None
    fig, axes = plt.subplots(1, len(judged), figsize=(3.0 * len(judged) + 0.6, 3.4), squeeze=False)
    for ax, j in zip(axes[0], judged, strict=True):
        colour = "tab:green" if j.status.ok else "tab:red"
        xs = [0.04 * (k % 7 - 3) for k in range(len(j.values))]
        ax.scatter(xs, j.values, s=14, alpha=0.6, color="tab:blue", label="rounds")
        if j.spread is not None:
            ax.errorbar([0.3], [j.spread.median], yerr=[[j.spread.median - j.spread.low], [j.spread.high - j.spread.median]],
                        fmt="o", color=colour, capsize=4, label="median, 95% interval")  # fmt: skip
        ax.axhline(j.check.floor, color="black", linestyle="--", linewidth=1, label=FLOOR_LABEL.format(floor=j.check.floor))
        ax.set_xlim(-0.5, 0.7)
        ax.set_xticks([])
        ax.set_title(f"{j.check.name}\n{j.status.value}", fontsize=8, color=colour)
        ax.tick_params(labelsize=7)
    axes[0][0].legend(fontsize=6, loc="best")
    fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, format="svg")
    plt.close(fig)
    return path
