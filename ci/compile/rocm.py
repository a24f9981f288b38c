"""ROCm wherever people have it: the layout, the HIP compiler, the device libraries, the HIP runtime, hipBLAS and
rocBLAS, each missing piece named with how to get it (Debian's package, TheRock).

A layout is told by what lies under the root, not by its name: ``rocm``, ``therock``, ``therock-python`` or
``distribution`` (``/usr``: the HIP compiler is its clang, the device libraries in its resource directory).
``ROCM_PATH=/usr`` sends that clang looking for them elsewhere, so that layout exports ``HIP_DEVICE_LIB_PATH`` and
no ROCm path. The table of layouts: docs/build.md.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import re
import shutil
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from ci.command import output_of
from ci.errors import OnebitError, ToolchainError

SEARCHED = (Path("/opt/rocm"), Path("/opt/rocm-therock"), Path("/usr"))
LIB_DIRS = ("lib", "lib64", "lib/x86_64-linux-gnu")
HIP_VERSION_RE = {part: re.compile(rf"^#define\s+HIP_VERSION_{part}\s+(\d+)", re.MULTILINE) for part in ("MAJOR", "MINOR", "PATCH")}
LLVM_N_RE = re.compile(r"^llvm-(\d+)$")

# Messages, shared with the tests that match on them (tests/support/messages.py)
NO_ROCM = (
    "{profile}: no ROCm found (ROCM_PATH is not set, no hipconfig on PATH, nothing at {where}); "
    "Debian: apt-get install hipcc libamdhip64-dev libhipblas-dev librocblas-dev; {therock}"
)
ROCM_PATH_MISSING = "{profile}: ROCM_PATH={root} does not exist; set ROCM_PATH to your ROCm (/opt/rocm, /opt/rocm-therock, /usr)"
INCOMPLETE = "{profile}: {layout} ROCm at {root} (from {source}) is incomplete:"
PIECE_MISSING = "{profile}: {what} is missing: {detail}; {how}"  # one line of INCOMPLETE's each
HOW = "Debian: apt-get install {package}; {therock}"
THEROCK = (
    'TheRock: unpack its gfx1151 tarball and set ROCM_PATH to it, or pip install "rocm[libraries,devel]" from '
    "TheRock's gfx1151 index and set ROCM_PATH to `rocm-sdk path --root`"
)
# what Debian calls each piece (unstable carries HIP 6.4: docs/build.md)
DEBIAN = {
    "hip": "hipcc",
    "device-libs": "rocm-device-libs-21",
    "hip-runtime": "libamdhip64-dev",
    "hipblas": "libhipblas-dev",
    "rocblas": "librocblas-dev",
}
WHAT = {
    "hip": "the HIP compiler",
    "device-libs": "the device libraries (amdgcn/bitcode/ocml.bc)",
    "hip-runtime": "the HIP runtime (include/hip/hip_runtime.h, libamdhip64.so)",
    "hipblas": "hipBLAS (include/hipblas/hipblas.h, libhipblas.so)",
    "rocblas": "rocBLAS (include/rocblas/rocblas.h, librocblas.so)",
}


@dataclass(frozen=True)
class RocmInstall:
    """One ROCm as found: every path the build uses, and what it exports for the build."""

    layout: str  # "rocm", "therock", "therock-python", "distribution"
    root: Path
    version: str  # HIP's, from include/hip/hip_version.h or hipconfig
    compiler: Path
    device_libs: Path
    hipblas: Path
    rocblas: Path

    @property
    def env(self) -> tuple[tuple[str, str], ...]:
        device = ("HIP_DEVICE_LIB_PATH", str(self.device_libs))
        if self.layout == "distribution":
            return (device,)
        return (("ROCM_PATH", str(self.root)), ("HIP_PATH", str(self.root)), device)

    def describe(self) -> str:
        return f"{self.layout} ROCm at {self.root}, HIP {self.version}, {self.compiler}"


def _how(piece: str) -> str:
    return HOW.format(package=DEBIAN[piece], therock=THEROCK)


def _executable(path: Path) -> bool:
    return path.is_file() and os.access(path, os.X_OK)


def _has_bitcode(path: Path) -> bool:
    return (path / "ocml.bc").is_file()


def _llvm_dirs(root: Path) -> list[Path]:
    """``lib/llvm-N`` under a distribution's root, newest first."""
    lib = root / "lib"
    found = [(int(m.group(1)), p) for p in (lib.iterdir() if lib.is_dir() else ()) if (m := LLVM_N_RE.match(p.name))]
    return [p for _, p in sorted(found, reverse=True)]


