"""Compile evidence: a HIP build on a machine with no AMD GPU is a real build (manifest, key, binaries), and
``gpu_tests`` there records it as a ``compile`` record in the ledger instead of failing every device gate.

The record names the profile, the HIP compiler, the HIP units compiled, the fork's own among them, how long the build
directory's whole compile took and, when a later build was the last, that build's time. It is not a gate ship
requires (ci/gates/registry.py): ship for gfx1151 still wants the device gates, run on a Strix Halo.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from ci.compile.cmake import whole_compile
from ci.compile.stage import CurrentBuild
from ci.gates.results import CaseResult, GateResult, Status
from ci.gates.serving import devices

GATE = "compile"
HIP_UNIT_RE = re.compile(r"^build (\S+\.o): HIP_COMPILER__\S+ (\S+\.(?:cu|hip|cpp))", re.MULTILINE)
# the ROCmFPX units: its own formats (rocmfp4, rocmfpx: the library and their mmq and fattn-vec instances) and the
# gated delta net it carries ahead of upstream (13 at ciru-ai/ROCmFPX c14872f, issue 23)
FORK_UNIT_RE = re.compile(r"rocmfp|gated_delta_net")
BACKEND = {"hip": "ROCm", "cuda": "CUDA", "vulkan": "Vulkan"}

# Messages, shared with the tests that match on them (tests/support/messages.py)
COMPILED = "{profile} compiled by {compiler} in {seconds:.1f} s: {units} HIP units, {own} of them the fork's own ({names})"
LAST_BUILD = "; the last build {seconds:.1f} s"  # after COMPILED, when a build after the whole compile was the last
COMPILED_UNTIMED = (
    "{profile} compiled by {compiler}: {units} HIP units, {own} of them the fork's own ({names}); the last build "
    "{seconds:.1f} s, the whole compile not timed (no build of an empty build directory ran it to the end)"
)
UNIT_NOT_COMPILED = "{source}: no {object}"
NO_DEVICE = (
    "gpu_tests: no {device} device here (the {profile} build's llama-server lists none): recorded the compile "
    "(ledger line {line}); the device gates need a {profile} GPU{board}, and ship waits for them: CI's job "
    "'gpu ({profile})' runs them on a self-hosted runner with one (.github/workflows/ci.yml, docs/ci.md)"
)
STRIX_HALO = " (Strix Halo)"  # NO_DEVICE's board, for gfx1151


@dataclass(frozen=True)
class HipUnit:
    source: str  # as build.ninja names it
    object: str  # relative to the build directory
    compiled: bool

    @property
    def name(self) -> str:
        return Path(self.source).name

    @property
    def fork_own(self) -> bool:
        return bool(FORK_UNIT_RE.search(self.name))


def hip_units(build_dir: Path) -> list[HipUnit]:
    """Every HIP unit of the build (CMake's Ninja rules for the HIP language), and whether its object is there."""
    ninja = build_dir / "build.ninja"
    if not ninja.is_file():
        return []
    text = ninja.read_text(encoding="utf-8", errors="replace")
    return [HipUnit(m.group(2), m.group(1), (build_dir / m.group(1)).is_file()) for m in HIP_UNIT_RE.finditer(text)]


def lacks_device(build: CurrentBuild, backend: str) -> bool:
    """The build's llama-server lists no device of its backend here (a gfx1151 build on a machine with no AMD GPU)."""
    wanted = BACKEND.get(backend)
    server = build.manifest.binaries.get("llama-server")
    if wanted is None or server is None:
        return False
    return wanted not in devices.listed(build.build_dir / server.path)


def result(build: CurrentBuild) -> GateResult:
    """The ``compile`` record of ``build``: passed when every HIP unit's object is there."""
    manifest = build.manifest
    units = hip_units(build.build_dir)
    compiled = [u for u in units if u.compiled]
    own = [u for u in compiled if u.fork_own]
    compiler = manifest.toolchain.get("hip", "unknown")
    missing = [u for u in units if not u.compiled]
    status = Status.PASSED if units and not missing else Status.FAILED
    problems = tuple(UNIT_NOT_COMPILED.format(source=u.source, object=u.object) for u in missing[:10])
    if not units:
        problems = (f"{build.build_dir / 'build.ninja'} has no HIP unit: not a HIP build",)
    what = {"profile": manifest.profile, "compiler": compiler, "units": len(compiled), "own": len(own)}
    what["names"] = ", ".join(sorted(u.name for u in own)) or "none"
    whole = whole_compile(build.build_dir)
    if whole is None:
        summary = COMPILED_UNTIMED.format(**what, seconds=manifest.seconds)
    else:
        summary = COMPILED.format(**what, seconds=whole.seconds)
        if whole.built_at != manifest.built_at:
            summary += LAST_BUILD.format(seconds=manifest.seconds)
    return GateResult(
        gate=GATE,
        status=status,
        summary=summary,
        cases=tuple(
            CaseResult(u.name, Status.PASSED if u.compiled else Status.FAILED, classname=f"{GATE}.hip", message=u.source) for u in units
        ),
        problems=problems,
        counts=(("hip_units", len(compiled)), ("fork_units", len(own)), ("missing", len(missing))),
        properties=(
            ("profile", manifest.profile),
            ("compiler", compiler),
            ("fork_units", " ".join(sorted(u.name for u in own))),
            ("built_at", manifest.built_at),
        )
        + ((("compile_steps", str(whole.steps)), ("compiled_at", whole.built_at)) if whole else ()),
        metrics=(("build_seconds", manifest.seconds),) + ((("compile_seconds", whole.seconds),) if whole else ()),
    )


def no_device_line(profile: str, device: str, ledger_line: int | None) -> str:
    line = ledger_line if ledger_line is not None else "?"
    return NO_DEVICE.format(device=device, profile=profile, line=line, board=STRIX_HALO if profile == "gfx1151" else "")
