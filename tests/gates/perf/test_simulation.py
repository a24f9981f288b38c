"""The perf gate's sequential test against optional stopping, simulated: rounds drawn (seeded) from known
distributions, judged by :func:`perf.judge_settled` exactly as the gate judges them, counting the wrong verdicts.

Judging after every batch gives a straddling check a verdict at each look, so each look must be stricter than one
fixed look would be. The gate's looks (6 rounds at 95%, then every 2 at 99%, 30 at most) are held against:

- a floor at the true median, where a pass and a fail are both wrong: each at most 2.5% (one fixed 95% look's rate),
  where 95% at every look gives 5.7% each way. On the order-statistic interval a verdict depends only on how many
  rounds fall below the floor, so these rates are exact for any distribution (:func:`exact`) and the simulation has to
  agree with them;
- a planted 30% slowdown against a floor 15% below the honest median, on noisy rounds: never a pass;
- an honest build against floors 2x below its median (pins.yaml's tiny ones) with a tenth of its rounds below the
  floor (a busy 2-core machine: docs/bench.md): settled as a pass, never a fail.

``python benchmarks/perf_rounds.py --simulate`` prints the same figures with more trials (docs/bench.md).
"""

from __future__ import annotations

import math

from ci.gates.perf import judge as perf
from tests.gates.perf.simulation import GATE, NAIVE, TRIALS, exact, lognormal, simulate


def within(rate: float, want: float, trials: int = TRIALS) -> bool:
    """``rate`` is ``want`` up to four standard errors of a count over ``trials``."""
    return abs(rate - want) <= 4 * math.sqrt(want * (1 - want) / trials)


def test_a_floor_at_the_true_median_gets_a_verdict_no_more_often_than_one_fixed_95_percent_look() -> None:
    gate_pass, gate_fail = exact(GATE, 0.5)
    naive_pass, naive_fail = exact(NAIVE, 0.5)
    fixed = perf.Budget(max_rounds=30, first=30)  # one look at 30 rounds, 95%
    fixed_pass, _ = exact(fixed, 0.5)
    assert gate_pass == gate_fail < 0.025  # 2.3%
    assert naive_pass == naive_fail > 0.05  # 5.7%: optional stopping at work
    assert fixed_pass < 0.025
    for budget, want in ((GATE, gate_pass), (NAIVE, naive_pass)):
        verdicts, _ = simulate(budget, lognormal(1.0, 0.3), floor=1.0)
        assert within(verdicts["passed"] / TRIALS, want), (verdicts, want)
        assert within(verdicts["failed"] / TRIALS, want), (verdicts, want)


def test_a_planted_30_percent_slowdown_is_never_passed() -> None:
    """The floor 15% below the honest median (1.0), the build 30% slower (0.7), its rounds noisy (10% spread, a tenth
    of them from a busy machine): failed, never passed."""
    verdicts, mean_rounds = simulate(GATE, lognormal(0.7, 0.1, disturbed=0.1), floor=0.85)
    assert verdicts["passed"] == 0, verdicts
    assert verdicts["failed"] >= 0.99 * TRIALS, verdicts
    assert mean_rounds < 10, mean_rounds


def test_an_honest_build_on_a_busy_machine_settles_as_a_pass() -> None:
    """pins.yaml's tiny floors sit 2x below the medians. Three rounds in ten disturbed, a third of those below the
    floor (a tenth of all rounds, as on 2 shared cores with one llama-server thread: docs/bench.md): settled as a
    pass within the 30 rounds, never a fail. The old gate's 5 + 5 rounds needed all five above the floor, or eight
    of ten."""
    verdicts, mean_rounds = simulate(GATE, lognormal(1.0, 0.1, disturbed=0.3), floor=0.5)
    assert verdicts["failed"] == 0, verdicts
    assert verdicts["passed"] >= 0.98 * TRIALS, verdicts
    assert mean_rounds < 12, mean_rounds
