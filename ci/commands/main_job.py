"""What ``nox`` runs by default, the whole pipeline: verify the pin; then, where the profile's toolchain is, build,
run every gate ship requires (registry.required: gpu_tests' gates, then the self-test when pins.yaml requires it) and
ship; on a machine without it, say what is missing and run the gate that needs no GPU (the route tests).

The job is resolved once: pins.yaml parsed once, the pin verified once, the build plan and its key derived once and
handed to every step."""

from __future__ import annotations

import argparse
from collections.abc import Callable

from ci.commands import job_of, say
from ci.commands.build import build
from ci.commands.gate_selftest import session as selftest_session
from ci.commands.gpu_tests import TITLE, GpuTestsRequest, run_gates
from ci.commands.job import Job
from ci.commands.ship import session as ship_session
from ci.compile.cmake import BuildRequest
from ci.compile.profiles import DEFAULT_PROFILE
from ci.compile.stage import current_build
from ci.errors import GateFailed, ToolchainError
from ci.gates.registry import SELFTEST, required
from ci.gates.route.run import route_gate
from ci.pin.verify import verify
from ci.release import ledger, records

# Messages, shared with the tests that match on them (tests/support/messages.py)
PROFILE_VAR = "ONEBIT_PROFILE"  # the main job's profile when --profile is not given (nox, in CI)
NO_TOOLCHAIN = "main job: no {profile} toolchain here ({missing})"
ROUTE_ONLY = "main job: the build and the GPU gates need it; running the gate that needs no GPU: the route tests"
# the last line of a job that could not build: what ran, what did not and why, and what this machine can run instead
PARTLY_RAN = "main job: ran verify_pin and the route gate ({route}); not run: the {profile} build, its gates and ship (no {profile} toolchain here){instead}"
INSTEAD = "; {builds_here}"


def run(job: Job, profile_name: str, remote: str | None, say: Callable[[str], None], from_env: bool = False) -> int:
    # before anything runs: a typo is named where it was made, the option or the variable
    profile = job.profile(profile_name, f"{PROFILE_VAR}={profile_name}" if from_env else None)
    check = verify(job.project, job.pins)
    if not check.ok:
        raise check.error()
    say(check.headline())
    try:
        job.toolchain(profile)
    except ToolchainError as exc:
        return _no_toolchain(job, profile.name, exc.message.splitlines()[0], say)
    outcome = build(job, BuildRequest(profile=profile.name, remote=remote), say, verified=True)
    current = current_build(outcome.plan, job.root)  # the plan the build ran: its key, not a second derivation
    done = run_gates(job, current, GpuTestsRequest(profile.name), say)
    records.report(done, TITLE.format(profile=profile.name), say)
    if SELFTEST in required(job.pins):
        selftest_session(job, current, None, (), say)
    return ship_session(job, current, None, False, say, verified=True)  # the job verified the pin first


def _no_toolchain(job: Job, profile: str, missing: str, say: Callable[[str], None]) -> int:
    say(NO_TOOLCHAIN.format(profile=profile, missing=missing))
    say(ROUTE_ONLY)
    results_dir = ledger.default_results_dir(job.root)
    out = results_dir / "no-build"
    result = route_gate(out)
    records.record(result, out, ledger_path=ledger.ledger_path(results_dir), build=ledger.BuildContext(profile=profile), root=job.root)
    say(records.summary_table([result]))
    if not result.ok:
        raise GateFailed(f"main job: the route gate failed: {'; '.join(result.problems[:3])}")
    here = job.builds_here(besides=profile, sessions="main_job")
    say(PARTLY_RAN.format(route=result.summary, profile=profile, instead=INSTEAD.format(builds_here=here) if here else ""))
    return 0


def main(args: argparse.Namespace) -> int:
    job = job_of(args)
    from_env = args.profile is None and bool(job.env.get(PROFILE_VAR))
    return run(job, args.profile or job.env.get(PROFILE_VAR) or DEFAULT_PROFILE, args.remote, say, from_env=from_env)
