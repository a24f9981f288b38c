"""A build's CMake flags and where each comes from: the profile, the pin (pins.yaml), the machine, this build.

A machine's *local flags* (a GPU arch, a toolchain path) come from ``ONEBIT_CMAKE_ARGS`` and the git-ignored
``cmake-args.local``; every command that computes a build key reads them, so a build that needed one is gated and
shipped like any other. A ``-D`` given to ``nox -s build`` alone is a one-off: it is in that build's key and manifest,
and a later gpu_tests names it when it refuses the build. Every flag is checked before anything is touched.
"""

from __future__ import annotations

import os
import shlex
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from ci.compile import profiles
from ci.compile.profiles import PROFILES, Profile
from ci.errors import ConfigError
from ci.pin.pins import Pins, cmake_flag_name
from ci.schema import did_you_mean
from serve.bounded import CONFIG_LIMIT, read_text

COMMON_FLAGS = ("-DLLAMA_BUILD_TESTS=ON", "-DLLAMA_BUILD_SERVER=ON")
LOCAL_VAR = "ONEBIT_CMAKE_ARGS"
LOCAL_FILE = "cmake-args.local"

# Messages, shared with the tests that match on them (tests/support/messages.py)
BAD_FLAG = "{where}: {problem}"
UNSPLITTABLE = '{where}: {problem} (quote a value with spaces as -DNAME="a b")'
# where to fix a flag, by the source whose value won (Flags.where)
FROM_ONE_OFF = "the -D given to build"
FROM_MACHINE = "{variable} or {file}"
FROM_PIN_PROFILE = "pins.yaml build.profiles"
FROM_PIN = "pins.yaml build.flags"
FROM_PROFILE = "the profile (ci/compile/profiles.py)"


@dataclass(frozen=True)
class Flags:
    """The -D flags of one build, by source, in the order they override each other."""

    common: tuple[str, ...] = COMMON_FLAGS
    profile: tuple[str, ...] = ()
    pin: tuple[str, ...] = ()
    pin_profile: tuple[str, ...] = ()
    local: tuple[str, ...] = ()
    one_off: tuple[str, ...] = ()

    @property
    def merged(self) -> tuple[str, ...]:
        return merge_flags(self.common, self.profile, self.pin, self.pin_profile, self.local, self.one_off)

    def where(self, flag: str) -> str:
        """Where to fix ``flag`` (the source whose value won)."""
        name = cmake_flag_name(flag)
        for group, place in (
            (self.one_off, FROM_ONE_OFF),
            (self.local, FROM_MACHINE.format(variable=LOCAL_VAR, file=LOCAL_FILE)),
            (self.pin_profile, FROM_PIN_PROFILE),
            (self.pin, FROM_PIN),
        ):
            if any(cmake_flag_name(f) == name for f in group):
                return place
        return FROM_PROFILE


def merge_flags(*groups: tuple[str, ...]) -> tuple[str, ...]:
    """``-DNAME=VALUE`` flags in order, a later group's value for a NAME replacing an earlier one in place."""
    order: list[str] = []
    values: dict[str, str] = {}
    for group in groups:
        for flag in group:
            name = cmake_flag_name(flag)
            if name not in values:
                order.append(name)
            values[name] = flag
    return tuple(values[n] for n in order)


def local_flags(root: Path, env: Mapping[str, str] | None = None) -> tuple[str, ...]:
    """The machine's own flags: ``cmake-args.local``, then ``ONEBIT_CMAKE_ARGS`` over it; each one checked."""
    env = os.environ if env is None else env
    out: list[str] = []
    path = root / LOCAL_FILE
    if os.path.lexists(path):  # a FIFO, a directory or a dangling link is named, not skipped
        try:
            text = read_text(path, CONFIG_LIMIT)
        except (OSError, UnicodeDecodeError) as exc:
            raise ConfigError(f"{LOCAL_FILE}: cannot be read ({exc})") from None
        for n, line in enumerate(text.splitlines(), 1):
            out += _checked(_split(line.split("#", 1)[0], f"{LOCAL_FILE}:{n}"), f"{LOCAL_FILE}:{n}")
    if env.get(LOCAL_VAR, "").strip():
        out += _checked(_split(env[LOCAL_VAR], LOCAL_VAR), LOCAL_VAR)
    return tuple(out)


def one_off_flags(defines: tuple[str, ...]) -> tuple[str, ...]:
    """``-D NAME=VALUE`` of the command line (given without the -D), checked."""
    return _checked(tuple(d if d.startswith("-D") else f"-D{d}" for d in defines), "-D")


def _split(text: str, where: str) -> tuple[str, ...]:
    try:
        return tuple(shlex.split(text))
    except ValueError as exc:
        raise ConfigError(UNSPLITTABLE.format(where=where, problem=exc)) from None


def _checked(flags: tuple[str, ...], where: str) -> tuple[str, ...]:
    for flag in flags:
        try:
            cmake_flag_name(flag)
        except ConfigError as exc:
            raise ConfigError(BAD_FLAG.format(where=where, problem=exc.message)) from None
    return flags


def profile_of(name: str, pins: Pins, given: str | None = None) -> Profile:
    """The profile ``name`` (named as ``given`` when unknown: profiles.get); also checks pins.yaml's per-profile flags
    name known profiles."""
    for key, _ in pins.build.profile_flags:
        if key not in PROFILES:
            raise ConfigError(f"pins.yaml: build.profiles.{key}: unknown profile{did_you_mean(key, PROFILES)}; known: {', '.join(PROFILES)}")
    return profiles.get(name, given)


def flags_for(profile: Profile, pins: Pins, local: tuple[str, ...], one_off: tuple[str, ...] = ()) -> Flags:
    return Flags(COMMON_FLAGS, profile.flags, pins.build.flags, pins.build.flags_for(profile.name), local, one_off)