def layout_of(root: Path) -> str:
    if root.name == "_rocm_sdk_core":
        return "therock-python"
    if (root / "llvm" / "bin").is_dir() or (root / "bin" / "amdclang++").exists():
        return "rocm"  # /opt/rocm 6.x has lib/llvm too, with llvm/ beside it
    if (root / "lib" / "llvm" / "bin").is_dir():
        return "therock"
    if _llvm_dirs(root):
        return "distribution"
    return "rocm"


def _compilers(root: Path, layout: str) -> list[Path]:
    if layout == "distribution":
        # the newest clang that has the device libraries in its resource directory, then the newest at all
        dirs = _llvm_dirs(root)
        with_bitcode = [d for d in dirs if any(_has_bitcode(b) for b in _device_lib_dirs(root, d / "bin" / "clang++"))]
        return [d / "bin" / "clang++" for d in [*with_bitcode, *(d for d in dirs if d not in with_bitcode)]]
    return [root / "llvm" / "bin" / "clang++", root / "lib" / "llvm" / "bin" / "clang++", root / "bin" / "amdclang++"]


def _device_lib_dirs(root: Path, compiler: Path | None) -> list[Path]:
    dirs = [root / "amdgcn" / "bitcode", root / "lib" / "llvm" / "amdgcn" / "bitcode", root / "llvm" / "amdgcn" / "bitcode"]
    if compiler is not None:
        llvm = compiler.parent.parent  # .../llvm-N or .../llvm
        resource = llvm / "lib" / "clang"
        if resource.is_dir():
            dirs += sorted((d / "amdgcn" / "bitcode" for d in resource.iterdir()), reverse=True)
        dirs.append(llvm / "amdgcn" / "bitcode")
    return dirs


def _library(root: Path, name: str) -> Path | None:
    for d in LIB_DIRS:
        for candidate in (root / d / f"{name}.so", *sorted((root / d).glob(f"{name}.so.*"))):
            if candidate.exists():
                return candidate
    return None


def hip_version(root: Path, env: Mapping[str, str]) -> str:
    header = root / "include" / "hip" / "hip_version.h"
    if header.is_file():
        text = header.read_text(encoding="utf-8", errors="replace")
        parts = [HIP_VERSION_RE[p].search(text) for p in ("MAJOR", "MINOR", "PATCH")]
        if all(parts):
            return ".".join(m.group(1) for m in parts if m)
    hipconfig = root / "bin" / "hipconfig"
    if _executable(hipconfig):
        m = re.search(r"(\d+(?:\.\d+)+)", output_of([str(hipconfig), "--version"], env=dict(env)))
        if m:
            return m.group(1)
    info = root / ".info" / "version"
    if info.is_file():
        m = re.search(r"(\d+(?:\.\d+)+)", info.read_text())
        if m:
            return m.group(1)
    return "unknown"


def _python_rocm_root(env: Mapping[str, str]) -> Path | None:
    """TheRock's Python packages: ``rocm-sdk path --root`` where the command is on PATH, else ``_rocm_sdk_core``
    importable here."""
    rocm_sdk = shutil.which("rocm-sdk", path=env.get("PATH"))
    if rocm_sdk:
        try:
            return Path(output_of([rocm_sdk, "path", "--root"], env=dict(env)).strip().splitlines()[-1])
        except (OnebitError, IndexError):
            return None
    spec = importlib.util.find_spec("_rocm_sdk_core")
    if spec is not None and spec.submodule_search_locations:
        return Path(next(iter(spec.submodule_search_locations)))
    return None


