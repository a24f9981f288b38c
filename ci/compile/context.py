"""What one command works from, made once: the project, pins.yaml, the patch series, the machine's flags and
the toolchain of each profile it asks for (found once, however many stages ask)."""

from __future__ import annotations

import os
from collections.abc import Mapping
from functools import cached_property
from pathlib import Path

from ci.compile import toolchain as toolchain_mod
from ci.compile.cmake import BuildPlan, BuildRequest, plan
from ci.compile.flags import flags_for, local_flags, one_off_flags, profile_of
from ci.compile.profiles import Profile
from ci.compile.toolchain import Toolchain
from ci.pin.pins import Pins
from ci.pin.project import Project
from ci.source.series import PATCHES_DIR, Series, load_series
from ci.source.sync import Source


class Context:
    def __init__(self, project: Project, env: Mapping[str, str] | None = None) -> None:
        self.project = project
        self.env: Mapping[str, str] = dict(os.environ) if env is None else env
        self._toolchains: dict[str, Toolchain] = {}

    @property
    def root(self) -> Path:
        return self.project.root

    @cached_property
    def pins(self) -> Pins:
        return self.project.load_pins()

    @cached_property
    def series(self) -> Series:
        return load_series(self.root / PATCHES_DIR)

    @cached_property
    def local_flags(self) -> tuple[str, ...]:
        return local_flags(self.root, self.env)

    def profile(self, name: str) -> Profile:
        return profile_of(name, self.pins)

    def toolchain(self, profile: Profile) -> Toolchain:
        if profile.name not in self._toolchains:
            self._toolchains[profile.name] = toolchain_mod.detect(profile, self.pins.build, self.env)
        return self._toolchains[profile.name]

    def source(self) -> Source:
        return self.project.source(self.pins, self.series)

    def build_dir(self, profile: Profile, build_root: Path | None = None) -> Path:
        return (build_root or self.root / "build") / profile.name

    def build_plan(self, request: BuildRequest) -> BuildPlan:
        """The plan of ``request`` from what is here now: pins.yaml, the series, the machine's flags, the toolchain."""
        profile = self.profile(request.profile)
        pins = self.pins
        return plan(
            profile=profile,
            flags=flags_for(profile, pins, self.local_flags, one_off_flags(request.defines)),
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
