"""How long the whole route suite takes, against pytest's own start-up and against issue 5's 3 s target.

    python benchmarks/route_suite.py [--rounds 5]

Each round runs the baseline, then the suite, each in a fresh ``python -m pytest`` subprocess from the repository
root (interleaved, so both see the same machine). The baseline is the same invocation collecting nothing
(``--ignore-glob='tests/serve/*'``): interpreter, pytest, plugins and the root conftest. The engine's shell version of these
tests waited up to 10 s per case.
"""

from __future__ import annotations

import argparse
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path

from common import at_least_one, run_main  # the benchmarks' own helpers, beside this file

ROOT = Path(__file__).resolve().parent.parent
TARGET_S = 3.0
SUITE = [sys.executable, "-m", "pytest", "tests/serve", "-q", "-p", "no:cacheprovider"]
BASELINE = [*SUITE, "--ignore-glob=tests/serve/*"]  # a plain --ignore does not apply to a path given
NO_TESTS_COLLECTED = 5  # pytest's exit code when it collects nothing


def timed(argv: list[str], ok: int) -> tuple[float, str]:
    start = time.perf_counter()
    done = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, check=False)
    wall = time.perf_counter() - start
    if done.returncode != ok:
        sys.exit(f"route_suite: {' '.join(argv[2:])} exited with {done.returncode}:\n{done.stdout[-2000:]}{done.stderr[-2000:]}")
    return wall, done.stdout


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    p.add_argument("--rounds", type=at_least_one, default=5, help="rounds of baseline + suite (default 5)")
    rounds = p.parse_args().rounds
    base: list[float] = []
    suite: list[float] = []
    summary = ""
    for _ in range(rounds):
        base.append(timed(BASELINE, NO_TESTS_COLLECTED)[0])
        wall, out = timed(SUITE, 0)
        suite.append(wall)
        summary = out.strip().splitlines()[-1]
    tests = re.search(r"(\d+) passed", summary)
    print(f"route suite: {tests.group(1) if tests else '?'} tests, {rounds} rounds, interleaved with the baseline")
    print(f"{'':24}{'best':>9}{'median':>9}{'worst':>9}")
    rows = [("pytest start-up", base), ("tests/serve", suite)]
    for name, times in rows:
        print(f"{name:24}{min(times):>8.2f}s{statistics.median(times):>8.2f}s{max(times):>8.2f}s")
    b_med, s_med = statistics.median(base), statistics.median(suite)
    print(f"{'suite / start-up':24}{min(suite) / min(base):>8.1f}x{s_med / b_med:>8.1f}x{max(suite) / max(base):>8.1f}x")
    print(
        f"{'suite / the 3 s target':24}{min(suite) / TARGET_S:>9.2f}{s_med / TARGET_S:>9.2f}{max(suite) / TARGET_S:>9.2f}   (under 1 meets it)"
    )
    print("baseline: the same pytest invocation collecting nothing (interpreter, pytest, plugins, the root conftest)")
    return 0 if s_med < TARGET_S else 1


if __name__ == "__main__":
    run_main(main)
