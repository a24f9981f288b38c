"""``nox -s build``'s CMake part: the plan (pure: flags, argv, key) apart from running it.

A build whose key matches its manifest, with every recorded binary and library as recorded, is a no-op;
otherwise CMake is configured again only when the configure part of the key changed, from an empty cache. The
manifest is written, atomically, only after a successful build, and removed before the compile starts, so a failed or
interrupted compile never leaves a manifest claiming success; a refused or failed configure compiles nothing and
keeps the last good one.
"""

from __future__ import annotations

import json
import logging
import os
import platform
import re
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from ci.command import environment, run
from ci.compile import ninja as ninja_mod
from ci.compile import profiles as profiles_mod
from ci.compile import undeclared
from ci.compile.flags import Flags
from ci.compile.manifest import IS_MISSING, MANIFEST, SCHEMA, Artifact, BuildKey, Manifest, build_key, link_closure
from ci.compile.profiles import Profile
from ci.compile.toolchain import Toolchain
from ci.errors import CommandFailed, ConfigError, OnebitError
from ci.files import write_atomic
from ci.pin.pins import cmake_flag_name as flag_name
from ci.schema import load_json

log = logging.getLogger("onebit-ci")

CONFIGURED = ".onebit-configured"
CACHE = "CMakeCache.txt"
# How long the build directory's whole compile took: written by a build that began with nothing compiled in it and
# kept by every later one, whose own seconds are build.json's (a 3.5 s rebuild's had stood for the compile's)
WHOLE_COMPILE = ".onebit-whole-compile.json"
NINJA_LOG = ".ninja_log"
LOG = "build.log"
BUILD_TYPES = ("Release", "RelWithDebInfo", "Debug", "MinSizeRel")
# passed to the build besides: where ccache keeps its cache and how big it may grow, and its own switch to compile without it
BUILD_VARIABLES = ("CCACHE_DIR", "CCACHE_DISABLE", "CCACHE_MAXSIZE", "CCACHE_BASEDIR")
# the languages whose compiles go through the launcher (CMAKE_<LANG>_COMPILER_LAUNCHER), by backend
LAUNCHED = {"hip": ("C", "CXX", "HIP"), "cuda": ("C", "CXX", "CUDA")}
# what says a build directory's compiles go through ccache: the launcher this tool gives, or the fork's own
# GGML_CCACHE (ggml/src/CMakeLists.txt finds ccache at configure time and sets RULE_LAUNCH_COMPILE)
LAUNCHER_IN_CACHE = re.compile(r"^(?:CMAKE_(?:C|CXX)_COMPILER_LAUNCHER|GGML_CCACHE_FOUND):[A-Z]+=(?!.*NOTFOUND)\S", re.MULTILINE)
UNUSED_RE = re.compile(r"Manually-specified variables were not used by the project:\s*\n((?:\s*\n)*(?:[ \t]+\S[^\n]*\n)+)")
PROGRESS_RE = re.compile(r"^\[(\d+)/(\d+)\] ")

# Messages, shared with the tests that match on them (tests/support/messages.py)
NEVER_BUILT = "no manifest: never built, or the last build did not finish"
STRAY_FOUND = "{name} is beside the binaries, and none of them loads it"
OLD_SCHEMA = "build.json (schema {schema}) does not say which libraries each binary loads"
KEY_PART_CHANGED = "{part} changed"
KEY_CHANGED = "the key changed"
ARTIFACT_WRONG = "{name} {problem}"
PROGRESS = "build: [{done}/{total}] {percent}%"
NOT_USED = "{flag} (not used by the project)"
DEPRECATED = "{flag} (deprecated: {why})"
IGNORED_FLAGS = "configure: {flags}: a flag this pin does not have silently changes the build (llama.cpp #8155, #15245); fix {where}"
UNDECLARED_FLAGS = "configure: {flags}: CMake does not warn about an undeclared GGML_ flag (ggml reads every variable); fix {where}"
CONFIGURE_DONE = "configure: done in {seconds:.1f} s"
CONFIGURE_REUSED = "configure: reused (the configure part of the key is unchanged)"
LOGGED_COMMAND = "$ {command}\n"
STEP_FAILED = "{step} ({program})"


