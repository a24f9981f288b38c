"""What one command works from, resolved once and then frozen: the project, pins.yaml (parsed once), the patch
series, the machine's flags; for a command on a build, the profile, its toolchain (found once), the build plan and
its key (derived once). Commands hand the stages these values; no stage reaches back for them."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from ci.command import declare
from ci.compile import toolchain as toolchain_mod
from ci.compile.cmake import BuildPlan, BuildRequest, plan
from ci.compile.flags import flags_for, local_flags, one_off_flags, profile_of
from ci.compile.profiles import Profile
from ci.compile.stage import CurrentBuild, current_build
from ci.compile.toolchain import Toolchain
from ci.errors import ConfigError
from ci.gates.registry import check_expect, check_require
from ci.pin.pins import Pins, target_problem
from ci.pin.project import Project, find_project
from ci.source.series import PATCHES_DIR, Series, load_series
from ci.source.sync import Source


@dataclass(frozen=True)
class Job:
    project: Project
    pins: Pins
    series: Series
    env: Mapping[str, str]
    _toolchains: dict[str, Toolchain] = field(default_factory=dict, compare=False, repr=False)  # found once per profile

    @classmethod
    def resolve(cls, root: Path | None = None, env: Mapping[str, str] | None = None) -> Job:
        """The project at or above ``root`` (or the working directory), its pins.yaml and its series, read once."""
        project = find_project(root)
        pins = project.load_pins()
        check_require(pins)
        check_expect(pins)
        declare(pins.environment)  # the job's programs get what its pins.yaml names, and their records say so
        return cls(project, pins, load_series(project.root / PATCHES_DIR), dict(os.environ) if env is None else env)

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
        if profile.name not in self._toolchains:
            self._toolchains[profile.name] = toolchain_mod.detect(profile, self.pins.build, self.env)
        return self._toolchains[profile.name]

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
