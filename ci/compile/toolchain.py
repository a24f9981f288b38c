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

from ci.command import output_of
from ci.compile.profiles import Profile
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


def _probe(role: str, path: str, args: tuple[str, ...] = ("--version",), pattern: re.Pattern[str] = VERSION_RE, env: Mapping[str, str] | None = None) -> Tool:
    try:
        text = output_of([path, *args], env=env) if env is not None else output_of([path, *args])
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
        found, vk_flags, vk_env = _vulkan(env, profile, build)
        tools += found
        flags += vk_flags
        extra_env += vk_env
    return Toolchain(tuple(tools), tuple(flags), tuple(extra_env), _which("ccache", env))


VK_HEADER_RE = re.compile(r"^#define\s+VK_HEADER_VERSION_COMPLETE\s+VK_MAKE_API_VERSION\(\s*0\s*,\s*(\d+)\s*,\s*(\d+)\s*,\s*VK_HEADER_VERSION\s*\)", re.MULTILINE)
VK_PATCH_RE = re.compile(r"^#define\s+VK_HEADER_VERSION\s+(\d+)", re.MULTILINE)
VK_HINT = "Debian: apt-get install glslc libvulkan-dev spirv-headers; or set VULKAN_SDK to an SDK (include/, lib/, bin/glslc)"


def _vulkan_roots(env: Mapping[str, str]) -> list[Path]:
    roots = [Path(env["VULKAN_SDK"])] if env.get("VULKAN_SDK") else []
    return [*roots, Path("/usr"), Path("/usr/local")]


def _vulkan(env: Mapping[str, str], profile: Profile, build: BuildConfig) -> tuple[list[Tool], list[str], list[tuple[str, str]]]:
    """glslc, the Vulkan headers (their version from vulkan_core.h) and the loader, each named when missing (one line
    each); handed to CMake's FindVulkan so the ones found are the ones used."""
    roots = _vulkan_roots(env)
    where = ", ".join(str(r) for r in roots)
    missing: list[str] = []
    sdk_glslc = [str(roots[0] / "bin" / "glslc")] if env.get("VULKAN_SDK") else []
    glslc_path = next((p for p in sdk_glslc if os.access(p, os.X_OK)), None) or _which_env(env, "glslc", "GLSLC")
    if glslc_path is None:
        missing.append(f"{profile.name}: glslc (the shader compiler) is missing: not on PATH, not $GLSLC, not $VULKAN_SDK/bin; {VK_HINT}")
    include = next((r / "include" for r in roots if (r / "include" / "vulkan" / "vulkan_core.h").is_file()), None)
    version = "unknown"
    if include is None:
        missing.append(f"{profile.name}: the Vulkan headers are missing: no include/vulkan/vulkan_core.h under {where}; {VK_HINT}")
    else:
        core = (include / "vulkan" / "vulkan_core.h").read_text(encoding="utf-8", errors="replace")
        m, patch = VK_HEADER_RE.search(core), VK_PATCH_RE.search(core)
        version = f"{m.group(1)}.{m.group(2)}.{patch.group(1)}" if m and patch else "unknown"
        if not (include / "vulkan" / "vulkan.hpp").is_file():
            missing.append(f"{profile.name}: the Vulkan C++ headers are missing: no {include}/vulkan/vulkan.hpp; {VK_HINT}")
        minimum = build.minimum("vulkan")
        if minimum and (version == "unknown" or version_key(version) < version_key(minimum)):
            missing.append(
                f"{profile.name}: vulkan-headers {version} ({include}) are older than the pin's minimum {minimum} (pins.yaml build.toolchain.vulkan); "
                "newer headers are text and need no newer driver: unpack Debian trixie's libvulkan-dev and set VULKAN_SDK to its usr/"
            )
    lib_dirs = [d for r in roots for d in (r / "lib", r / "lib" / "x86_64-linux-gnu", r / "lib64")]
    library = next((d / name for d in lib_dirs for name in ("libvulkan.so", "libvulkan.so.1") if (d / name).exists()), None)
    if library is None:
        missing.append(f"{profile.name}: the Vulkan loader is missing: no libvulkan.so under {where}; Debian: apt-get install libvulkan-dev (it brings libvulkan1)")
    if missing or glslc_path is None or include is None or library is None:
        raise ToolchainError("\n".join(missing))
    # an SDK's glslc finds its libshaderc beside the loader, as the LunarG SDK's setup-env.sh arranges
    sdk_libs = [str(d) for d in lib_dirs[:3] if env.get("VULKAN_SDK") and d.is_dir()]
    vk_env = [("LD_LIBRARY_PATH", os.pathsep.join([*sdk_libs, env.get("LD_LIBRARY_PATH", "")]).rstrip(os.pathsep))] if sdk_libs else []
    glslc = _probe("glslc", glslc_path, env={**env, **dict(vk_env)})
    tools = [glslc, Tool("vulkan-headers", str(include), version), Tool("vulkan-loader", str(library), _loader_version(library))]
    flags = [f"-DVulkan_INCLUDE_DIR={include}", f"-DVulkan_LIBRARY={library}", f"-DVulkan_GLSLC_EXECUTABLE={glslc.path}"]
    return tools, flags, vk_env


def _which_env(env: Mapping[str, str], name: str, var: str) -> str | None:
    if env.get(var):
        given = env[var]
        found = given if os.sep in given else _which(given, env)
        return found if found and os.access(found, os.X_OK) else None
    return _which(name, env)


def _loader_version(library: Path) -> str:
    m = re.search(r"\.so\.(\d+(?:\.\d+)+)$", str(library.resolve()))
    return m.group(1) if m else "unknown"


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
