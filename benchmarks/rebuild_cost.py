"""What a self-test fault's rebuild costs once the fork's checkout was written again, against ninja's own one-file
rebuild of the same fault on a checkout nobody rewrote, on the real fork's cpu build (issue 45: 735 s a fault, every
one of the 295 steps rebuilt, for a one-line change in ggml-cpu/ops.cpp).

    ONEBIT_FORK_MIRROR=PATH python benchmarks/rebuild_cost.py [--project DIR] [--commit c14872f] [--branch main]
        [--url URL] [--fault cpu-gdn-snapshot-slot] [--jobs 2] [--also-unreconciled]

1. A project pinned to the commit (a scratch clone of this checkout, or ``--project``: an onebit-ci checkout) and its
   cpu build (``python -m ci build``: a whole compile the first time, said with its seconds).
2. The baseline: the fault planted by the self-test's own ``plant`` and rebuilt as ``selftest-fault`` rebuilds it
   (the copies bind-mounted over the user's paths in a mount namespace, then the build's own ``cmake --build``).
3. ``rm -rf`` of the checkout, then ``python -m ci build``: up to date, the times put back (its seconds said).
4. The same fault planted and rebuilt again: the figure. The ratio is (4) over (2), both from this run.
``--also-unreconciled``: then the copy as the self-test made it before (``cp -a``, nothing put back): the old cost.

ccache is off for the rebuilds (CCACHE_DISABLE=1): the same fault compiled twice would come from the cache the second
time. This checkout's code runs (``python -m ci --root PROJECT``), whatever the project's own ci/ is.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(1, str(Path(__file__).resolve().parents[1]))
from common import ROOT, at_least_one, mirror_from_env, run_main, scratch_project

from ci.commands.job import Job
from ci.compile.cmake import BuildPlan, BuildRequest, build_environment
from ci.gates.selftest import run as selftest

STEP = re.compile(r"^\[\d+/(\d+)\] (.*)$", re.MULTILINE)
CI = [sys.executable, "-m", "ci"]


def ci(project: Path, *args: str) -> tuple[float, str]:
    """``python -m ci --root PROJECT ARGS`` with this checkout's code: its seconds and output; a failure ends the
    benchmark with the output."""
    t = time.perf_counter()
    done = subprocess.run([*CI, "--root", str(project), *args], cwd=ROOT, capture_output=True, text=True, check=False)
    seconds = time.perf_counter() - t
    if done.returncode != 0:
        sys.exit(f"benchmark: python -m ci {' '.join(args)} failed ({done.returncode}):\n{done.stdout}{done.stderr}")
    return seconds, done.stdout + done.stderr


def rebuild(plan: BuildPlan, trial: selftest.Trial, checkout: Path, build_dir: Path) -> tuple[float, int, list[str]]:
    """The fault's copies bind-mounted over the user's paths in a mount namespace, then the build's own command, as
    ``selftest-fault`` does: seconds, ninja's steps, the objects it compiled."""
    unshare = ["unshare", "--mount", "--propagation", "private", *([] if os.geteuid() == 0 else ["--map-root-user"])]
    script = 'mount --bind "$1" "$2" && mount --bind "$3" "$4" && shift 4 && exec "$@"'
    argv = [*unshare, "--", "sh", "-c", script, "sh", str(trial.src), str(checkout), str(trial.build), str(build_dir), *plan.build_argv]
    env = {**build_environment(plan), "CCACHE_DISABLE": "1"}
    t = time.perf_counter()
    done = subprocess.run(argv, env=env, capture_output=True, text=True, check=False)
    seconds = time.perf_counter() - t
    if done.returncode != 0:
        sys.exit(f"benchmark: the rebuild in the fault's namespace failed ({done.returncode}):\n{done.stdout[-3000:]}{done.stderr[-2000:]}")
    steps = STEP.findall(done.stdout)
    objects = sorted(what.rsplit("/", 1)[-1] for _, what in steps if what.startswith("Building"))
    return seconds, int(steps[-1][0]) if steps else 0, objects  # the last total: a run that re-ran CMake restarts its count