def candidates(env: Mapping[str, str], searched: Sequence[Path] | None = None) -> list[tuple[Path, str]]:
    """Where ROCm may be, each with where that came from, in the order they are tried."""
    searched = SEARCHED if searched is None else searched
    if env.get("ROCM_PATH"):
        return [(Path(env["ROCM_PATH"]), "ROCM_PATH")]
    found: list[tuple[Path, str]] = []
    hipconfig = shutil.which("hipconfig", path=env.get("PATH"))
    if hipconfig:
        with contextlib.suppress(OnebitError, IndexError):  # a hipconfig that fails says nothing: search on
            found.append((Path(output_of([hipconfig, "--rocmpath"], env=dict(env)).strip().splitlines()[-1]), f"{hipconfig} --rocmpath"))
    python_root = _python_rocm_root(env)
    for path in searched:
        found.append((path, "searched"))
        if path == Path("/opt/rocm-therock") and python_root is not None:
            found.append((python_root, "TheRock's Python packages"))
    if python_root is not None and (python_root, "TheRock's Python packages") not in found:
        found.append((python_root, "TheRock's Python packages"))
    return found


def _looks_like_rocm(root: Path) -> bool:
    return (
        (root / "include" / "hip").is_dir()
        or (root / "bin" / "hipconfig").exists()
        or (root / "lib" / "llvm" / "bin").is_dir()
        or (root / "llvm" / "bin").is_dir()
    )


def find(env: Mapping[str, str], profile: str, searched: Sequence[Path] | None = None) -> RocmInstall:
    """The first ROCm among :func:`candidates`, checked whole; every missing piece on a line of its own."""
    tried = candidates(env, searched)
    for root, source in tried:
        if source == "ROCM_PATH" or _looks_like_rocm(root):
            return inspect(root, env, profile, source)
    where = ", ".join(str(r) for r, _ in tried)
    raise ToolchainError(NO_ROCM.format(profile=profile, where=where, therock=THEROCK))


def inspect(root: Path, env: Mapping[str, str], profile: str, source: str = "ROCM_PATH") -> RocmInstall:
    if source == "ROCM_PATH" and not root.is_dir():
        raise ToolchainError(ROCM_PATH_MISSING.format(profile=profile, root=root))
    layout = layout_of(root)
    missing: list[str] = []

    def lack(piece: str, detail: str) -> None:
        missing.append(PIECE_MISSING.format(profile=profile, what=WHAT[piece], detail=detail, how=_how(piece)))

    compiler: Path | None = None
    if env.get("HIPCXX"):
        given = env["HIPCXX"]
        path = Path(given if os.sep in given else shutil.which(given, path=env.get("PATH")) or given)
        if not _executable(path):
            raise ToolchainError(f"{profile}: HIPCXX={given} is not an executable; point HIPCXX at ROCm's clang++")
        compiler = path
    else:
        options = _compilers(root, layout)
        compiler = next((c for c in options if _executable(c)), None)
        if compiler is None:
            lack("hip", f"none of {', '.join(str(c) for c in options) or f'{root}/lib/llvm-N/bin/clang++'}; or set HIPCXX")
    bitcode = next((d for d in _device_lib_dirs(root, compiler) if _has_bitcode(d)), None)
    if env.get("HIP_DEVICE_LIB_PATH"):
        bitcode = Path(env["HIP_DEVICE_LIB_PATH"])
        if not _has_bitcode(bitcode):
            raise ToolchainError(f"{profile}: HIP_DEVICE_LIB_PATH={bitcode} has no ocml.bc; {_how('device-libs')}")
    if bitcode is None:
        lack("device-libs", f"no amdgcn/bitcode/ocml.bc under {root}" + (f" or beside {compiler}" if compiler else ""))
    if not (root / "include" / "hip" / "hip_runtime.h").is_file() or _library(root, "libamdhip64") is None:
        lack("hip-runtime", f"no include/hip/hip_runtime.h and lib*/libamdhip64.so under {root}")
    libs: dict[str, Path] = {}
    for piece, header in (("hipblas", "hipblas/hipblas.h"), ("rocblas", "rocblas/rocblas.h")):
        lib = _library(root, f"lib{piece}")
        if lib is None or not (root / "include" / header).is_file():
            lack(piece, f"no include/{header} and lib*/lib{piece}.so under {root}")
        else:
            libs[piece] = lib
    if missing or compiler is None or bitcode is None:
        head = [INCOMPLETE.format(profile=profile, layout=layout, root=root, source=source)] if missing else []
        raise ToolchainError("\n".join([*head, *missing]))
    return RocmInstall(layout, root, hip_version(root, env), compiler, bitcode, libs["hipblas"], libs["rocblas"])


def library_version(library: Path) -> str:
    m = re.search(r"\.so\.(\d+(?:\.\d+)*)$", str(library.resolve()))
    return m.group(1) if m else "unknown"
