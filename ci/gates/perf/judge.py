"""The perf gate: the seeds' performance claims as ratios measured in one run, against that run's own baseline.

Machines are shared and noisy, so no absolute time is a verdict: the configs run interleaved, round by round, and
each check (pins.yaml ``expect.perf``) is one value per round, judged by the order-statistic interval of its median
(:func:`judge_settled`): once the interval clears the floor the verdict stands; still straddling when the budget
runs out, the check is inconclusive, a failure. A drop beyond the tolerance since the last release fails too.
"""

from __future__ import annotations

import dataclasses
import math
import statistics
import time
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ci import defaults
from ci.gates.perf import NAME
from ci.gates.results import CaseResult, GateResult, Status, case_counts
from ci.gates.serving import drafting
from ci.gates.serving.bench import Sample, Spread, pyplot, spread
from ci.pin.claims import Check, Term

GATE = NAME
INCONCLUSIVE = "inconclusive: raise --rounds"

# The sequential design (docs/bench.md, "How many rounds"). An order-statistic interval of the median needs 6 rounds
# to reach 95% at all (all six on one side of the floor: 1 chance in 64 each way when the floor is the true median;
# five reach 93.75%), so no check is judged on fewer: a lucky 3-round interval cannot settle.
MIN_ROUNDS = defaults.PERF_ROUNDS
STEP = 2  # rounds measured between two looks
FIRST_LEVEL = 0.95
# every later look's: judging 95% intervals at each of 13 looks (6, 8, ..., 30 rounds) gives a verdict on a floor at
# the true median 5.7% of the time each way; 99% after the first gives 2.3%, below one fixed 95% look's 2.5%
LATER_LEVEL = 0.99

# Messages, shared with the tests that match on them (tests/support/messages.py)
NO_SAMPLES = "{check}: no samples (did both configs run?)"
# a check's message: FIGURE, then PASSES, FAILS, IS_INCONCLUSIVE (one look: the bench's recipe check) or UNSETTLED (the
# gate, its budget spent), then REGRESSION when it dropped since the last release
FIGURE = "{check} = {median:.3f} ({level}% interval {low:.3f}-{high:.3f}, {rounds} rounds) against the floor {floor:g}"
PASSES = ": passes"
FAILS = ": fails"
IS_INCONCLUSIVE = ": " + INCONCLUSIVE
UNSETTLED = ": inconclusive after {rounds} rounds, {stopped}; to settle it, {settle}"
OUT_OF_ROUNDS = "the most --rounds allows"
OUT_OF_TIME = "the gate's {seconds:g} s ran out"
SETTLE_ROUNDS = "raise --rounds above {rounds}, or run on a quieter machine"
SETTLE_TIME = "run on a quieter machine"
# a round whose value is not a finite number fails its check: the median would have dropped it or sorted it anywhere
NON_FINITE = "{check}: {rounds}: not a finite number, which fails the check"
NON_FINITE_ROUND = "round {round} gave {value}"  # NON_FINITE's rounds, joined by "; "
REGRESSION = (
    "; a regression: {median:.3f} at pin {pin} against {before:.3f} at the last release (pin {released}), "
    "{change:+.1f}% beyond the {tolerance:g}% tolerance"
)
SUMMARY = "{verdict}: {held}/{checks} checks hold on {models}"
SUMMARY_ROUNDS = " ({rounds} rounds)"
SUMMARY_INCONCLUSIVE = ", {count} inconclusive"
FLOOR_LABEL = "floor {floor:g}"  # the chart's floor line
INTERVAL_LABEL = "median, {level}% interval"  # the chart's


# -- the samples, per round --------------------------------------------------------------------------------------------


def rate(sample: Sample) -> float:
    """The sample's t/s, NaN when the server's timing of it is not a finite positive number (the bench's
    ``Sample.tps`` says 0.0 there, which a median would take for one slow round)."""
    return 1000.0 * sample.tokens / sample.ms if math.isfinite(sample.ms) and sample.ms > 0 else math.nan


