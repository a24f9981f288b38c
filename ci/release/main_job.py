"""What ``nox`` runs by default, the whole pipeline: verify the pin; then, where the profile's toolchain is, build,
run every gate ship requires (registry.required: gpu_tests' gates, then the self-test when pins.yaml requires it) and
ship; on a machine without it, say what is missing and run the gate that needs no GPU (the route tests)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from ci.compile.cmake import BuildRequest
from ci.compile.context import Context
from ci.compile.stage import run_build
from ci.errors import GateFailed, ToolchainError
from ci.gates.registry import SELFTEST, GateOptions, required
from ci.gates.route import route_gate
from ci.pin.verify import verify
from ci.release import evidence, ledger, ship


@dataclass(frozen=True)
class MainJobRequest:
    profile: str
    remote: str | None = None


def run(ctx: Context, request: MainJobRequest, say: Callable[[str], None]) -> int:
    check = verify(ctx.project)
    if not check.ok:
        raise check.error()
    say(check.headline())
    profile = ctx.profile(request.profile)
    try:
        ctx.toolchain(profile)
    except ToolchainError as exc:
        return _no_toolchain(ctx, profile.name, exc.message, say)
    run_build(ctx, BuildRequest(profile=profile.name, remote=request.remote), say)
    done = evidence.run_gpu_tests(ctx, evidence.GpuTestsRequest(profile.name, options=GateOptions()), say)
    evidence.report(done, f"gpu_tests, profile {profile.name}", say)
    if SELFTEST in required(ctx.pins):
        evidence.gate_selftest_session(ctx, profile.name, None, (), say)
    results_dir = ledger.default_results_dir(ctx.root)
    return ship.session(ctx, profile.name, results_dir, None, False, say)


def _no_toolchain(ctx: Context, profile: str, missing: str, say: Callable[[str], None]) -> int:
    say(f"main job: no {profile} toolchain here ({missing})")
    say("main job: the build and the GPU gates need it; running the gate that needs no GPU: the route tests")
    results_dir = ledger.default_results_dir(ctx.root)
    out: Path = results_dir / "no-build"
    result = route_gate(out)
    evidence.record(result, out, ledger_path=ledger.ledger_path(results_dir), build=ledger.BuildContext(profile=profile), root=ctx.root)
    say(evidence.summary_table([result]))
    if not result.ok:
        raise GateFailed(f"main job: the route gate failed: {'; '.join(result.problems[:3])}")
    return 0