@dataclass(frozen=True)
class BuildRequest:
    profile: str = profiles_mod.DEFAULT_PROFILE
    build_type: str = "Release"
    defines: tuple[str, ...] = ()  # -DNAME=VALUE for this build alone, over the profile's, the pin's and the machine's
    targets: tuple[str, ...] = ()  # default: pins.yaml build.targets
    remote: str | None = None
    build_root: Path | None = None
    jobs: int | None = None


@dataclass(frozen=True)
class BuildPlan:
    """Everything a build will run, computed without running it."""

    profile: Profile
    source: Path
    build_dir: Path
    flags: Flags
    cmake_flags: tuple[str, ...]  # every -D flag we pass: CMake must use each one
    configure_argv: tuple[str, ...]
    build_argv: tuple[str, ...]
    env: tuple[tuple[str, str], ...]
    targets: tuple[str, ...]
    key: BuildKey
    pin: str
    series_digest: str
    series_names: tuple[str, ...]
    toolchain: Toolchain
    build_type: str

    @property
    def manifest_path(self) -> Path:
        return self.build_dir / MANIFEST

    @property
    def ninja(self) -> str:
        return self.toolchain.tool("ninja").path


@dataclass(frozen=True)
class WholeCompile:
    """The build that compiled the build directory from nothing: configure and every step, in one build."""

    seconds: float
    steps: int  # ninja's steps
    built_at: str  # as its build.json says it, so a record can tell that build from a later one

    def write(self, build_dir: Path) -> None:
        body = {"seconds": round(self.seconds, 1), "steps": self.steps, "built_at": self.built_at}
        write_atomic(build_dir / WHOLE_COMPILE, json.dumps(body) + "\n")


def whole_compile(build_dir: Path) -> WholeCompile | None:
    """The build directory's whole compile, None when none was timed (a directory built before it was kept, or whose
    first compile failed or was stopped and went on in a later build) or its record is damaged."""
    try:
        data = load_json(build_dir / WHOLE_COMPILE)
        return WholeCompile(float(data["seconds"]), int(data["steps"]), str(data["built_at"]))
    except (OSError, ValueError, KeyError, TypeError):
        return None


def nothing_compiled(build_dir: Path) -> bool:
    """No object was ever made in ``build_dir``: ninja's log (one line an output) names none."""
    try:
        text = (build_dir / NINJA_LOG).read_text(encoding="utf-8", errors="replace")
    except FileNotFoundError:
        return True
    return not any(line.split("\t")[3].endswith((".o", ".obj")) for line in text.splitlines() if line.count("\t") >= 4)


@dataclass(frozen=True)
class Decision:
    up_to_date: bool
    reconfigure: bool
    reasons: tuple[str, ...]
    stale: tuple[Path, ...] = ()  # artifacts that differ from the manifest: removed so ninja makes them again


def launcher_flags(ccache: str | None, backend: str) -> tuple[str, ...]:
    """ccache as the compiler launcher of every language the backend compiles, where it is installed. Not in the key
    nor in the flags CMake must use: it changes how long a compile takes, never what it makes."""
    if not ccache:
        return ()
    return tuple(f"-DCMAKE_{lang}_COMPILER_LAUNCHER={ccache}" for lang in LAUNCHED.get(backend, ("C", "CXX")))


def configure_argv(
    flags: tuple[str, ...], toolchain: Toolchain, source: Path, build_dir: Path, build_type: str, launchers: tuple[str, ...] = ()
) -> tuple[str, ...]:
    cmake = toolchain.tool("cmake").path
    return (cmake, "-S", str(source), "-B", str(build_dir), "-G", "Ninja", f"-DCMAKE_BUILD_TYPE={build_type}", *toolchain.cmake_flags, *launchers, *flags)


def build_argv(toolchain: Toolchain, build_dir: Path, targets: tuple[str, ...], jobs: int | None) -> tuple[str, ...]:
    argv = [toolchain.tool("cmake").path, "--build", str(build_dir), "--target", *targets]
    if jobs:
        argv += ["-j", str(jobs)]
    return tuple(argv)


