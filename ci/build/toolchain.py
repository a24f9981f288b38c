"""Finding the tools a profile needs, with their versions, before anything is configured.

A missing tool is one line naming it and how to point at it; a tool older than the pin's minimum (pins.yaml
``build.toolchain``) is refused. The identity found here (paths and versions) is part of the build key.
"""

from __future__ import annotations

import os
import re
import shutil
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from ci.build.profiles import Profile
from ci.command import output_of
from ci.errors import OnebitError, ToolchainError
from ci.pin.pins import BuildConfig

VERSION_RE = re.compile(r"(\d+(?:\.\d+)+)")


@dataclass(frozen=True)
class Tool:
    role: str  # "cmake", "ninja", "cxx", "cc", "hip", "nvcc", "glslc", "rocm"
    path: str
    version: str


@dataclass(frozen=True)
class Toolchain:
    tools: tuple[Tool, ...]
    cmake_flags: tuple[str, ...] = ()  # compilers handed to CMake, so that the key's compiler is the one used
    env: tuple[tuple[str, str], ...] = ()  # HIP_PATH/ROCM_PATH for the HIP profiles
    ccache: str | None = None  # found, not part of the key: llama.cpp's GGML_CCACHE uses it by itself

    def tool(self, role: str) -> Tool:
        for t in self.tools:
            if t.role == role:
                return t
        raise KeyError(role)

    def identity(self) -> dict[str, str]:
        return {t.role: f"{t.path} {t.version}" for t in self.tools}

    def describe(self) -> str:
        return ", ".join(f"{t.role} {t.version}" for t in self.tools if t.role not in ("ninja",))


def version_key(version: str) -> tuple[int, ...]:
    return tuple(int(x) for x in version.split("."))


def _version(text: str, pattern: re.Pattern[str] = VERSION_RE) -> str:
    first = text.strip().splitlines()[0] if text.strip() else ""
    m = pattern.search(first) or pattern.search(text)
    return m.group(1) if m else "unknown"


def _which(name: str, env: Mapping[str, str]) -> str | None:
    return shutil.which(name, path=env.get("PATH"))


def _probe(role: str, path: str, args: tuple[str, ...] = ("--version",), pattern: re.Pattern[str] = VERSION_RE) -> Tool:
    try:
        text = output_of([path, *args])
    except OnebitError as exc:
        raise ToolchainError(f"{role}: {path} {' '.join(args)} failed ({exc.message})") from None
    return Tool(role, path, _version(text, pattern))


def _require(env: Mapping[str, str], role: str, names: tuple[str, ...], var: str | None, hint: str) -> str:
    if var and env.get(var):
        given = env[var]
        found = given if os.sep in given else _which(given, env)
        if found and os.access(found, os.X_OK):
            return found
        raise ToolchainError(f"{role}: {var}={given} is not an executable; {hint}")
    for name in names:
        found = _which(name, env)
        if found:
            return found
    raise ToolchainError(f"{role}: {' or '.join(names)} not found on PATH; {hint}")


def _check_minimum(tool: Tool, key: str, build: BuildConfig) -> None:
    minimum = build.minimum(key)
    if minimum is None or tool.version == "unknown":
        return
    if version_key(tool.version) < version_key(minimum):
        raise ToolchainError(
            f"{tool.role} {tool.version} ({tool.path}) is older than the pin's minimum {minimum} (pins.yaml build.toolchain.{key}); "
            "install a newer one or point at it"
        )