def value(term: Term, samples: Sequence[Sample], round_: int) -> float | None:
    """``term`` in one round: the median t/s over the reps (NaN when one of them is not finite), the median seconds to
    the first token (``ttft``), decode's share of the device's memory bandwidth (``bandwidth``), or tokens/step or
    acceptance over them."""
    if term.metric in ("prompt", "ttft"):  # a PROMPT names the prompt: the long one of the real-shaped set
        asked = "prompt" if term.prompt is None else f"prompt {term.prompt}"
        mine = [s for s in samples if s.round == round_ and s.config == term.config and s.metric == asked]
    else:
        want = f"decode {term.prompt}" if term.prompt else None
        mine = [s for s in samples if s.round == round_ and s.config == term.config and s.metric.startswith("decode") and (want is None or s.metric == want)]
    if not mine:
        return None
    if term.metric == "ttft":
        return statistics.median(s.seconds for s in mine)
    if term.metric in ("prompt", "decode", "bandwidth"):
        rates = [rate(s) for s in mine]
        if not all(math.isfinite(r) for r in rates):
            return math.nan
        if term.metric == "bandwidth":  # weight bytes a token reads x tokens a second / the device's peak
            shares = [r * s.bandwidth_per_tps for r, s in zip(rates, mine, strict=True)]
            return statistics.median(shares) if all(s.bandwidth_per_tps > 0 for s in mine) else math.nan
        return statistics.median(rates)
    drafted = sum(s.draft_n for s in mine)
    accepted = sum(s.draft_n_accepted for s in mine)
    if term.metric == "acceptance":
        return drafting.acceptance(drafted, accepted)
    steps = sum(drafting.steps(s.generated, s.draft_n, s.draft_n_accepted, s.draft_max) for s in mine)
    return sum(s.generated for s in mine) / steps if steps else 0.0


def ratio(top: float, bottom: float) -> float:
    """``top / bottom``, infinite (or NaN for 0 / 0) over a bottom of 0: a round never disappears from its check."""
    if bottom:
        return top / bottom
    return math.nan if top == 0 or math.isnan(top) else math.copysign(math.inf, top)


def per_round(check: Check, samples: Sequence[Sample]) -> list[float]:
    """The check's value in each round where its configs ran, in round order; a round is never dropped for its value."""
    rounds: dict[int, list[Sample]] = defaultdict(list)
    for s in samples:
        rounds[s.round].append(s)
    out = []
    for r in sorted(rounds):
        top = value(check.top, rounds[r], r)
        bottom = value(check.bottom, rounds[r], r) if check.bottom else 1.0
        if top is not None and bottom is not None:
            out.append(ratio(top, bottom))
    return out


# -- the interval ------------------------------------------------------------------------------------------------------


def depth(n: int, level: float) -> int:
    """The largest k for which ``[x_(k), x_(n+1-k)]`` of n sorted values holds the median with probability at least
    ``level`` whatever the distribution (each tail, ``P(Binomial(n, 1/2) < k)``, at most ``(1 - level) / 2``); 0 when
    n values are too few for that level."""
    tail, k = 0.0, 0
    while k < (n + 1) // 2:
        tail += math.comb(n, k) / 2**n
        if tail > (1 - level) / 2:
            break
        k += 1
    return k


def median_interval(values: Sequence[float], level: float) -> tuple[float, float]:
    """The order-statistic interval of the median at ``level`` (unbounded when there are too few values for it)."""
    xs = sorted(values)
    k = depth(len(xs), level)
    return (xs[k - 1], xs[len(xs) - k]) if k else (-math.inf, math.inf)


def order_spread(values: Sequence[float], level: float) -> Spread:
    """The figures of ``values`` with :func:`median_interval` as the interval (the bench's :func:`spread` bootstraps a
    95% one, which at 5 to 20 rounds really holds the median 87.5-97% of the time: docs/bench.md)."""
    xs = sorted(values)
    q = statistics.quantiles(xs, n=4, method="inclusive") if len(xs) > 1 else [xs[0], xs[0], xs[0]]
    low, high = median_interval(xs, level)
    return Spread(xs[-1], statistics.median(xs), q[0], q[2], low, high, len(xs))


# -- a check, judged ---------------------------------------------------------------------------------------------------


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
    level: float = FIRST_LEVEL  # the interval's


def _judge(check: Check, values: Sequence[float], released: Released | None, pin: str, s: Spread | None, level: float) -> Judged:
    if not values:
        return Judged(check, (), None, Status.ERROR, NO_SAMPLES.format(check=check.name), level=level)
    bad = [NON_FINITE_ROUND.format(round=k, value=v) for k, v in enumerate(values, 1) if not math.isfinite(v)]
    if bad or s is None:
        return Judged(check, tuple(values), None, Status.FAILED, NON_FINITE.format(check=check.name, rounds="; ".join(bad)), level=level)
    figure = FIGURE.format(check=check.name, median=s.median, level=f"{100 * level:g}", low=s.low, high=s.high, rounds=s.n, floor=check.floor)
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
    return Judged(check, tuple(values), s, status, message, inconclusive=inconclusive, level=level)


