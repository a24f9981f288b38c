"""The HIP profiles' toolchain in each ROCm layout: /opt/rocm, TheRock's tarball and Python packages, a
distribution's /usr; each missing piece one line with the Debian package and TheRock's way.

The ROCm trees here are stand-ins (directories laid out as each layout installs, with compiler scripts that print
what the real ones print): this machine has no ROCm. The real one, Debian's HIP 6.4 in a Debian unstable root, is
measured in docs/build.md."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from ci.compile import profiles, rocm, toolchain
from ci.compile.toolchain import detect
from ci.errors import ToolchainError
from ci.pin.pins import BuildConfig
from tests.support.messages import pattern

PIN = BuildConfig(minimums=(("rocm", "6.1"),))
GFX1151 = profiles.get("gfx1151")


def _script(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("#!/bin/sh\n" + text)
    path.chmod(0o755)
    return path


def _file(path: Path, text: str = "") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def _library(lib: Path, name: str, version: str) -> None:
    _file(lib / f"{name}.so.{version}", "\x7fELF")
    (lib / f"{name}.so").symlink_to(f"{name}.so.{version}")


def stand_in_rocm(
    root: Path,
    layout: str,
    hip: str = "6.4.43484",
    hipblas: bool = True,
    rocblas: bool = True,
    device_libs: bool = True,
) -> Path:
    """A ROCm tree as ``layout`` lays it out; returns the compiler."""
    major, minor, patch = hip.split(".")
    _file(
        root / "include" / "hip" / "hip_version.h",
        f"#define HIP_VERSION_MAJOR {major}\n#define HIP_VERSION_MINOR {minor}\n#define HIP_VERSION_PATCH {patch}\n",
    )
    _file(root / "include" / "hip" / "hip_runtime.h")
    lib = root / ("lib/x86_64-linux-gnu" if layout == "distribution" else "lib")
    _library(lib, "libamdhip64", "6.4.43484")
    if hipblas:
        _file(root / "include" / "hipblas" / "hipblas.h")
        _library(lib, "libhipblas", "2.4")
    if rocblas:
        _file(root / "include" / "rocblas" / "rocblas.h")
        _library(lib, "librocblas", "4.4")
    if layout == "rocm":
        compiler = _script(root / "llvm" / "bin" / "clang++", "echo 'AMD clang version 19.0.0git (roc-6.4.1)'\n")
        _file(root / "lib" / "llvm" / "bin" / "clang++")  # /opt/rocm 6.x has both; llvm/ is the one its docs name
        bitcode = root / "amdgcn" / "bitcode"
    elif layout in ("therock", "therock-python"):
        compiler = _script(root / "lib" / "llvm" / "bin" / "clang++", "echo 'AMD clang version 20.0.0git (TheRock 7.0.0rc)'\n")
        bitcode = root / "lib" / "llvm" / "amdgcn" / "bitcode"
    else:
        compiler = _script(root / "lib" / "llvm-21" / "bin" / "clang++", "echo 'Debian clang version 21.1.8 (1)'\n")
        bitcode = root / "lib" / "llvm-21" / "lib" / "clang" / "21" / "amdgcn" / "bitcode"
        # a newer clang without the device libraries: not the HIP compiler
        _script(root / "lib" / "llvm-22" / "bin" / "clang++", "echo 'Debian clang version 22.0.0'\n")
    if device_libs:
        _file(bitcode / "ocml.bc", "BC")
    return compiler


def bare_env(path: list[Path] | None = None) -> dict[str, str]:
    """This environment less every ROCm variable, and a PATH with no hipconfig or rocm-sdk but the given ones."""
    env = {k: v for k, v in os.environ.items() if k not in ("ROCM_PATH", "HIP_PATH", "HIPCXX", "HIP_DEVICE_LIB_PATH")}
    dirs = [d for d in env.get("PATH", "").split(os.pathsep) if not Path(d, "hipconfig").exists() and not Path(d, "rocm-sdk").exists()]
    env["PATH"] = os.pathsep.join([*(str(p) for p in path or []), *dirs])
    return env


def test_stand_in_opt_rocm_is_found_from_rocm_path_and_everything_goes_into_the_key(tmp_path: Path) -> None:
    root = tmp_path / "opt" / "rocm"
    compiler = stand_in_rocm(root, "rocm")
    chain = detect(GFX1151, PIN, {**bare_env(), "ROCM_PATH": str(root)})
    ident = chain.identity()
    assert ident["rocm"] == f"{root} 6.4.43484"
    assert ident["hip"] == f"{compiler} 19.0.0"
    assert ident["rocm-layout"] == "rocm"
    assert ident["device-libs"] == str(root / "amdgcn" / "bitcode")
    assert ident["hipblas"] == f"{root / 'lib' / 'libhipblas.so'} 2.4"
    assert ident["rocblas"] == f"{root / 'lib' / 'librocblas.so'} 4.4"
    assert f"-DCMAKE_HIP_COMPILER={compiler}" in chain.cmake_flags
    assert dict(chain.env) == {"ROCM_PATH": str(root), "HIP_PATH": str(root), "HIP_DEVICE_LIB_PATH": str(root / "amdgcn" / "bitcode")}
    assert chain.describe().endswith("rocm 6.4.43484, hip 19.0.0, rocm-layout rocm, hipblas 2.4, rocblas 4.4")


def test_stand_in_therock_tarball_is_found_at_opt_rocm_therock_without_any_variable(tmp_path: Path) -> None:
    therock = tmp_path / "opt" / "rocm-therock"
    compiler = stand_in_rocm(therock, "therock")
    found = rocm.find(bare_env(), "gfx1151", searched=(tmp_path / "opt" / "rocm", therock, tmp_path / "usr"))
    assert (found.layout, found.root, found.compiler, found.version) == ("therock", therock, compiler, "6.4.43484")
    assert found.device_libs == therock / "lib" / "llvm" / "amdgcn" / "bitcode"


def test_stand_in_therock_python_packages_are_found_through_rocm_sdk(tmp_path: Path) -> None:
    core = tmp_path / "venv" / "lib" / "python3.12" / "site-packages" / "_rocm_sdk_core"
    compiler = stand_in_rocm(core, "therock-python")
    bin_dir = tmp_path / "venv" / "bin"
    _script(bin_dir / "rocm-sdk", f'[ "$1 $2" = "path --root" ] && echo {core}\n')
    found = rocm.find(bare_env([bin_dir]), "gfx1151", searched=(tmp_path / "opt" / "rocm",))
    assert (found.layout, found.root, found.compiler) == ("therock-python", core, compiler)
    assert dict(found.env)["ROCM_PATH"] == str(core)


def test_stand_in_debian_usr_through_hipconfig_exports_the_device_libraries_and_no_rocm_path(tmp_path: Path) -> None:
    usr = tmp_path / "usr"
    compiler = stand_in_rocm(usr, "distribution")
    bin_dir = tmp_path / "bin"
    _script(bin_dir / "hipconfig", f'[ "$1" = "--rocmpath" ] && printf %s {usr}\n')
    chain = detect(GFX1151, PIN, bare_env([bin_dir]))
    bitcode = usr / "lib" / "llvm-21" / "lib" / "clang" / "21" / "amdgcn" / "bitcode"
    # ROCM_PATH=/usr sends Debian's clang looking for the device libraries elsewhere: "cannot find ROCm device library"
    assert dict(chain.env) == {"HIP_DEVICE_LIB_PATH": str(bitcode)}
    assert f"-DCMAKE_HIP_COMPILER={compiler}" in chain.cmake_flags
    ident = chain.identity()
    assert (ident["rocm-layout"], ident["hip"], ident["device-libs"]) == ("distribution", f"{compiler} 21.1.8", str(bitcode))
    assert ident["hipblas"] == f"{usr / 'lib' / 'x86_64-linux-gnu' / 'libhipblas.so'} 2.4"


def test_hipcxx_overrides_the_compiler_of_the_layout(tmp_path: Path) -> None:
    root = tmp_path / "rocm"
    stand_in_rocm(root, "rocm")
    mine = _script(tmp_path / "my" / "clang++", "echo 'clang version 20.1.0'\n")
    chain = detect(GFX1151, PIN, {**bare_env(), "ROCM_PATH": str(root), "HIPCXX": str(mine)})
    assert chain.tool("hip").path == str(mine)
    assert chain.tool("hip").version == "20.1.0"


def test_stand_in_hip_older_than_the_pins_minimum_is_refused(tmp_path: Path) -> None:
    root = tmp_path / "rocm"
    stand_in_rocm(root, "rocm", hip="6.0.32830")
    with pytest.raises(ToolchainError) as exc:
        detect(GFX1151, PIN, {**bare_env(), "ROCM_PATH": str(root)})
    assert exc.value.message == toolchain.TOO_OLD.format(role="rocm", version="6.0.32830", path=root, minimum="6.1", key="rocm")


def test_stand_in_usr_missing_pieces_are_each_named_with_debian_and_therock(tmp_path: Path) -> None:
    usr = tmp_path / "usr"
    stand_in_rocm(usr, "distribution", hipblas=False, rocblas=False, device_libs=False)
    with pytest.raises(ToolchainError) as exc:
        detect(GFX1151, PIN, {**bare_env(), "ROCM_PATH": str(usr)})
    lines = exc.value.message.splitlines()
    assert lines[0] == rocm.INCOMPLETE.format(profile="gfx1151", layout="distribution", root=usr, source="ROCM_PATH")
    pieces = (("device-libs", "rocm-device-libs-21"), ("hipblas", "libhipblas-dev"), ("rocblas", "librocblas-dev"))
    for line, (piece, package) in zip(lines[1:], pieces, strict=True):
        how = rocm.HOW.format(package=package, therock=rocm.THEROCK)
        assert pattern(rocm.PIECE_MISSING, profile="gfx1151", what=rocm.WHAT[piece], how=how).fullmatch(line), line


def test_nothing_anywhere_is_one_line_with_every_place_tried(tmp_path: Path) -> None:
    searched = (tmp_path / "opt" / "rocm", tmp_path / "opt" / "rocm-therock", tmp_path / "usr")
    with pytest.raises(ToolchainError) as exc:
        rocm.find(bare_env(), "gfx1151", searched=searched)
    assert exc.value.message == rocm.NO_ROCM.format(profile="gfx1151", where=", ".join(str(p) for p in searched), therock=rocm.THEROCK)
    assert "\n" not in exc.value.message


def test_a_rocm_path_that_does_not_exist_says_so(tmp_path: Path) -> None:
    with pytest.raises(ToolchainError, match="^" + re.escape(rocm.ROCM_PATH_MISSING.format(profile="gfx1151", root=tmp_path / "nowhere"))):
        detect(GFX1151, PIN, {**bare_env(), "ROCM_PATH": str(tmp_path / "nowhere")})
