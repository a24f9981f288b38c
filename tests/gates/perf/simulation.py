"""Rounds drawn from known distributions and judged by the perf gate's sequential test, for
tests/gates/perf/test_simulation.py and ``benchmarks/perf_rounds.py --simulate``: how often it passes, fails or stays
inconclusive, how many rounds it takes, and the same for the gate before it (5 rounds, then 5 more once)."""

from __future__ import annotations

import math
import random
from collections import Counter
from collections.abc import Callable

from ci.gates.perf import judge as perf
from ci.gates.serving import bench
from ci.pin import claims

TRIALS = 2000
GATE = perf.Budget(max_rounds=30, seconds=math.inf)
NAIVE = perf.Budget(max_rounds=30, seconds=math.inf, later_level=perf.FIRST_LEVEL)  # 95% at every look

Draw = Callable[[random.Random], float]


def lognormal(median: float, sigma: float, disturbed: float = 0.0, wide: float = 1.5) -> Draw:
    """A round's value: lognormal around ``median``; with probability ``disturbed`` a round of a busy machine, far
    wider (``wide``), either way."""

    def draw(rng: random.Random) -> float:
        return median * math.exp(rng.gauss(0.0, wide if rng.random() < disturbed else sigma))

    return draw


def simulate(budget: perf.Budget, draw: Draw, floor: float, trials: int = TRIALS, seed: int = 0) -> tuple[Counter[str], float]:
    """``trials`` runs of the gate's sequential test on rounds from ``draw``, against ``floor``: how many passed,
    failed or stayed inconclusive, and the mean rounds measured."""
    rng = random.Random(seed)
    check = claims.parse_check(f"decode(draft, code) >= {floor}", "a simulation", 0.1, "simulation")
    verdicts: Counter[str] = Counter()
    measured = 0

    def measure(n: int) -> list[bench.Sample]:
        return [bench.Sample(r, "draft", "decode code", 1, 1000, 1e6 / draw(rng), 1.0) for r in range(1, n + 1)]

    for _ in range(trials):
        settled = perf.judge_settled([check], measure, budget, None, "")
        (j,) = settled.judged
        verdicts["inconclusive" if j.inconclusive else j.status.value] += 1
        measured += settled.rounds
    return verdicts, measured / trials


def exact(budget: perf.Budget, below: float) -> tuple[float, float]:
    """The chance that the sequential test passes, and that it fails, when each round falls below the floor with
    probability ``below`` (0.5: the floor is the true median), over the walk of the count below."""
    walk, n, passed, failed = {0: 1.0}, 0, 0.0, 0.0
    for look in budget.looks():
        while n < look:
            nxt: dict[int, float] = {}
            for b, p in walk.items():
                nxt[b + 1] = nxt.get(b + 1, 0.0) + p * below
                nxt[b] = nxt.get(b, 0.0) + p * (1 - below)
            walk, n = nxt, n + 1
        k = perf.depth(look, budget.level(look))
        passed += sum(p for b, p in walk.items() if k and b < k)
        failed += sum(p for b, p in walk.items() if k and look - b < k)
        walk = {b: p for b, p in walk.items() if not (k and (b < k or look - b < k))}
    return passed, failed


def simulate_old(draw: Draw, floor: float, trials: int = TRIALS, seed: int = 0) -> tuple[Counter[str], float]:
    """The gate before the sequential test: 5 rounds on the bootstrap's 95% interval and, when that straddled the
    floor, 5 more once, judged together."""
    rng = random.Random(seed)
    check = claims.parse_check(f"decode(draft, code) >= {floor}", "a simulation", 0.1, "simulation")
    verdicts: Counter[str] = Counter()
    measured = 0
    for _ in range(trials):
        values = [draw(rng) for _ in range(5)]
        j = perf.judge_check(check, values, None, "")
        if j.inconclusive:
            values += [draw(rng) for _ in range(5)]
            j = perf.judge_check(check, values, None, "")
        verdicts["inconclusive" if j.inconclusive else j.status.value] += 1
        measured += len(values)
    return verdicts, measured / trials


