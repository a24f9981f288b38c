"""``nox -s build``: pin → checkout → patches → configure → compile, under a build key.

The key covers what decides the binaries: the pinned commit, the patch series, the profile's flags, the
toolchain (compiler paths and versions) and the build type, plus the targets. A build whose key matches its
manifest, with every recorded binary present at its recorded sha256, is a no-op; otherwise CMake is configured
again only when the configure part of the key changed. The manifest is written, atomically, only after a
successful build, and removed before one starts, so a failed or interrupted build never leaves a manifest
claiming success.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import platform
import re
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ci import profiles as profiles_mod
from ci.command import run
from ci.errors import CommandFailed, ConfigError, OnebitError, Refused
from ci.files import write_atomic
from ci.patches import Series
from ci.pins import Pins
from ci.profiles import COMMON_FLAGS, Profile, flag_name, merge_flags
from ci.project import Project
from ci.toolchain import Toolchain

log = logging.getLogger("onebit-ci")

MANIFEST = "build.json"
CONFIGURED = ".onebit-configured"
LOG = "build.log"
SCHEMA = 1
BUILD_TYPES = ("Release", "RelWithDebInfo", "Debug", "MinSizeRel")
UNUSED_RE = re.compile(r"Manually-specified variables were not used by the project:\s*\n((?:\s*\n)*(?:[ \t]+\S+\s*\n)+)")
PROGRESS_RE = re.compile(r"^\[(\d+)/(\d+)\] ")


@dataclass(frozen=True)
class BuildRequest:
    profile: str = profiles_mod.DEFAULT_PROFILE
    build_type: str = "Release"
    defines: tuple[str, ...] = ()  # -DNAME=VALUE overriding the profile's and the pin's flags
    targets: tuple[str, ...] = ()  # default: pins.yaml build.targets
    remote: str | None = None
    build_root: Path | None = None
    jobs: int | None = None


@dataclass(frozen=True)
class BuildKey:
    configure: str
    full: str
    parts: tuple[tuple[str, str], ...]

    @property
    def short(self) -> str:
        return self.full[:12]


@dataclass(frozen=True)
class BuildPlan:
    """Everything a build will run, computed without running it."""

    profile: Profile
    source: Path
    build_dir: Path
    flags: tuple[str, ...]  # every -D flag we pass: CMake must use each one
    configure_argv: tuple[str, ...]
    build_argv: tuple[str, ...]
    env: tuple[tuple[str, str], ...]
    targets: tuple[str, ...]
    key: BuildKey
    pin: str
    series_digest: str
    series_names: tuple[str, ...]
    toolchain: Toolchain

    @property
    def manifest_path(self) -> Path:
        return self.build_dir / MANIFEST


@dataclass(frozen=True)
class Decision:
    up_to_date: bool
    reconfigure: bool
    reasons: tuple[str, ...]
    stale: tuple[Path, ...] = ()  # artifacts that differ from the manifest: removed so ninja makes them again


@dataclass(frozen=True)
class Artifact:
    path: str  # relative to the manifest's directory
    sha256: str


@dataclass(frozen=True)
class Manifest:
    key: str
    configure_key: str
    profile: str
    device: str
    pin: dict[str, str]
    patches: dict[str, Any]
    flags: tuple[str, ...]
    toolchain: dict[str, str]
    build_type: str
    targets: tuple[str, ...]
    binaries: dict[str, Artifact]
    libraries: dict[str, Artifact] = field(default_factory=dict)
    key_parts: dict[str, str] = field(default_factory=dict)
    seconds: float = 0.0
    built_at: str = ""
    host: str = ""
    ccache: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "schema": SCHEMA,
            "key": self.key,
            "configure_key": self.configure_key,
            "profile": self.profile,
            "device": self.device,
            "pin": self.pin,
            "patches": self.patches,
            "flags": list(self.flags),
            "toolchain": self.toolchain,
            "build_type": self.build_type,
            "targets": list(self.targets),
            "binaries": {k: {"path": a.path, "sha256": a.sha256} for k, a in self.binaries.items()},
            "libraries": {k: {"path": a.path, "sha256": a.sha256} for k, a in self.libraries.items()},
            "key_parts": self.key_parts,
            "seconds": round(self.seconds, 1),
            "built_at": self.built_at,
            "host": self.host,
            "ccache": self.ccache,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Manifest:
        def artifacts(d: Mapping[str, Any]) -> dict[str, Artifact]:
            return {k: Artifact(v["path"], v["sha256"]) for k, v in d.items()}

        return cls(
            key=data["key"],
            configure_key=data["configure_key"],
            profile=data["profile"],
            device=data["device"],
            pin=dict(data["pin"]),
            patches=dict(data["patches"]),
            flags=tuple(data["flags"]),
            toolchain=dict(data["toolchain"]),
            build_type=data["build_type"],
            targets=tuple(data["targets"]),
            binaries=artifacts(data["binaries"]),
            libraries=artifacts(data.get("libraries", {})),
            key_parts=dict(data.get("key_parts", {})),
            seconds=float(data.get("seconds", 0.0)),
            built_at=data.get("built_at", ""),
            host=data.get("host", ""),
            ccache=data.get("ccache"),
        )

    def binary(self, manifest_dir: Path, name: str) -> Path:
        try:
            return manifest_dir / self.binaries[name].path
        except KeyError:
            raise Refused(f"the {self.profile} build has no {name}; add it to pins.yaml build.targets and build again") from None


def read_manifest(path: Path) -> Manifest | None:
    """The manifest at ``path``, None when there is none; a damaged one is reported, never trusted."""
    if not path.is_file():
        return None
    try:
        data = json.loads(path.read_text())
        if data.get("schema") != SCHEMA:
            raise ValueError(f"schema {data.get('schema')}, expected {SCHEMA}")
        return Manifest.from_json(data)
    except (ValueError, KeyError, TypeError) as exc:
        raise ConfigError(f"{path}: not a build manifest ({exc}); remove it and build again") from None


# -- the plan -------------------------------------------------------------------------------------------------


def profile_flags(profile: Profile, pins: Pins, defines: tuple[str, ...]) -> tuple[str, ...]:
    """The -D flags of a build, in the order they override each other: common, profile, pin, pin+profile, user."""
    for d in defines:
        flag_name(d)
    return merge_flags(COMMON_FLAGS, profile.flags, pins.build.flags, pins.build.flags_for(profile.name), defines)


def configure_argv(
    profile: Profile, flags: tuple[str, ...], toolchain: Toolchain, source: Path, build_dir: Path, build_type: str
) -> tuple[str, ...]:
    cmake = toolchain.tool("cmake").path
    return (cmake, "-S", str(source), "-B", str(build_dir), "-G", "Ninja", f"-DCMAKE_BUILD_TYPE={build_type}", *toolchain.cmake_flags, *flags)


def build_argv(toolchain: Toolchain, build_dir: Path, targets: tuple[str, ...], jobs: int | None) -> tuple[str, ...]:
    argv = [toolchain.tool("cmake").path, "--build", str(build_dir), "--target", *targets]
    if jobs:
        argv += ["-j", str(jobs)]
    return tuple(argv)


def build_key(
    profile: Profile,
    flags: tuple[str, ...],
    toolchain: Toolchain,
    build_type: str,
    pin: str,
    series_digest: str,
    targets: tuple[str, ...],
    ggml_dirty: bool = False,
) -> BuildKey:
    """The pin and whether the series changes ggml/ are in the configure part: ggml's CMakeLists bakes
    ``git rev-parse --short HEAD`` and ``-dirty`` (``git diff-index HEAD -- ggml``) into the binaries when it is
    configured, and test-backend-ops reports that string as build_commit."""
    configure_parts = {"profile": profile.name, "flags": " ".join(flags), "build_type": build_type, "generator": "Ninja"}
    configure_parts |= {f"toolchain.{k}": v for k, v in sorted(toolchain.identity().items())}
    configure_parts |= {"pin": pin, "ggml_dirty": "yes" if ggml_dirty else "no"}
    configure = _digest(configure_parts)
    parts = {**configure_parts, "patches": series_digest, "targets": " ".join(targets)}
    return BuildKey(configure=configure, full=_digest({"configure": configure, **parts}), parts=tuple(parts.items()))


def _digest(parts: Mapping[str, str]) -> str:
    return hashlib.sha256(json.dumps(dict(parts), sort_keys=True).encode()).hexdigest()


def plan(project: Project, pins: Pins, series: Series, toolchain: Toolchain, request: BuildRequest) -> BuildPlan:
    profile = profiles_mod.get(request.profile)
    if request.build_type not in BUILD_TYPES:
        raise ConfigError(f"--build-type {request.build_type}: not one of {', '.join(BUILD_TYPES)}")
    flags = profile_flags(profile, pins, request.defines)
    targets = request.targets or pins.build.targets
    build_dir = (request.build_root or project.root / "build") / profile.name
    source = project.root / pins.submodule
    key = build_key(profile, flags, toolchain, request.build_type, pins.fork.commit, series.digest, targets, series.touches("ggml/"))
    return BuildPlan(
        profile=profile,
        source=source,
        build_dir=build_dir,
        flags=(f"-DCMAKE_BUILD_TYPE={request.build_type}", *toolchain.cmake_flags, *flags),
        configure_argv=configure_argv(profile, flags, toolchain, source, build_dir, request.build_type),
        build_argv=build_argv(toolchain, build_dir, targets, request.jobs),
        env=toolchain.env,
        targets=targets,
        key=key,
        pin=pins.fork.commit,
        series_digest=series.digest,
        series_names=series.names,
        toolchain=toolchain,
    )


def decide(plan: BuildPlan, old: Manifest | None) -> Decision:
    """Up to date, or what changed; and whether CMake must be configured again."""
    stamp = plan.build_dir / CONFIGURED
    configured = stamp.read_text().strip() if stamp.is_file() and (plan.build_dir / "CMakeCache.txt").is_file() else ""
    reconfigure = configured != plan.key.configure
    if old is None:
        return Decision(False, reconfigure, ("no manifest: never built, or the last build did not finish",))
    if old.key != plan.key.full:
        changed = [k for k, v in plan.key.parts if old.key_parts.get(k) != v]
        return Decision(False, reconfigure, tuple(f"{k} changed" for k in changed) or ("the key changed",))
    problems, stale = [], []
    for name, art in {**old.binaries, **old.libraries}.items():
        path = plan.build_dir / art.path
        if not path.is_file():
            problems.append(f"{name} is missing")
        elif sha256_file(path) != art.sha256:
            problems.append(f"{name} differs from its recorded sha256")
            stale.append(path)  # ninja goes by mtime: a replaced file newer than its inputs would be kept
    if problems:
        return Decision(False, reconfigure, tuple(problems), tuple(stale))
    return Decision(True, False, ())


# -- running it -----------------------------------------------------------------------------------------------


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


class Progress:
    """ninja's ``[n/N]`` as a line per tenth, so a log stays readable and a person sees it move."""

    def __init__(self, say: Callable[[str], None]) -> None:
        self.say = say
        self.shown = -1

    def __call__(self, line: str) -> None:
        m = PROGRESS_RE.match(line)
        if not m:
            return
        n, total = int(m.group(1)), int(m.group(2))
        tenth = (10 * n) // total
        if tenth > self.shown:
            self.shown = tenth
            self.say(f"build: [{n}/{total}] {100 * n // total}%")


