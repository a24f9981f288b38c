"""``nox -s build``: verify the pin → the plan and its key (toolchain, flags) → checkout at pin + series → configure
→ compile → manifest. ``matrix``: the CI matrix of the profiles asked for."""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable

from ci.commands import absolute, job_of, say
from ci.commands.job import Job
from ci.compile import profiles
from ci.compile.cmake import BuildPlan, BuildRequest
from ci.compile.stage import BuildOutcome, run_build, timed
from ci.errors import Refused
from ci.pin.verify import verify


def build(job: Job, request: BuildRequest, say: Callable[[str], None], *, verified: bool = False) -> BuildOutcome:
    """The build of ``request``: the pin verified (unless the caller just did), the plan made (every flag checked
    before anything is touched), then the build stage."""
    if not verified:
        with timed(say, "verify pin"):
            check = verify(job.project, job.pins, checkout_head=False)
            if not check.ok:
                raise Refused("the pin does not verify: " + "; ".join(check.problems) + "; run nox -s verify_pin")
    with timed(say, "toolchain"):
        build_plan: BuildPlan = job.build_plan(request)
        tools = build_plan.toolchain
        say(f"toolchain: {tools.describe()}; ccache: {tools.ccache or 'not found'}")
    return run_build(build_plan, job.source(), job.root, request.remote, say)


def main(args: argparse.Namespace) -> int:
    request = BuildRequest(args.profile, args.build_type, tuple(args.define), tuple(args.target), args.remote, absolute(args.build_dir), args.jobs)
    build(job_of(args), request, say)
    return 0


def matrix(args: argparse.Namespace) -> int:
    say(json.dumps(profiles.matrix([n.strip() for n in args.profiles.split(",") if n.strip()]), separators=(",", ":")))
    return 0