def planted(project: Path, fault_id: str, plan: BuildPlan, *, reconcile: bool = True) -> tuple[float, int, list[str]]:
    """The fault planted in a copy (the self-test's ``plant``; ``reconcile=False``: the copy as it was made before
    issue 45, ``cp -a`` alone) and rebuilt there; the copy removed after."""
    job = Job.resolve(project)
    fault = next((f for f in selftest.load_faults() if f.id == fault_id), None)
    if fault is None:
        sys.exit(f"benchmark: --fault {fault_id}: not in faults.yaml")
    checkout = project / job.pins.submodule
    area = project / "build" / "selftest" / "rebuild-cost"
    if reconcile:
        trial = selftest.plant(checkout, plan.build_dir, fault, area)
    else:
        trial = selftest.Trial(fault, area / fault.id)
        shutil.rmtree(trial.work, ignore_errors=True)
        trial.work.mkdir(parents=True)
        for src, dst in ((checkout, trial.src), (plan.build_dir, trial.build)):
            subprocess.run(["cp", "-a", "--reflink=auto", str(src), str(dst)], check=True)
        target = trial.src / fault.file
        target.write_text(target.read_text().replace(fault.search, fault.replace))
    try:
        return rebuild(plan, trial, checkout, plan.build_dir)
    finally:
        shutil.rmtree(trial.work, ignore_errors=True)


def line(name: str, result: tuple[float, int, list[str]]) -> str:
    seconds, steps, objects = result
    return f"{name}: {seconds:.1f} s, {steps} steps, {len(objects)} compiled ({', '.join(objects[:4])}{', ...' if len(objects) > 4 else ''})"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--project", type=Path, help="an onebit-ci git checkout to use (pinned and built or not) instead of a scratch clone")
    ap.add_argument("--commit", default="c14872f", help="the fork's commit to pin (default c14872f, ciru-ai/ROCmFPX main)")
    ap.add_argument("--branch", default="main")
    ap.add_argument("--url", default="https://github.com/ciru-ai/ROCmFPX", help="the fork's URL (bump_pin --url)")
    ap.add_argument("--fault", default="cpu-gdn-snapshot-slot", help="a fault of faults.yaml (default: a one-line change in ggml-cpu/ops.cpp)")
    ap.add_argument("--jobs", type=at_least_one, default=2)
    ap.add_argument("--also-unreconciled", action="store_true", help="also rebuild the fault in a copy made as before issue 45 (minutes on 2 cores)")
    args = ap.parse_args()
    if shutil.which("unshare") is None:
        sys.exit("benchmark: unshare (util-linux) not found; the fault's rebuild runs in a mount namespace, as the self-test's")
    mirror = mirror_from_env()
    project = args.project.resolve() if args.project else scratch_project()
    remote = ("--remote", str(mirror))
    if Job.resolve(project).pins.fork.commit[: len(args.commit)] != args.commit:
        ci(project, "bump-pin", args.commit, *remote, "--branch", args.branch, "--url", args.url, "--allow-rollback", "--no-compile")
    seconds, out = ci(project, "build", "--profile", "cpu", "-j", str(args.jobs), *remote)
    print(f"the cpu build: {seconds:.1f} s ({'up to date' if 'build: up to date' in out else 'built'})")
    plan = Job.resolve(project).build_plan(BuildRequest(profile="cpu", jobs=args.jobs))

    base = planted(project, args.fault, plan)
    print(line(f"baseline, {args.fault} on a checkout nobody rewrote (ninja's own one-file rebuild)", base))
    shutil.rmtree(project / Job.resolve(project).pins.submodule)
    seconds, out = ci(project, "build", "--profile", "cpu", "-j", str(args.jobs))
    said = [ln for ln in out.splitlines() if ln.startswith("build:")]
    print(f"rm -rf of the checkout, then python -m ci build: {seconds:.1f} s; " + " | ".join(said))
    after = planted(project, args.fault, plan)
    print(line(f"{args.fault} after the checkout was written again", after))
    print(f"ratio {after[0] / base[0]:.2f}x ninja's own one-file rebuild ({after[0]:.1f} s against {base[0]:.1f} s); steps {after[1]} against {base[1]}")
    if args.also_unreconciled:  # the checkout written again once more, by a sync alone: no build puts a time back
        shutil.rmtree(project / Job.resolve(project).pins.submodule)
        ci(project, "patches")
        old = planted(project, args.fault, plan, reconcile=False)
        print(line(f"{args.fault} in a copy made as before issue 45 (cp -a alone)", old))
        print(f"ratio {old[0] / base[0]:.2f}x ninja's own one-file rebuild")
    if not args.project:
        shutil.rmtree(project.parent, ignore_errors=True)


if __name__ == "__main__":
    run_main(main)
