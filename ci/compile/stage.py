"""The build stage: the checkout brought to the pin + series, then configure → compile → manifest, under the build
key of a plan made beforehand (:class:`~ci.compile.cmake.BuildPlan`); and the check every later stage makes first:
is the profile's build exactly the one that plan describes?"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from ci.compile import ninja
from ci.compile.cmake import LOG, BuildPlan, Decision, build_environment, decide, execute
from ci.compile.manifest import Manifest, read_manifest
from ci.errors import CommandFailed, Refused
from ci.files import shown
from ci.locks import LOCK_NAME, command_line, held_lock
from ci.source.sync import Source, sync

# Messages, shared with the tests that match on them (tests/support/messages.py)
UP_TO_DATE = (
    "build: up to date: key {key} (pin {pin}, patches {patches}, profile {profile}, {toolchain}) matches {manifest}, "
    "and its {binaries} binaries and {libraries} libraries are as recorded"
)
BUILDING = "build: building {profile} (key {key}): {reasons}"
KEY_BUT_NINJA = "build: the key {key} matches {manifest}, but {reason}: letting ninja run it"
FULL_LOG = "build: the full log: {log}"
REBUILD = "run nox -s build -- --profile {profile}"
NO_BUILD = "no build of profile {profile} ({manifest} is missing): {hint}"
ONE_OFF_MISSING = (
    "the {profile} build was built with {flags}, which this run does not have: "
    "put it in ONEBIT_CMAKE_ARGS or cmake-args.local (the machine's flags, read by every session), then {hint}"
)
STALE_BUILD = "the {profile} build is stale (key {old}, current {key}: {reasons}): {hint}"
STEP = "step: {step}: {state} in {seconds:.2f} s"
STEP_DONE = "done"
STEP_FAILED = "FAILED"
STEP_CHECKOUT = "checkout and patches"  # STEP's steps
STEP_COMPILE = "configure and compile"
BUILD_DIRECTORY = "the build directory {directory}"  # what the build's lock guards (ci.locks' HELD)


@dataclass(frozen=True)
class BuildOutcome:
    manifest: Manifest
    up_to_date: bool
    plan: BuildPlan
    reasons: tuple[str, ...]


def run_build(build_plan: BuildPlan, source: Source, root: Path, remote: str | None, say: Callable[[str], None]) -> BuildOutcome:
    """checkout at pin + series → (configure) → compile → manifest; the pin verified and the plan made before. One
    build at a time per build directory: two at once left a build.json whose flags did not describe its binaries."""
    lock = build_plan.build_dir.parent / f".{build_plan.build_dir.name}{LOCK_NAME}"
    with held_lock(lock, "build", BUILD_DIRECTORY.format(directory=shown(build_plan.build_dir, root)), purpose=command_line()):
        return _locked_build(build_plan, source, root, remote, say)


def _locked_build(build_plan: BuildPlan, source: Source, root: Path, remote: str | None, say: Callable[[str], None]) -> BuildOutcome:
    profile, tools = build_plan.profile, build_plan.toolchain
    with timed(say, STEP_CHECKOUT):
        say(sync(source, remote=remote).describe())
    old = read_manifest(build_plan.manifest_path)
    decision = decide(build_plan, old)
    if decision.up_to_date and old is not None:
        disagreement = ninja_disagrees(build_plan, root, say)
        if disagreement is not None:
            decision = Decision(False, False, (disagreement,))
    if decision.up_to_date and old is not None:
        say(
            UP_TO_DATE.format(
                key=build_plan.key.short,
                pin=build_plan.pin[:7],
                patches=build_plan.series_digest[:12],
                profile=profile.name,
                toolchain=tools.describe(),
                manifest=shown(build_plan.manifest_path, root),
                binaries=len(old.binaries),
                libraries=len(old.libraries),
            )
        )
        return BuildOutcome(old, True, build_plan, ())
    say(BUILDING.format(profile=profile.name, key=build_plan.key.short, reasons="; ".join(decision.reasons)))
    try:
        with timed(say, STEP_COMPILE):
            manifest = execute(build_plan, decision, say, lambda p: shown(p, root))
    except CommandFailed:
        say(FULL_LOG.format(log=shown(build_plan.build_dir / LOG, root)))
        raise
    say(f"build: wrote {shown(build_plan.manifest_path, root)}; log: {shown(build_plan.build_dir / LOG, root)}")
    return BuildOutcome(manifest, False, build_plan, decision.reasons)


def ninja_disagrees(build_plan: BuildPlan, root: Path, say: Callable[[str], None]) -> str | None:
    """With the key matching, whether ninja agrees that nothing is to do: the checkout's times put back first (a
    checkout written again with the same content), then ``ninja -n``. What it would still run is said, and returned
    as the reason to let it run; None when it agrees. A key-matched build that ninja disagreed with was once a silent
    full rebuild later, in the first self-test fault's copy (735 s for a one-line change, issue 45)."""
    for line in ninja.reconcile(build_plan.build_dir, build_plan.source).lines(lambda p: shown(p, root)):
        say(line)
    left = ninja.pending(build_plan.ninja, build_plan.build_dir, build_plan.targets, build_environment(build_plan), root)
    if left is None:
        return None
    say(KEY_BUT_NINJA.format(key=build_plan.key.short, manifest=shown(build_plan.manifest_path, root), reason=left.reason()))
    return left.reason()


@dataclass(frozen=True)
class CurrentBuild:
    manifest: Manifest
    build_dir: Path

    @property
    def key(self) -> str:
        return self.manifest.key


def current_build(build_plan: BuildPlan, root: Path) -> CurrentBuild:
    """The profile's build when it is exactly the current one; Refused otherwise.

    The key is computed from what is here now (pins.yaml, the series, the machine's flags, the toolchain), so a
    pin bump or a patch edited since the build makes it stale, and so does a binary replaced since.
    """
    profile = build_plan.profile
    old = read_manifest(build_plan.manifest_path)
    hint = REBUILD.format(profile=profile.name)
    if old is None:
        raise Refused(NO_BUILD.format(profile=profile.name, manifest=shown(build_plan.manifest_path, root), hint=hint))
    decision = decide(build_plan, old)
    if not decision.up_to_date:
        missing = [f for f in old.one_off_flags if f not in build_plan.cmake_flags]
        if missing and old.key != build_plan.key.full:
            raise Refused(ONE_OFF_MISSING.format(profile=profile.name, flags=" ".join(missing), hint=hint))
        raise Refused(STALE_BUILD.format(profile=profile.name, old=old.key[:12], key=build_plan.key.short, reasons="; ".join(decision.reasons), hint=hint))
    return CurrentBuild(old, build_plan.build_dir)


class timed:
    """A step line with its duration, printed when the step ends (or fails)."""

    def __init__(self, say: Callable[[str], None], name: str) -> None:
        self.say, self.name = say, name

    def __enter__(self) -> None:
        self.t = time.monotonic()

    def __exit__(self, kind: object, exc: object, tb: object) -> None:
        state = STEP_DONE if kind is None else STEP_FAILED
        self.say(STEP.format(step=self.name, state=state, seconds=time.monotonic() - self.t))