def judge_check(check: Check, values: Sequence[float], released: Released | None, pin: str) -> Judged:
    """One look at a fixed number of rounds, on the bench's bootstrap 95% interval (the bench's recipe check)."""
    finite = bool(values) and all(math.isfinite(v) for v in values)
    return _judge(check, values, released, pin, spread(values) if finite else None, FIRST_LEVEL)


def judge_look(check: Check, values: Sequence[float], released: Released | None, pin: str, level: float) -> Judged:
    """One look of the gate's sequential test: the order-statistic interval of the median at ``level``."""
    finite = bool(values) and all(math.isfinite(v) for v in values)
    return _judge(check, values, released, pin, order_spread(values, level) if finite else None, level)


def judge_all(checks: Sequence[Check], samples: Sequence[Sample], released: Released | None, pin: str) -> list[Judged]:
    return [judge_check(c, per_round(c, samples), released, pin) for c in checks]


def more_rounds(first: Sequence[Sample], second: Sequence[Sample]) -> list[Sample]:
    """Two measurements as one: the second's rounds numbered after the first's, so every round stays its own pair
    of interleaved configs."""
    offset = max((s.round for s in first), default=0)
    return [*first, *(dataclasses.replace(s, round=s.round + offset) for s in second)]


# -- the sequential test -----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Budget:
    """When the gate looks, how wide each look's interval is, and when it stops measuring: after ``max_rounds``
    rounds, or when the next batch would end past ``seconds``."""

    max_rounds: int = defaults.PERF_MAX_ROUNDS
    seconds: float = defaults.PERF_SECONDS
    first: int = MIN_ROUNDS
    step: int = STEP
    first_level: float = FIRST_LEVEL
    later_level: float = LATER_LEVEL

    def __post_init__(self) -> None:
        object.__setattr__(self, "max_rounds", max(self.max_rounds, self.first))  # the first look is always measured

    def looks(self) -> tuple[int, ...]:
        """The rounds at which the gate judges: the first look, then every ``step`` rounds, the last at ``max_rounds``."""
        out = list(range(self.first, self.max_rounds + 1, self.step))
        return tuple(out if out[-1] == self.max_rounds else [*out, self.max_rounds])

    def level(self, rounds: int) -> float:
        return self.first_level if rounds <= self.first else self.later_level


@dataclass(frozen=True)
class Settled:
    """The sequential test's outcome: each check's verdict (at the look that settled it, else the last), every
    sample, the rounds measured and why measuring stopped (``None``: every check was settled)."""

    judged: list[Judged]
    samples: list[Sample]
    rounds: int
    stopped: str | None


def judge_settled(
    checks: Sequence[Check],
    measure: Callable[[int], Sequence[Sample]],
    budget: Budget,
    released: Released | None,
    pin: str,
    clock: Callable[[], float] = time.monotonic,
) -> Settled:
    """Measure in batches (``measure(n)``: n more rounds) and look after each, until every check is settled or the
    budget is spent. A check is settled at the first look whose interval clears its floor (or that finds a value that
    is not finite), and that verdict stands. The comparison with the last release is made once, at the look that
    settles the check (or the last): made at every look it would get as many chances to fail an honest build. What
    still straddles when the budget is spent, and did not regress, is inconclusive, with what would settle it."""
    t0 = clock()
    samples: list[Sample] = []
    settled: dict[int, Judged] = {}
    rounds, stopped, level = 0, None, budget.first_level
    looks = budget.looks()
    for k, look in enumerate(looks):
        samples = more_rounds(samples, measure(look - rounds))
        rounds = look
        level = budget.level(look)
        for i, c in enumerate(checks):
            if i in settled:
                continue
            values = per_round(c, samples)
            on_its_floor = judge_look(c, values, None, pin, level)
            if not on_its_floor.inconclusive:
                settled[i] = judge_look(c, values, released, pin, level) if released is not None else on_its_floor
        if len(settled) == len(checks):
            break
        if k + 1 == len(looks):
            stopped = OUT_OF_ROUNDS
            break
        spent = clock() - t0
        if spent + spent / rounds * (looks[k + 1] - rounds) > budget.seconds:
            stopped = OUT_OF_TIME.format(seconds=budget.seconds)
            break
    unsettled = UNSETTLED.format(rounds=rounds, stopped=stopped, settle=SETTLE_ROUNDS.format(rounds=rounds) if stopped == OUT_OF_ROUNDS else SETTLE_TIME)
    judged = []
    for i, c in enumerate(checks):
        if i in settled:
            judged.append(settled[i])
        else:  # its floor still straddled: inconclusive, unless it regressed
            j = judge_look(c, per_round(c, samples), released, pin, level)
            judged.append(dataclasses.replace(j, message=j.message.replace(IS_INCONCLUSIVE, unsettled, 1)))
    return Settled(judged, samples, rounds, stopped)