def ignored_flags(output: str, flags: tuple[str, ...]) -> list[str]:
    """Our flags that CMake did not use, or that the project calls deprecated (llama.cpp #8155, #15245: a
    deprecated or renamed flag configured fine and built for the CPU alone)."""
    m = UNUSED_RE.search(output)
    unused = {ln.strip() for ln in m.group(1).splitlines() if ln.strip()} if m else set()
    out = []
    for f in flags:
        name = flag_name(f)
        if name in unused:
            out.append(f"{f} (not used by the project)")
        elif re.search(rf"\b{re.escape(name)} is deprecated", output):
            out.append(f"{f} (deprecated: {_deprecation(output, name)})")
    return out


def _deprecation(output: str, name: str) -> str:
    m = re.search(rf"\b{re.escape(name)} is deprecated[^\n]*(?:\n\s*\n\s*(Use \S+ instead))?", output)
    if not m:
        return "the project says so"
    return " ".join(x.strip() for x in (m.group(0).split("\n")[0], m.group(1) or "") if x)


def execute(plan: BuildPlan, decision: Decision, say: Callable[[str], None]) -> Manifest:
    plan.build_dir.mkdir(parents=True, exist_ok=True)
    plan.manifest_path.unlink(missing_ok=True)
    for path in decision.stale:
        path.unlink(missing_ok=True)
    env = {**os.environ, **dict(plan.env)}
    started = time.monotonic()
    with (plan.build_dir / LOG).open("w") as log_file:
        if decision.reconfigure:
            (plan.build_dir / CONFIGURED).unlink(missing_ok=True)
            t = time.monotonic()
            done = _step(plan.configure_argv, env, log_file, "configure", None)
            ignored = ignored_flags(done, plan.flags)
            if ignored:
                raise ConfigError(
                    f"configure: {'; '.join(ignored)}: a flag this pin does not have silently changes the build "
                    "(llama.cpp #8155, #15245); fix pins.yaml build.flags or -D"
                )
            write_atomic(plan.build_dir / CONFIGURED, plan.key.configure + "\n")
            say(f"configure: done in {time.monotonic() - t:.1f} s")
        else:
            say("configure: reused (the configure part of the key is unchanged)")
        t = time.monotonic()
        _step(plan.build_argv, env, log_file, "build", Progress(say))
        say(f"build: done in {time.monotonic() - t:.1f} s")
    binaries = {name: _artifact(plan.build_dir, _find_binary(plan.build_dir, name)) for name in plan.targets}
    libraries = {p.name: _artifact(plan.build_dir, p) for p in sorted((plan.build_dir / "bin").glob("lib*.so*")) if p.is_file() and not p.is_symlink()}
    manifest = Manifest(
        key=plan.key.full,
        configure_key=plan.key.configure,
        profile=plan.profile.name,
        device=plan.profile.device,
        pin={"commit": plan.pin},
        patches={"digest": plan.series_digest, "names": list(plan.series_names)},
        flags=plan.flags,
        toolchain=plan.toolchain.identity(),
        build_type=_build_type(plan),
        targets=plan.targets,
        binaries=binaries,
        libraries=libraries,
        key_parts=dict(plan.key.parts),
        seconds=time.monotonic() - started,
        built_at=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        host=platform.node(),
        ccache=plan.toolchain.ccache,
    )
    write_atomic(plan.manifest_path, json.dumps(manifest.to_json(), indent=2) + "\n")
    return manifest


