"""What one command works from, resolved once and then frozen: the project, pins.yaml (parsed once), the patch
series, the machine's flags; for a command on a build, the profile, its toolchain (found once), the build plan and
its key (derived once). Commands hand the stages these values; no stage reaches back for them."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from ci.compile import toolchain as toolchain_mod
from ci.compile.cmake import BuildPlan, BuildRequest, plan
from ci.compile.flags import flags_for, local_flags, one_off_flags, profile_of
from ci.compile.profiles import PROFILES, Profile
from ci.compile.stage import CurrentBuild, current_build
from ci.compile.toolchain import Toolchain
from ci.environment import declare
from ci.errors import ConfigError, ToolchainError
from ci.gates.registry import check_expect, check_require
from ci.pin.pins import Pins, target_problem
from ci.pin.project import Project, find_project
from ci.source.series import PATCHES_DIR, Series, load_series
from ci.source.sync import Source

# Messages, shared with the tests that match on them (tests/support/messages.py)
BUILDS_HERE = "this machine can build {profiles}: {command}"  # after a profile whose toolchain is not here
SESSION_COMMAND = "nox -s {sessions} -- --profile {profile}"
MAIN_JOB_COMMAND = "ONEBIT_PROFILE={profile} nox"
ANYWHERE = "cpu"  # the profile whose gates run on any machine: the one a hint names first


@dataclass(frozen=True)
class Job:
    project: Project
    pins: Pins
    series: Series
    env: Mapping[str, str]
    session: str = "build"  # the nox session this job runs for: the command a hint names
    _toolchains: dict[str, Toolchain | ToolchainError] = field(default_factory=dict, compare=False, repr=False)  # looked for once per profile

    @classmethod
    def resolve(cls, root: Path | None = None, env: Mapping[str, str] | None = None, session: str = "build") -> Job:
        """The project at or above ``root`` (or the working directory), its pins.yaml and its series, read once."""
        project = find_project(root)
        pins = project.load_pins()
        check_require(pins)
        check_expect(pins)
        declare(pins.environment)  # the job's programs get what its pins.yaml names, and their records say so
        return cls(project, pins, load_series(project.root / PATCHES_DIR), dict(os.environ) if env is None else env, session)

    @property
    def root(self) -> Path:
        return self.project.root

    def source(self) -> Source:
        """What the submodule's checkout must be: the pin with the series on top."""
        return source_of(self.project, self.pins, self.series)

    def profile(self, name: str, given: str | None = None) -> Profile:
        """The job's profile: its programs, the build's and the gates', get what it declares besides pins.yaml's."""
        profile = profile_of(name, self.pins, given)
        declare((*profile.variables, *self.pins.environment))
        return profile

    def toolchain(self, profile: Profile) -> Toolchain:
        """The profile's toolchain; missing, a ToolchainError that also names what this machine can build, as a
        command of this job's session that works here."""
        found = self._found(profile)
        if isinstance(found, ToolchainError):
            here = self.builds_here(besides=profile.name)
            raise ToolchainError(found.message + (f"\n{here}" if here else ""))
        return found

    def _found(self, profile: Profile) -> Toolchain | ToolchainError:
        """The profile's toolchain or why it is not here, looked for once."""
        if profile.name not in self._toolchains:
            try:
                self._toolchains[profile.name] = toolchain_mod.detect(profile, self.pins.build, self.env)
            except ToolchainError as exc:
                self._toolchains[profile.name] = exc
        return self._toolchains[profile.name]

    def buildable(self, besides: str = "") -> list[str]:
        """The profiles whose toolchain is on this machine (the profile table's order), ``besides`` left out."""
        return [name for name, profile in PROFILES.items() if name != besides and not isinstance(self._found(profile), ToolchainError)]

    def suggested_profile(self, besides: str = "") -> str | None:
        """The profile a hint names: one this machine can build, the one whose gates run anywhere first."""
        found = self.buildable(besides)
        return ANYWHERE if ANYWHERE in found else (found[0] if found else None)

    def builds_here(self, besides: str = "", sessions: str | None = None) -> str:
        """:data:`BUILDS_HERE`: the profiles this machine can build and the command of ``sessions`` (default this
        job's) for one of them, the profile whose gates run anywhere first; "" when it can build none."""
        found = self.buildable(besides)
        profile = self.suggested_profile(besides)
        if profile is None:
            return ""
        sessions = sessions or self.session
        command = MAIN_JOB_COMMAND.format(profile=profile) if sessions == "main_job" else SESSION_COMMAND.format(sessions=sessions, profile=profile)
        return BUILDS_HERE.format(profiles=" and ".join(found) if len(found) <= 2 else ", ".join(found), command=command)

    def build_dir(self, profile: Profile, build_root: Path | None = None) -> Path:
        return (build_root or self.root / "build") / profile.name

    def build_plan(self, request: BuildRequest) -> BuildPlan:
        """The plan of ``request`` and its key, from what is here now: pins.yaml, the series, the machine's flags
        (cmake-args.local, ONEBIT_CMAKE_ARGS), the toolchain. A command derives it once and hands it on."""
        profile = self.profile(request.profile)
        pins = self.pins
        for name in request.targets:
            if (problem := target_problem(name)) is not None:
                raise ConfigError(f"--target {name}: {problem}")
        return plan(
            profile=profile,
            flags=flags_for(profile, pins, local_flags(self.root, self.env), one_off_flags(request.defines)),
            toolchain=self.toolchain(profile),
            source=self.root / pins.submodule,
            build_dir=self.build_dir(profile, request.build_root),
            pin=pins.fork.commit,
            series_digest=self.series.digest,
            series_names=self.series.names,
            ggml_dirty=self.series.touches("ggml/"),
            targets=request.targets or pins.build.targets,
            build_type=request.build_type,
            jobs=request.jobs,
        )


def source_of(project: Project, pins: Pins, series: Series) -> Source:
    """What the submodule's checkout must be: the pin of ``pins`` with ``series`` on top."""
    return Source(
        name=pins.submodule,
        workdir=project.root / pins.submodule,
        gitdir=project.module_gitdir(pins.submodule),
        commit=pins.fork.commit,
        url=pins.fork.url,
        omit=pins.omit,
        series=series,
    )


def current(job: Job, profile: str, build_plan: BuildPlan | None = None) -> CurrentBuild:
    """The profile's build when it is exactly the one ``build_plan`` (made now when not given) describes."""
    return current_build(build_plan or job.build_plan(BuildRequest(profile=profile)), job.root)