def detect(profile: Profile, build: BuildConfig, env: Mapping[str, str] | None = None) -> Toolchain:
    """The toolchain of ``profile`` from ``env`` (default: this process's environment)."""
    env = dict(os.environ if env is None else env)
    cmake = _probe("cmake", _require(env, "cmake", ("cmake",), "CMAKE", "install CMake 3.14+ (pip install cmake) or set CMAKE=/path/to/cmake"))
    _check_minimum(cmake, "cmake", build)
    ninja = _probe("ninja", _require(env, "ninja", ("ninja",), "NINJA", "install Ninja (pip install ninja) or set NINJA=/path/to/ninja"))
    tools = [cmake, ninja]
    flags: list[str] = [f"-DCMAKE_MAKE_PROGRAM={ninja.path}"]
    extra_env: list[tuple[str, str]] = []
    hint = f"set CC/CXX, or pick another profile with --profile (this is {profile.name})"
    cc = _probe("cc", _require(env, "cc", ("cc", "gcc", "clang"), "CC", hint))
    cxx = _probe("cxx", _require(env, "cxx", ("c++", "g++", "clang++"), "CXX", hint))
    _check_minimum(cxx, "cxx", build)
    tools += [cc, cxx]
    flags += [f"-DCMAKE_C_COMPILER={cc.path}", f"-DCMAKE_CXX_COMPILER={cxx.path}"]
    if profile.backend == "hip":
        rocm = _rocm_path(env, profile)
        version = _rocm_version(rocm, env)
        rocm_tool = Tool("rocm", str(rocm), version)
        _check_minimum(rocm_tool, "rocm", build)
        hip = _probe("hip", _hip_compiler(rocm, env, profile))
        tools += [rocm_tool, hip]
        flags.append(f"-DCMAKE_HIP_COMPILER={hip.path}")
        extra_env += [("ROCM_PATH", str(rocm)), ("HIP_PATH", str(rocm))]
    elif profile.backend == "cuda":
        nvcc = _require(env, "nvcc", ("nvcc",), "CUDACXX", "install the CUDA toolkit, put nvcc on PATH or set CUDACXX=/usr/local/cuda/bin/nvcc")
        tool = _probe("nvcc", nvcc, pattern=re.compile(r"release (\d+\.\d+)"))
        _check_minimum(tool, "cuda", build)
        tools.append(tool)
        flags.append(f"-DCMAKE_CUDA_COMPILER={nvcc}")
    elif profile.backend == "vulkan":
        glslc = _require(env, "glslc", ("glslc",), "GLSLC", "install the Vulkan SDK (glslc, the headers and the loader)")
        tools.append(_probe("glslc", glslc))
    return Toolchain(tuple(tools), tuple(flags), tuple(extra_env), _which("ccache", env))


def _rocm_path(env: Mapping[str, str], profile: Profile) -> Path:
    hint = (
        f"set ROCM_PATH to your ROCm (the engine's TheRock build is /opt/rocm-therock), "
        f"or pick another profile with --profile cuda|vulkan|cpu (this is {profile.name})"
    )
    if env.get("ROCM_PATH"):
        path = Path(env["ROCM_PATH"])
        if not (path / "bin").is_dir():
            raise ToolchainError(f"{profile.name}: ROCM_PATH={path} has no bin/: not a ROCm install; {hint}")
        return path
    hipconfig = _which("hipconfig", env)
    if hipconfig:
        return Path(output_of([hipconfig, "--rocmpath"]).strip().splitlines()[-1])
    if Path("/opt/rocm/bin").is_dir():
        return Path("/opt/rocm")
    raise ToolchainError(f"{profile.name}: no ROCm found: ROCM_PATH is not set, hipconfig is not on PATH and /opt/rocm does not exist; {hint}")


def _rocm_version(rocm: Path, env: Mapping[str, str]) -> str:
    hipconfig = rocm / "bin" / "hipconfig"
    if hipconfig.is_file():
        return _version(output_of([str(hipconfig), "--version"]))
    info = rocm / ".info" / "version"
    if info.is_file():
        return _version(info.read_text())
    return "unknown"


def _hip_compiler(rocm: Path, env: Mapping[str, str], profile: Profile) -> str:
    if env.get("HIPCXX"):
        return _require(env, "hip", (), "HIPCXX", "point HIPCXX at ROCm's clang++")
    for candidate in ("llvm/bin/clang++", "lib/llvm/bin/clang++", "bin/amdclang++"):
        path = rocm / candidate
        if path.is_file() and os.access(path, os.X_OK):
            return str(path)
    raise ToolchainError(
        f"{profile.name}: ROCm at {rocm} has no HIP compiler (llvm/bin/clang++, lib/llvm/bin/clang++ or bin/amdclang++); set HIPCXX"
    )