def _build_type(plan: BuildPlan) -> str:
    return next(f.split("=", 1)[1] for f in plan.flags if f.startswith("-DCMAKE_BUILD_TYPE="))


def _step(argv: tuple[str, ...], env: dict[str, str], log_file: Any, what: str, on_line: Callable[[str], None] | None) -> str:
    log_file.write(f"$ {' '.join(argv)}\n")
    log_file.flush()
    try:
        return run(argv, env=env, log_file=log_file, on_line=on_line, what=what).output
    except CommandFailed as exc:
        raise CommandFailed(exc.argv, exc.returncode, exc.tail, what=f"{what} ({' '.join(os.path.basename(a) for a in argv[:2])})") from None


def _find_binary(build_dir: Path, name: str) -> Path:
    direct = build_dir / "bin" / name
    if direct.is_file():
        return direct
    found = [p for p in build_dir.rglob(name) if p.is_file() and os.access(p, os.X_OK)]
    if len(found) != 1:
        raise OnebitError(f"build: target {name} built, but {'no' if not found else 'more than one'} {name} binary found under {build_dir}")
    return found[0]


def _artifact(root: Path, path: Path) -> Artifact:
    return Artifact(os.path.relpath(path, root), sha256_file(path))


# -- the whole stage ------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class BuildOutcome:
    manifest: Manifest
    up_to_date: bool
    plan: BuildPlan
    reasons: tuple[str, ...]