def plan(
    *,
    profile: Profile,
    flags: Flags,
    toolchain: Toolchain,
    source: Path,
    build_dir: Path,
    pin: str,
    series_digest: str,
    series_names: tuple[str, ...],
    ggml_dirty: bool,
    targets: tuple[str, ...],
    build_type: str = "Release",
    jobs: int | None = None,
) -> BuildPlan:
    if build_type not in BUILD_TYPES:
        raise ConfigError(f"--build-type {build_type}: not one of {', '.join(BUILD_TYPES)}")
    merged = flags.merged
    key = build_key(profile.name, merged, toolchain.identity(), build_type, pin, series_digest, targets, ggml_dirty)
    return BuildPlan(
        profile=profile,
        source=source,
        build_dir=build_dir,
        flags=flags,
        cmake_flags=(f"-DCMAKE_BUILD_TYPE={build_type}", *toolchain.cmake_flags, *merged),
        configure_argv=configure_argv(merged, toolchain, source, build_dir, build_type, launcher_flags(toolchain.ccache, profile.backend)),
        build_argv=build_argv(toolchain, build_dir, targets, jobs),
        env=toolchain.env,
        targets=targets,
        key=key,
        pin=pin,
        series_digest=series_digest,
        series_names=series_names,
        toolchain=toolchain,
        build_type=build_type,
    )


def decide(plan: BuildPlan, old: Manifest | None) -> Decision:
    """Up to date, or what changed; and whether CMake must be configured again."""
    stamp = plan.build_dir / CONFIGURED
    configured = stamp.read_text().strip() if stamp.is_file() and (plan.build_dir / CACHE).is_file() else ""
    reconfigure = configured != plan.key.configure
    if old is None:
        return Decision(False, reconfigure, (NEVER_BUILT,))
    if old.key != plan.key.full:
        changed = [k for k, v in plan.key.parts if old.key_parts.get(k) != v]
        return Decision(False, reconfigure, tuple(KEY_PART_CHANGED.format(part=k) for k in changed) or (KEY_CHANGED,))
    wrong = old.problems(plan.build_dir)
    if wrong:
        # ninja goes by mtime: a replaced file newer than its inputs would be kept, so a differing one is removed
        stale = tuple(plan.build_dir / {**old.binaries, **old.libraries}[name].path for name, why in wrong if why != IS_MISSING)
        return Decision(False, reconfigure, tuple(ARTIFACT_WRONG.format(name=name, problem=why) for name, why in wrong), stale)
    strays = old.strays(plan.build_dir)
    if strays:  # ggml would open them in every gate: removed before the build, refused by every later stage
        return Decision(False, reconfigure, tuple(STRAY_FOUND.format(name=p.name) for p in strays), tuple(strays))
    if old.schema < SCHEMA:
        return Decision(False, reconfigure, (OLD_SCHEMA.format(schema=old.schema),))
    return Decision(True, False, ())


# -- running it -----------------------------------------------------------------------------------------------