def result(
    judged: Sequence[Judged], released: Released | None, pin: str, models: str, seconds: float, rounds: int | None = None, stopped: str | None = None
) -> GateResult:
    """The gate's result: a case per check; ``rounds`` (how many the sequential test measured) and, when its budget ran
    out, why it ``stopped``, in the summary and the properties."""
    cases = tuple(
        CaseResult(j.check.name, j.status, j.message, classname=GATE, detail=f"{j.check.text}; measured: {j.check.measured}; values {', '.join(f'{v:.3f}' for v in j.values)}", inconclusive=j.inconclusive)
        for j in judged
    )
    problems = tuple(j.message for j in judged if not j.status.ok)
    status = Status.PASSED if judged and all(j.status.ok for j in judged) else (Status.ERROR if any(j.status is Status.ERROR for j in judged) else Status.FAILED)
    inconclusive = sum(j.inconclusive for j in judged)
    summary = SUMMARY.format(verdict=status.value.upper(), held=sum(j.status.ok for j in judged), checks=len(judged), models=models)
    summary += SUMMARY_ROUNDS.format(rounds=rounds) if rounds is not None else ""
    summary += SUMMARY_INCONCLUSIVE.format(count=inconclusive) if inconclusive else ""
    metrics: list[tuple[str, float]] = []
    for j in judged:
        if j.spread is not None:
            metrics += [(f"{j.check.name}.median", round(j.spread.median, 4)), (f"{j.check.name}.low", round(j.spread.low, 4)), (f"{j.check.name}.high", round(j.spread.high, 4))]
        # a value that is not finite is named in the case's message, not written as a number JSON has not got
        metrics += [(f"{j.check.name}.round{k}", round(v, 4)) for k, v in enumerate(j.values, 1) if math.isfinite(v)]
    props = (("models", models), ("pin", pin), *((("released_pin", released.pin),) if released else ()))
    props += (("rounds", str(rounds)),) if rounds is not None else ()
    props += (("stopped", stopped),) if stopped else ()
    return GateResult(GATE, status, summary, cases, problems, case_counts(cases), props, tuple(metrics), seconds)


def medians(metrics: Mapping[str, float]) -> dict[str, float]:
    """Each check's median from a perf record's metrics (what a release keeps for the next bump to compare with)."""
    return {k[: -len(".median")]: float(v) for k, v in metrics.items() if k.endswith(".median")}


def released_figures(found: tuple[str, Mapping[str, Any]] | None, models: str, prefix: str = "") -> Released | None:
    """The figures of ``models`` in ``found`` (the last release's pin and its perf record, as ``released(NAME)`` gives
    them), the checks named without ``prefix`` (the real-shaped set's, whatever ``models``); None when that release
    measured none of them (pure)."""
    if found is None:
        return None
    pin, record = found
    properties = record.get("properties") or {}
    metrics = medians(record.get("metrics") or {})
    if prefix:
        if not properties.get("real_shape"):
            return None
        metrics = {k[len(prefix) :]: v for k, v in metrics.items() if k.startswith(prefix)}
    elif properties.get("models") != models:
        return None
    return Released(pin, metrics)


def chart(judged: Sequence[Judged], path: Path, title: str) -> Path | None:
    """Each judged check as the gate judged it: its per-round values, their median, the interval of the median it was
    judged on and the floor, one panel a check, titled with the profile, the pin and the models (matplotlib, the ``plot``
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
                        fmt="o", color=colour, capsize=4, label=INTERVAL_LABEL.format(level=f"{100 * j.level:g}"))  # fmt: skip
        ax.axhline(j.check.floor, color="black", linestyle="--", linewidth=1, label=FLOOR_LABEL.format(floor=j.check.floor))
        ax.set_xlim(-0.5, 0.7)
        ax.set_ylim(bottom=0)  # every check is a rate, a fraction or a ratio of rates: from 0, so 2% looks like 2%
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
