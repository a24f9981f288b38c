"""bump_pin and patches --check against a real fork's local mirror, nox start included.

    ONEBIT_FORK_MIRROR=PATH python benchmarks/pin_and_patches.py [--reps 5]

Targets (issues): bump_pin under 3 s, patches --check of a 10-patch series under 1 s after nox start, and
verify_pin under 1 s. The baseline, measured in the same run, is nox's own start (``nox -l``). Last, a bump
with a checkout and a two-patch series, one patch the new pin already has (dropped) and one it lacks (applied
again), each rep from the same state.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import at_least_one, mirror_from_env, nox, report, run_main, scratch_project, wall


def git(cwd: Path, *args: str) -> str:
    env = {**os.environ, "GIT_AUTHOR_NAME": "Bench", "GIT_AUTHOR_EMAIL": "bench@example.invalid"}
    env |= {"GIT_COMMITTER_NAME": "Bench", "GIT_COMMITTER_EMAIL": "bench@example.invalid"}
    return subprocess.run(["git", *args], cwd=cwd, env=env, check=True, capture_output=True, text=True).stdout.strip()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=at_least_one, default=5)
    ap.add_argument("--branch", default="main")
    args = ap.parse_args()
    mirror = mirror_from_env()
    project = scratch_project()
    ci = [sys.executable, "-m", "ci"]
    older, newer = git(mirror, "rev-parse", f"{args.branch}~20"), git(mirror, "rev-parse", f"{args.branch}~5")
    subprocess.run([*ci, "bump-pin", older, "--remote", str(mirror), "--branch", args.branch, "--allow-rollback"], cwd=project, check=True, capture_output=True)
    subprocess.run(nox("-s", "verify_pin"), cwd=project, check=True, capture_output=True)  # the venv exists before timing

    baseline = wall(nox("-l"), project, args.reps)
    print(report("verify_pin (nox -R)", wall(nox("-s", "verify_pin"), project, args.reps), baseline, 1.0))

    moves = []
    for i in range(args.reps):  # each rep is a real move: old -> new, then back with --allow-rollback
        target, extra = (newer, []) if i % 2 == 0 else (older, ["--allow-rollback"])
        moves += wall(nox("-s", "bump_pin", "--", target[:7], "--remote", str(mirror), *extra), project, 1)
    print(report("bump_pin (nox -R, local mirror)", moves, baseline, 3.0))

    pin = older if args.reps % 2 == 0 else newer
    subprocess.run([*ci, "patches", "--remote", str(mirror)], cwd=project, check=True, capture_output=True)
    checkout = project / "third_party" / "llama.cpp-rocmfpx"
    git(checkout, "switch", "-q", "-c", "bench-series")
    sources = [p for p in git(checkout, "ls-files", "common", "ggml/src").splitlines() if p.endswith((".c", ".cpp"))][:10]
    for path in sources:
        with open(checkout / path, "a") as fh:
            fh.write("// onebit bench\n")
        git(checkout, "commit", "-qam", f"bench: touch {path}\n\nUpstream: not-needed: a benchmark\nDrop-when: never")
    subprocess.run([*ci, "export-patches", "--branch", "bench-series"], cwd=project, check=True, capture_output=True)
    git(checkout, "switch", "-q", "--detach", pin)
    print(report(f"patches --check, {len(sources)} patches (nox -R)", wall(nox("-s", "patches", "--", "--check"), project, args.reps), baseline, 1.0))

    # a two-patch series at the older pin: one change the newer pin has (its first commit), one it lacks
    (project / "patches" / "series").write_text("")
    subprocess.run([*ci, "bump-pin", older, "--remote", str(mirror), "--branch", args.branch, "--allow-rollback"], cwd=project, check=True, capture_output=True)
    git(checkout, "switch", "-q", "-C", "bench-two", older)
    upstreamed = git(mirror, "rev-list", "--reverse", "--no-merges", f"{older}..{newer}").split()[0]
    git(checkout, "cherry-pick", "-x", upstreamed)
    git(checkout, "commit", "-q", "--amend", "-m", git(checkout, "log", "-1", "--format=%B") + "\n\nUpstream: not-needed: the fork has it\nDrop-when: the pin includes it")
    kept = next(p for p in sources if not git(mirror, "diff", "--name-only", older, newer, "--", p))
    with open(checkout / kept, "a") as fh:
        fh.write("// onebit bench: kept\n")
    git(checkout, "commit", "-qam", "bench: a patch the newer pin lacks\n\nUpstream: not-needed: a benchmark\nDrop-when: never")
    subprocess.run([*ci, "export-patches", "--branch", "bench-two"], cwd=project, check=True, capture_output=True)
    saved = {p.name: p.read_bytes() for p in (project / "patches").iterdir()}
    moves = []
    for _ in range(args.reps):
        for p in (project / "patches").iterdir():
            p.unlink()
        for name, data in saved.items():
            (project / "patches" / name).write_bytes(data)
        subprocess.run([*ci, "bump-pin", older, "--allow-rollback", "--remote", str(mirror)], cwd=project, check=True, capture_output=True)
        subprocess.run([*ci, "patches"], cwd=project, check=True, capture_output=True)
        moves += wall(nox("-s", "bump_pin", "--", newer[:7], "--drop-upstreamed", "--remote", str(mirror)), project, 1)
    print(report("bump_pin with a checkout, 2 patches (1 upstream, dropped; 1 applied again) (nox -R)", moves, baseline, 3.0))
    done = subprocess.run(["git", "diff", "--cached", "--name-only"], cwd=checkout, capture_output=True, text=True, check=True).stdout.split()
    left = [ln for ln in (project / "patches" / "series").read_text().splitlines() if ln and not ln.startswith("#")]
    print(f"  after the last bump: HEAD {git(checkout, 'rev-parse', '--short', 'HEAD')}, series {left}, staged {done}")


if __name__ == "__main__":
    run_main(main)
