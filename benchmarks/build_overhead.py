"""What the orchestration costs: a full build through ``nox -s build`` against the same CMake commands run by
hand on the same tree, and a no-op build, nox start included.

    ONEBIT_FORK_MIRROR=PATH python benchmarks/build_overhead.py [--profile cpu] [--branch main] [--url URL] [--noop-reps 5] [--against REV]

Targets (issues): a no-op under 0.6 s wall (the house issue; 1.5 s before); a full build within 2% of the hand-run
commands. The baselines,
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
sys.path.insert(1, str(Path(__file__).resolve().parents[1]))
from common import at_least_one, mirror_from_env, nox, report, run_main, scratch_project, wall


def timed(argv: list[str], cwd: Path) -> float:
    t = time.perf_counter()
    subprocess.run(argv, cwd=cwd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - t


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--profile", default="cpu")
    ap.add_argument("--branch", default="main")
    ap.add_argument("--url", help="the fork's URL, when the mirror is another fork than the pin's (bump_pin --url)")
    ap.add_argument("--noop-reps", type=at_least_one, default=5)
    ap.add_argument("--project", type=Path, help="an existing onebit-ci git checkout to use instead of a scratch clone")
    ap.add_argument("--noop-only", action="store_true", help="skip the hand-run comparison: one build through nox, then the no-ops")
    ap.add_argument("--against", metavar="REV", help="also time the no-op (python -m ci build) of this checkout against onebit-ci at REV, interleaved in the same run")
    args = ap.parse_args()
    mirror = mirror_from_env()
    project = args.project.resolve() if args.project else scratch_project()
    ci = [sys.executable, "-m", "ci"]
    tip = subprocess.run(["git", "rev-parse", args.branch], cwd=mirror, capture_output=True, text=True, check=True).stdout.strip()
    subprocess.run([*ci, "bump-pin", tip, "--remote", str(mirror), "--branch", args.branch, "--allow-rollback", *(["--url", args.url] if args.url else [])], cwd=project, check=True, capture_output=True)
    if args.against:  # pins.yaml as an older onebit-ci reads it: no expect.archs, no release.require (the build key is the same)
        pins = project / "pins.yaml"
        kept = [ln for ln in pins.read_text().splitlines() if not ln.strip().startswith(("archs:", "require:", "release:"))]
        pins.write_text("\n".join(kept) + "\n")
    subprocess.run([*ci, "patches", "--remote", str(mirror)], cwd=project, check=True, capture_output=True)
    subprocess.run(nox("-s", "build", "--", "--help"), cwd=project, check=True, capture_output=True)  # the session's venv, before timing

    # the same commands by hand first (they also warm the page cache for the source, if anything, in nox's favour
    # only for reads; the compile is CPU-bound), from the flags the orchestration would pass
    from ci.commands.job import Job
    from ci.compile.cmake import BuildRequest  # the flags exactly as the orchestration computes them

    if args.noop_only:
        orchestrated = timed(nox("-s", "build", "--", "--profile", args.profile), project)
        print(f"full build ({args.profile}): nox -s build {orchestrated:.1f} s (no hand-run comparison: --noop-only)")
    else:
        hand_plan = Job.resolve(project).build_plan(BuildRequest(profile=args.profile, build_root=project / "build-by-hand"))
        by_hand = timed(list(hand_plan.configure_argv), project) + timed(list(hand_plan.build_argv), project)
        orchestrated = timed(nox("-s", "build", "--", "--profile", args.profile), project)
        manifest = json.loads((project / "build" / args.profile / "build.json").read_text())
        print(f"full build ({args.profile}, {len(manifest['targets'])} targets): nox -s build {orchestrated:.1f} s; the same cmake commands by hand {by_hand:.1f} s;"
              f" ratio {orchestrated / by_hand:.4f} ({100 * (orchestrated / by_hand - 1):+.2f}%); target < +2%")

    baseline = wall(nox("-l"), project, args.noop_reps)
    noop = wall(nox("-s", "build", "--", "--profile", args.profile), project, args.noop_reps)
    print(report(f"no-op build ({args.profile}, nox -R)", noop, baseline, 0.6))
    if args.against:
        against(project, args.against, args.profile, args.noop_reps)
    shutil.rmtree(project / "build-by-hand", ignore_errors=True)
    if not args.project:
        shutil.rmtree(project.parent, ignore_errors=True)


def against(project: Path, rev: str, profile: str, reps: int) -> None:
    """The no-op build of this checkout's ci/ and of REV's, on the same built tree, interleaved (A B A B): the ratio is
    the change's cost, whatever the machine's load. pins.yaml loses the keys an older onebit-ci does not know."""
    import os
    import tempfile

    old = Path(tempfile.mkdtemp(prefix="onebit-against-")) / "ci-at-rev"
    root = Path(__file__).resolve().parents[1]
    subprocess.run(["git", "worktree", "add", "-q", "--detach", str(old), rev], cwd=root, check=True)
    try:
        argv = [sys.executable, "-m", "ci", "--root", str(project), "build", "--profile", profile]
        mine: list[float] = []
        theirs: list[float] = []
        for _ in range(reps):
            for code, out in ((root, mine), (old, theirs)):
                env = {**os.environ, "PYTHONPATH": str(code)}
                out += wall(argv, Path(tempfile.gettempdir()), 1, env)
        print(report(f"no-op build ({profile}, python -m ci) this checkout against {rev}", mine, theirs))
    finally:
        subprocess.run(["git", "worktree", "remove", "--force", str(old)], cwd=root, check=False)


if __name__ == "__main__":
    run_main(main)