def run_build(project: Project, request: BuildRequest, say: Callable[[str], None]) -> BuildOutcome:
    """verify_pin → checkout at the pin → patches → toolchain → (configure) → compile → manifest."""
    from ci import patches, toolchain
    from ci.checkout import Checkout
    from ci.verify import verify

    profile = profiles_mod.get(request.profile)
    with _timed(say, "verify pin"):
        verdict = verify(project, checkout_head=False)
        if not verdict.ok:
            raise Refused("the pin does not verify: " + "; ".join(verdict.problems) + "; run nox -s verify_pin")
        pins = project.load_pins()
    with _timed(say, "toolchain"):
        tools = toolchain.detect(profile, pins.build)
        say(f"toolchain: {tools.describe()}; ccache: {tools.ccache or 'not found'}")
    with _timed(say, "checkout and patches"):
        checkout = Checkout.find(project.root / pins.submodule, pins.omit)
        if checkout is not None and checkout.head() != pins.fork.commit:
            if patches.changed_paths(checkout.repo, pins.omit):
                raise Refused(
                    f"{pins.submodule}: checked out at {checkout.head()[:12]} with local changes, not at the pin {pins.fork.short}; "
                    "commit or stash them, then build again"
                )
            say(f"checkout: moving {pins.submodule} from {checkout.head()[:7]} to the pin {pins.fork.short}")
            checkout.move_to(pins.fork.commit)
        say(patches.apply_series(project, request.remote))
        series = patches.load_series(project.root / patches.PATCHES_DIR)
    the_plan = plan(project, pins, series, tools, request)
    old = read_manifest(the_plan.manifest_path)
    decision = decide(the_plan, old)
    if decision.up_to_date:
        assert old is not None
        say(
            f"build: up to date: key {the_plan.key.short} (pin {pins.fork.short}, patches {series.digest[:12]}, "
            f"profile {profile.name}, {tools.describe()}) matches {_rel(the_plan.manifest_path, project.root)}, "
            f"and its {len(old.binaries)} binaries and {len(old.libraries)} libraries match their sha256"
        )
        return BuildOutcome(old, True, the_plan, ())
    say(f"build: building {profile.name} (key {the_plan.key.short}): {'; '.join(decision.reasons)}")
    with _timed(say, "configure and compile"):
        manifest = execute(the_plan, decision, say)
    say(f"build: wrote {_rel(the_plan.manifest_path, project.root)}; log: {_rel(the_plan.build_dir / LOG, project.root)}")
    return BuildOutcome(manifest, False, the_plan, decision.reasons)


