"""What the orchestration costs: a full build through ``nox -s build`` against the same CMake commands run by
hand on the same tree, and a no-op build, nox start included.

    ONEBIT_FORK_MIRROR=PATH python benchmarks/build_overhead.py [--profile cpu] [--branch main] [--noop-reps 5]

Targets (issue): a no-op under 1.5 s wall; a full build within 2% of the hand-run commands. The baselines,
measured in the same run, are the hand-run cmake commands and nox's own start (``nox -l``).
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import mirror_from_env, nox, report, scratch_project, wall


def timed(argv: list[str], cwd: Path) -> float:
    t = time.perf_counter()
    subprocess.run(argv, cwd=cwd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - t


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--profile", default="cpu")
    ap.add_argument("--branch", default="main")
    ap.add_argument("--noop-reps", type=int, default=5)
    args = ap.parse_args()
    mirror = mirror_from_env()
    project = scratch_project()
    ci = [sys.executable, "-m", "ci"]
    tip = subprocess.run(["git", "rev-parse", args.branch], cwd=mirror, capture_output=True, text=True, check=True).stdout.strip()
    subprocess.run([*ci, "bump-pin", tip, "--remote", str(mirror), "--branch", args.branch, "--allow-rollback"], cwd=project, check=True, capture_output=True)
    subprocess.run([*ci, "patches", "--remote", str(mirror)], cwd=project, check=True, capture_output=True)
    subprocess.run(nox("-s", "build", "--", "--help"), cwd=project, check=True, capture_output=True)  # the session's venv, before timing

    orchestrated = timed(nox("-s", "build", "--", "--profile", args.profile), project)
    manifest = json.loads((project / "build" / args.profile / "build.json").read_text())
    hand_dir = project / "build" / f"{args.profile}-by-hand"
    source = project / "third_party" / "llama.cpp-rocmfpx"
    configure = ["cmake", "-S", str(source), "-B", str(hand_dir), "-G", "Ninja", *manifest["flags"]]
    compile_ = ["cmake", "--build", str(hand_dir), "--target", *manifest["targets"]]
    by_hand = timed(configure, project) + timed(compile_, project)
    print(f"full build ({args.profile}, {len(manifest['targets'])} targets): nox -s build {orchestrated:.1f} s; the same cmake commands by hand {by_hand:.1f} s;"
          f" ratio {orchestrated / by_hand:.4f} ({100 * (orchestrated / by_hand - 1):+.2f}%); target < +2%")

    baseline = wall(nox("-l"), project, args.noop_reps)
    noop = wall(nox("-s", "build", "--", "--profile", args.profile), project, args.noop_reps)
    print(report(f"no-op build ({args.profile}, nox -R)", noop, baseline, 1.5))
    shutil.rmtree(project.parent, ignore_errors=True)


if __name__ == "__main__":
    main()