class Progress:
    """ninja's ``[n/N]`` as a line per tenth, so a log stays readable and a person sees it move."""

    def __init__(self, say: Callable[[str], None]) -> None:
        self.say = say
        self.shown = -1
        self.total = 0  # the steps ninja ran

    def __call__(self, line: str) -> None:
        m = PROGRESS_RE.match(line)
        if not m:
            return
        n, total = int(m.group(1)), int(m.group(2))
        self.total = total
        tenth = (10 * n) // total
        if tenth > self.shown:
            self.shown = tenth
            self.say(PROGRESS.format(done=n, total=total, percent=100 * n // total))


def ignored_flags(output: str, flags: tuple[str, ...]) -> list[str]:
    """Our flags that CMake did not use, or that the project calls deprecated (llama.cpp #8155, #15245: a
    deprecated or renamed flag configured fine and built for the CPU alone)."""
    m = UNUSED_RE.search(output)
    unused = {ln.strip() for ln in m.group(1).splitlines() if ln.strip()} if m else set()
    out = []
    for f in flags:
        name = flag_name(f)
        if name in unused:
            out.append(NOT_USED.format(flag=f))
        elif re.search(rf"\b{re.escape(name)} is deprecated", output):
            out.append(DEPRECATED.format(flag=f, why=_deprecation(output, name)))
    return out


def _deprecation(output: str, name: str) -> str:
    m = re.search(rf"\b{re.escape(name)} is deprecated[^\n]*(?:\n\s*\n\s*(Use \S+ instead))?", output)
    if not m:
        return "the project says so"
    return " ".join(x.strip() for x in (m.group(0).split("\n")[0], m.group(1) or "") if x)


def build_environment(plan: BuildPlan, source: Mapping[str, str] | None = None) -> dict[str, str]:
    """What CMake, ninja and the compilers get (the fork's CMakeLists runs in it): the one environment of every program
    (:func:`ci.command.environment`: an allow-list, never the ledger's key), the profile's variables and ccache's
    folder among it, the toolchain's own (ROCM_PATH, HIP_PATH, ...) over it. CFLAGS, CXXFLAGS and the like are not
    passed: the build key does not hold them (a flag goes through ONEBIT_CMAKE_ARGS or --define, docs/build.md)."""
    # ccache's base_dir, where nothing else set it: the sources and the build as paths relative to the folder holding
    # both, so a clone at another place (a runner's new workspace) is the same compile (a real fork's clone hit 1 of 277)
    base = {"CCACHE_BASEDIR": os.path.commonpath([plan.source, plan.build_dir])}
    env = environment(source, declared=(*plan.profile.variables, *BUILD_VARIABLES), given=plan.env)
    return {**base, **env}


def execute(plan: BuildPlan, decision: Decision, say: Callable[[str], None], shown: Callable[[Path], str] = str) -> Manifest:
    """Configure when the decision says so, then ninja, with the checkout's times put back first (:mod:`ci.compile.ninja`:
    a checkout written again with the same content rebuilds nothing) and the view ninja saw kept after it."""
    plan.build_dir.mkdir(parents=True, exist_ok=True)
    env = build_environment(plan)
    started = time.monotonic()
    whole = nothing_compiled(plan.build_dir)
    progress = Progress(say)
    log_path = plan.build_dir / LOG
    for line in ninja_mod.reconcile(plan.build_dir, plan.source).lines(shown):
        say(line)
    stats_log = plan.build_dir / ninja_mod.CCACHE_LOG
    stats_log.unlink(missing_ok=True)
    try:
        _configure_and_compile(plan, decision, env, log_path, stats_log, progress, say)
    except OnebitError:  # a failed compile or a refused configure: the view is what the next run will find
        ninja_mod.seen(plan.build_dir, plan.source)
        raise
    ninja_mod.seen(plan.build_dir, plan.source)
    stats = _ccache_report(plan, stats_log, progress.total, say, shown)
    paths = {name: _find_binary(plan.build_dir, name) for name in plan.targets}
    binaries = {name: Artifact.of(plan.build_dir, path) for name, path in paths.items()}
    linked = link_closure(plan.build_dir, paths)  # Refused, named: a search path past the build, a stray libggml-*.so
    manifest = Manifest(
        key=plan.key.full,
        configure_key=plan.key.configure,
        profile=plan.profile.name,
        device=plan.profile.device,
        pin={"commit": plan.pin},
        patches={"digest": plan.series_digest, "names": list(plan.series_names)},
        flags=plan.cmake_flags,
        local_flags=plan.flags.local,
        one_off_flags=plan.flags.one_off,
        toolchain=plan.toolchain.identity(),
        build_type=plan.build_type,
        targets=plan.targets,
        binaries=binaries,
        libraries=linked.libraries,
        loads=linked.loads,
        key_parts=dict(plan.key.parts),
        seconds=time.monotonic() - started,
        built_at=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        host=platform.node(),
        ccache=plan.toolchain.ccache,
        ccache_stats=None if stats is None else stats.to_json(),
    )
    if whole:
        WholeCompile(manifest.seconds, progress.total, manifest.built_at).write(plan.build_dir)
    manifest.write(plan.manifest_path)
    return manifest


def _configure_and_compile(
    plan: BuildPlan, decision: Decision, env: dict[str, str], log_path: Path, stats_log: Path, progress: Progress, say: Callable[[str], None]
) -> None:
    try:
        with log_path.open("w") as log_file:
            if decision.reconfigure:
                (plan.build_dir / CONFIGURED).unlink(missing_ok=True)
                # CMake keeps every -D in its cache: a flag dropped since the last configure, or given to a refused
                # one, stayed and built binaries the key does not describe (what cmake --fresh does, for CMake < 3.24)
                (plan.build_dir / CACHE).unlink(missing_ok=True)
                t = time.monotonic()
                done = _step(plan.configure_argv, env, log_file, "configure", None)
                ignored = ignored_flags(done, plan.cmake_flags)
                if ignored:
                    raise ConfigError(IGNORED_FLAGS.format(flags="; ".join(ignored), where=plan.flags.where(ignored[0].split(" ", 1)[0])))
                _refuse_undeclared(plan)
                write_atomic(plan.build_dir / CONFIGURED, plan.key.configure + "\n")
                say(CONFIGURE_DONE.format(seconds=time.monotonic() - t))
            else:
                say(CONFIGURE_REUSED)
            # from here binaries change: until the new manifest is written there is none (a refused or failed
            # configure above compiled nothing, so the last good one still describes the binaries and stays)
            plan.manifest_path.unlink(missing_ok=True)
            for path in decision.stale:
                path.unlink(missing_ok=True)
            t = time.monotonic()
            _step(plan.build_argv, {**env, "CCACHE_STATSLOG": str(stats_log)}, log_file, "build", progress)
            say(f"build: done in {time.monotonic() - t:.1f} s")
    except OSError as exc:  # a full disk: the log is what could not be written, whichever write saw it first
        raise OSError(exc.errno, exc.strerror, exc.filename or str(log_path)) from None


def _ccache_report(plan: BuildPlan, stats_log: Path, steps: int, say: Callable[[str], None], shown: Callable[[Path], str]) -> ninja_mod.CcacheStats | None:
    """What ccache did for this run's compiles, said in a line; a line too when ccache is installed but the build
    directory was configured without it (it is then used from its next configure)."""
    stats = ninja_mod.ccache_stats(stats_log)
    if stats is not None:
        say(stats.line())
    elif plan.toolchain.ccache and steps and not _launcher_configured(plan.build_dir):
        say(ninja_mod.CCACHE_UNUSED.format(ccache=plan.toolchain.ccache, compiles=steps, build=shown(plan.build_dir), cache=shown(plan.build_dir / CACHE)))
    return stats


def _launcher_configured(build_dir: Path) -> bool:
    try:
        return LAUNCHER_IN_CACHE.search((build_dir / CACHE).read_text(errors="replace")) is not None
    except OSError:
        return False


def _refuse_undeclared(plan: BuildPlan) -> None:
    found = undeclared.check_cache(plan.build_dir, plan.cmake_flags)
    if found:
        raise ConfigError(UNDECLARED_FLAGS.format(flags="; ".join(found), where=plan.flags.where(found[0].split(":", 1)[0])))


def _step(argv: tuple[str, ...], env: dict[str, str], log_file: IO[str], what: str, on_line: Callable[[str], None] | None) -> str:
    log_file.write(LOGGED_COMMAND.format(command=" ".join(argv)))
    log_file.flush()
    try:
        return run(argv, env=env, log_file=log_file, on_line=on_line, what=what).output
    except CommandFailed as exc:
        program = " ".join(os.path.basename(a) for a in argv[:2])
        raise CommandFailed(exc.argv, exc.returncode, exc.tail, what=STEP_FAILED.format(step=what, program=program)) from None


def _find_binary(build_dir: Path, name: str) -> Path:
    direct = build_dir / "bin" / name
    if direct.is_file():
        return direct
    found = [p for p in build_dir.rglob(name) if p.is_file() and os.access(p, os.X_OK)]
    if len(found) != 1:
        raise OnebitError(f"build: target {name} built, but {'no' if not found else 'more than one'} {name} binary found under {build_dir}")
    return found[0]

