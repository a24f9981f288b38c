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
from ci.compile import rocm
from ci.compile.profiles import Profile
from ci.errors import OnebitError, ToolchainError
from ci.pin.pins import BuildConfig

VERSION_RE = re.compile(r"(\d+(?:\.\d+)+)")

# Messages, shared with the tests that match on them (tests/support/messages.py)
NOT_ON_PATH = "{role}: {names} not found on PATH; {hint}"
INSTALL_CMAKE = "install CMake 3.14+ (pip install cmake) or set CMAKE=/path/to/cmake"
TOO_OLD = "{role} {version} ({path}) is older than the pin's minimum {minimum} (pins.yaml build.toolchain.{key}); install a newer one or point at it"
VK_HINT = "Debian: apt-get install glslc libvulkan-dev spirv-headers; or set VULKAN_SDK to an SDK (include/, lib/, bin/glslc)"
VK_NO_GLSLC = "{profile}: glslc (the shader compiler) is missing: not on PATH, not $GLSLC, not $VULKAN_SDK/bin; {hint}"
VK_NO_HEADERS = "{profile}: the Vulkan headers are missing: no include/vulkan/vulkan_core.h under {where}; {hint}"
VK_NO_CPP_HEADERS = "{profile}: the Vulkan C++ headers are missing: no {include}/vulkan/vulkan.hpp; {hint}"
VK_HEADERS_TOO_OLD = (
    "{profile}: vulkan-headers {version} ({include}) are older than the pin's minimum {minimum} (pins.yaml build.toolchain.vulkan); "
    "newer headers are text and need no newer driver: unpack Debian trixie's libvulkan-dev and set VULKAN_SDK to its usr/"
)
VK_NO_LOADER = "{profile}: the Vulkan loader is missing: no libvulkan.so under {where}; Debian: apt-get install libvulkan-dev (it brings libvulkan1)"


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
        return {t.role: f"{t.path} {t.version}".rstrip() for t in self.tools}

    def describe(self) -> str:
        return ", ".join(f"{t.role} {t.version}" if t.version else f"{t.role} {t.path}" for t in self.tools if t.role not in ("ninja", "device-libs"))


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
    raise ToolchainError(NOT_ON_PATH.format(role=role, names=" or ".join(names), hint=hint))


def _check_minimum(tool: Tool, key: str, build: BuildConfig) -> None:
    minimum = build.minimum(key)
    if minimum is None or tool.version == "unknown":
        return
    if version_key(tool.version) < version_key(minimum):
        raise ToolchainError(TOO_OLD.format(role=tool.role, version=tool.version, path=tool.path, minimum=minimum, key=key))


def detect(profile: Profile, build: BuildConfig, env: Mapping[str, str] | None = None) -> Toolchain:
    """The toolchain of ``profile`` from ``env`` (default: this process's environment)."""
    env = dict(os.environ if env is None else env)
    cmake = _probe("cmake", _require(env, "cmake", ("cmake",), "CMAKE", INSTALL_CMAKE))
    _check_minimum(cmake, "cmake", build)
    ninja = _probe("ninja", _require(env, "ninja", ("ninja",), "NINJA", "install Ninja (pip install ninja) or set NINJA=/path/to/ninja"))
    tools = [cmake, ninja]
    flags: list[str] = [f"-DCMAKE_MAKE_PROGRAM={ninja.path}"]
    extra_env: list[tuple[str, str]] = []
    hint = "install gcc and g++ (or clang), or set CC and CXX"  # every profile needs them
    cc = _probe("cc", _require(env, "cc", ("cc", "gcc", "clang"), "CC", hint))
    cxx = _probe("cxx", _require(env, "cxx", ("c++", "g++", "clang++"), "CXX", hint))
    _check_minimum(cxx, "cxx", build)
    tools += [cc, cxx]
    flags += [f"-DCMAKE_C_COMPILER={cc.path}", f"-DCMAKE_CXX_COMPILER={cxx.path}"]
    if profile.backend == "hip":
        found, hip_flags, hip_env = _hip(env, profile, build)
        tools += found
        flags += hip_flags
        extra_env += hip_env
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
        missing.append(VK_NO_GLSLC.format(profile=profile.name, hint=VK_HINT))
    include = next((r / "include" for r in roots if (r / "include" / "vulkan" / "vulkan_core.h").is_file()), None)
    version = "unknown"
    if include is None:
        missing.append(VK_NO_HEADERS.format(profile=profile.name, where=where, hint=VK_HINT))
    else:
        core = (include / "vulkan" / "vulkan_core.h").read_text(encoding="utf-8", errors="replace")
        m, patch = VK_HEADER_RE.search(core), VK_PATCH_RE.search(core)
        version = f"{m.group(1)}.{m.group(2)}.{patch.group(1)}" if m and patch else "unknown"
        if not (include / "vulkan" / "vulkan.hpp").is_file():
            missing.append(VK_NO_CPP_HEADERS.format(profile=profile.name, include=include, hint=VK_HINT))
        minimum = build.minimum("vulkan")
        if minimum and (version == "unknown" or version_key(version) < version_key(minimum)):
            missing.append(VK_HEADERS_TOO_OLD.format(profile=profile.name, version=version, include=include, minimum=minimum))
    lib_dirs = [d for r in roots for d in (r / "lib", r / "lib" / "x86_64-linux-gnu", r / "lib64")]
    library = next((d / name for d in lib_dirs for name in ("libvulkan.so", "libvulkan.so.1") if (d / name).exists()), None)
    if library is None:
        missing.append(VK_NO_LOADER.format(profile=profile.name, where=where))
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


def _hip(env: Mapping[str, str], profile: Profile, build: BuildConfig) -> tuple[list[Tool], list[str], list[tuple[str, str]]]:
    """ROCm in any layout (ci/compile/rocm.py): its root, HIP version (checked against the pin's minimum), compiler,
    device libraries, hipBLAS and rocBLAS, all in the build key."""
    install = rocm.find(env, profile.name)
    rocm_tool = Tool("rocm", str(install.root), install.version)
    _check_minimum(rocm_tool, "rocm", build)
    hip = _probe("hip", str(install.compiler), env=env)
    tools = [
        rocm_tool,
        hip,
        Tool("rocm-layout", install.layout, ""),
        Tool("device-libs", str(install.device_libs), ""),
        Tool("hipblas", str(install.hipblas), rocm.library_version(install.hipblas)),
        Tool("rocblas", str(install.rocblas), rocm.library_version(install.rocblas)),
    ]
    return tools, [f"-DCMAKE_HIP_COMPILER={install.compiler}"], list(install.env)
