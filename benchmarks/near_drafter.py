"""Tune the near drafter: acceptance per prompt on the CPU llama-server for several perturbations of the target.

    python benchmarks/near_drafter.py [--perturb P ...] [--tokens 256] [--llama-server PATH]

--perturb defaults to half, once and twice the PERTURB in use (0.05).

The near drafter is the tiny target's weights plus noise of PERTURB times each tensor's std (ci/gates/tiny/models.py).
Its acceptance must land between 30% and 80% on code, prose and short, so that the gate's runs exercise both the
path that keeps accepted drafts and the one that rolls the rest back. Prints, per value, each prompt's acceptance
and tokens/step, and whether all three are in range.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(1, str(Path(__file__).resolve().parent))
from common import at_least_one, llama_server, non_negative, run_main

from ci.gates.equivalence import plan as eq_plan
from ci.gates.equivalence import run as equivalence
from ci.gates.serving import prompts as prompt_set
from ci.gates.serving.prompts import Prompt
from ci.gates.tiny.models import NEAR_DRAFTER, PERTURB, TARGET, write_model


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--perturb", type=non_negative, nargs="+", default=[PERTURB / 2, PERTURB, 2 * PERTURB])  # around the one in use
    ap.add_argument("--tokens", type=at_least_one, default=256)
    ap.add_argument("--llama-server", type=Path)
    args = ap.parse_args()
    server = llama_server(args.llama_server)
    work = Path(tempfile.mkdtemp(prefix="onebit-near-"))
    target = write_model(work / "target.gguf", TARGET)
    for value in args.perturb:
        spec = dataclasses.replace(NEAR_DRAFTER, perturb=value, name=f"near-{value:g}")
        drafter = write_model(work / f"near-{value:g}.gguf", spec)
        result = equivalence.run(eq_plan.plan(model=target, drafter=drafter, llama_server=server, tokens=args.tokens), work / f"logs-{value:g}")
        m = dict(result.metrics)
        rows = [(p.name, m.get(f"{p.name}.acceptance", 0.0), m.get(f"{p.name}.tokens_per_step", 0.0)) for p in load()]
        ok = all(0.3 <= acc <= 0.8 for _, acc, _ in rows)
        cells = ", ".join(f"{name} {100 * acc:.1f}% ({tps:.2f} tokens/step)" for name, acc, tps in rows)
        print(f"perturb {value:g}: {cells}; overall {100 * m.get('acceptance', 0.0):.1f}%; {'in range' if ok else 'OUT of 30-80%'}; gate {result.status.value}")


def load() -> tuple[Prompt, ...]:
    return prompt_set.load_prompts()


if __name__ == "__main__":
    run_main(main)