class _timed:
    """A step line with its duration, printed when the step ends (or fails)."""

    def __init__(self, say: Callable[[str], None], name: str) -> None:
        self.say, self.name = say, name

    def __enter__(self) -> None:
        self.t = time.monotonic()

    def __exit__(self, kind: object, exc: object, tb: object) -> None:
        state = "done" if kind is None else "FAILED"
        self.say(f"step: {self.name}: {state} in {time.monotonic() - self.t:.2f} s")


def _rel(path: Path, root: Path) -> str:
    try:
        return str(path.relative_to(root))
    except ValueError:
        return str(path)


def current_build(project: Project, request: BuildRequest) -> tuple[Manifest, str]:
    """The manifest of the profile's build when it is exactly the current one, and its key; refused otherwise.

    The key is computed from what is here now (pins.yaml, the series, the toolchain), so a pin bump or a patch
    edited since the build makes it stale; a binary replaced since the build makes it stale too.
    """
    from ci import patches, toolchain

    pins = project.load_pins()
    profile = profiles_mod.get(request.profile)
    series = patches.load_series(project.root / patches.PATCHES_DIR)
    the_plan = plan(project, pins, series, toolchain.detect(profile, pins.build), request)
    old = read_manifest(the_plan.manifest_path)
    hint = f"run nox -s build -- --profile {profile.name}"
    if old is None:
        raise Refused(f"no build of profile {profile.name} ({_rel(the_plan.manifest_path, project.root)} is missing): {hint}")
    decision = decide(the_plan, old)
    if not decision.up_to_date:
        raise Refused(f"the {profile.name} build is stale (key {old.key[:12]}, current {the_plan.key.short}: {'; '.join(decision.reasons)}): {hint}")
    return old, the_plan.key.full
