"""What issue 36's environment costs each program a gate or a build starts, measured in one run: the command layer
before (the whole environment, the caller's folder) against now (the allow-list, a fresh empty folder, the tree's
mark and the look for its orphans once it exits).

    python benchmarks/environment_cost.py --against REV [--starts 200] [--rounds 5]

Before: ``ci/command.py`` as it is at REV (the commit before issue 36's command layer), loaded as a module of its own
beside this checkout's. Now: this checkout's. Each round starts ``true`` (the cheapest program: the overhead at its
largest) and ``python -c pass`` the same number of times through each ``run``, alternating, so that a busy machine
slows both alike; the medians per start, their difference and their ratio are printed.
"""

from __future__ import annotations

import argparse
import importlib.util
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(1, str(Path(__file__).resolve().parent))
from common import at_least_one, run_main  # noqa: E402 -- the benchmarks' own helpers

from ci import command  # noqa: E402 -- after the path set-up, so the checkout's ci/ is measured


def command_at(rev: str, folder: Path) -> ModuleType:
    """ci/command.py as it is at ``rev``, imported as ``command_before`` (its imports are this checkout's ci)."""
    done = subprocess.run(["git", "show", f"{rev}:ci/command.py"], cwd=ROOT, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise SystemExit(f"benchmark: --against {rev}: {done.stderr.strip()}")
    path = folder / "command_before.py"
    path.write_text(done.stdout)
    spec = importlib.util.spec_from_file_location("command_before", path)
    if spec is None or spec.loader is None:
        raise SystemExit(f"benchmark: {path}: not importable")
    module = importlib.util.module_from_spec(spec)
    sys.modules["command_before"] = module  # its dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def per_start(run: Callable[..., object], argv: list[str], starts: int) -> float:
    t = time.perf_counter()
    for _ in range(starts):
        run(argv, quiet=True)
    return (time.perf_counter() - t) / starts


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--against", required=True, metavar="REV", help="the commit whose ci/command.py is 'before'")
    ap.add_argument("--starts", type=at_least_one, default=200, help="programs started per program, way and round")
    ap.add_argument("--rounds", type=at_least_one, default=5)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        before = command_at(args.against, Path(tmp))
        if hasattr(before, "environment"):
            raise SystemExit(f"benchmark: --against {args.against}: its ci/command.py already has the allow-list; give the commit before it")
        programs = {"true": [command.resolve("true")], "python -c pass": [sys.executable, "-c", "pass"]}
        for name, argv in programs.items():
            old: list[float] = []
            new: list[float] = []
            for r in range(1, args.rounds + 1):
                old.append(per_start(before.run, argv, args.starts))
                new.append(per_start(command.run, argv, args.starts))
                print(f"{name}: round {r}: before {old[-1] * 1e3:.2f} ms, now {new[-1] * 1e3:.2f} ms a start", flush=True)
            b, a = statistics.median(old), statistics.median(new)
            print(
                f"{name}: median of {args.rounds} rounds of {args.starts} starts: before {b * 1e3:.2f} ms, now {a * 1e3:.2f} ms a "
                f"start; {(a - b) * 1e3:+.2f} ms, ratio {a / b:.2f}x (rounds {min(old) * 1e3:.2f}-{max(old) * 1e3:.2f} ms before, "
                f"{min(new) * 1e3:.2f}-{max(new) * 1e3:.2f} ms now)"
            )


if __name__ == "__main__":
    run_main(main)
