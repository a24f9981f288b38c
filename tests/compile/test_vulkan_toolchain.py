"""The vulkan profile's toolchain: glslc, the headers with their version, the loader; each missing piece one line.

The SDK here is a stand-in (a directory laid out as Debian's packages unpack, with a glslc script that prints what
glslc 2023.2 prints): this machine has no Vulkan SDK, and the real one ran on the H200 (docs/build.md)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from ci.compile import profiles, toolchain
from ci.compile.toolchain import detect
from ci.errors import ToolchainError
from ci.pin.pins import BuildConfig

PIN = BuildConfig(minimums=(("vulkan", "1.3.261"),))
SYSTEM_HAS_VULKAN = any(Path(r, "include/vulkan/vulkan_core.h").is_file() for r in ("/usr", "/usr/local"))


def stand_in_sdk(root: Path, headers: str | None = "1.4.309", glslc: bool = True, loader: bool = True, hpp: bool = True) -> Path:
    usr = root / "usr"
    if headers is not None:
        major, minor, patch = headers.split(".")
        inc = usr / "include" / "vulkan"
        inc.mkdir(parents=True)
        (inc / "vulkan_core.h").write_text(
            f"#define VK_HEADER_VERSION {patch}\n"
            f"#define VK_HEADER_VERSION_COMPLETE VK_MAKE_API_VERSION(0, {major}, {minor}, VK_HEADER_VERSION)\n"
        )
        if hpp:
            (inc / "vulkan.hpp").write_text("// the C++ bindings\n")
    if loader:
        lib = usr / "lib" / "x86_64-linux-gnu"
        lib.mkdir(parents=True)
        (lib / "libvulkan.so.1.3.239").write_bytes(b"\x7fELF")
        (lib / "libvulkan.so.1").symlink_to("libvulkan.so.1.3.239")
        (lib / "libvulkan.so").symlink_to("libvulkan.so.1")
    if glslc:
        (usr / "bin").mkdir(parents=True)
        tool = usr / "bin" / "glslc"
        tool.write_text("#!/bin/sh\necho 'shaderc v2023.2 v2023.2'\necho \"LD_LIBRARY_PATH=$LD_LIBRARY_PATH\" >&2\n")
        tool.chmod(0o755)
    return usr


def env_with(sdk: Path | None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("VULKAN_SDK", "GLSLC")}
    if sdk is not None:
        env["VULKAN_SDK"] = str(sdk)
    return env


def test_stand_in_sdk_is_found_and_handed_to_findvulkan(tmp_path: Path) -> None:
    sdk = stand_in_sdk(tmp_path)
    chain = detect(profiles.get("vulkan"), PIN, env_with(sdk))
    found = {t.role: t for t in chain.tools}
    assert (found["glslc"].version, found["vulkan-headers"].version, found["vulkan-loader"].version) == ("2023.2", "1.4.309", "1.3.239")
    lib = sdk / "lib" / "x86_64-linux-gnu"
    assert f"-DVulkan_INCLUDE_DIR={sdk / 'include'}" in chain.cmake_flags
    assert f"-DVulkan_LIBRARY={lib / 'libvulkan.so'}" in chain.cmake_flags
    assert f"-DVulkan_GLSLC_EXECUTABLE={sdk / 'bin' / 'glslc'}" in chain.cmake_flags
    # the SDK's libraries (glslc's libshaderc) are on the build's library path
    assert str(lib) in dict(chain.env)["LD_LIBRARY_PATH"].split(os.pathsep)


def test_stand_in_sdk_headers_older_than_the_pins_minimum_are_refused_with_the_way_out(tmp_path: Path) -> None:
    sdk = stand_in_sdk(tmp_path, headers="1.3.239")
    with pytest.raises(ToolchainError) as exc:
        detect(profiles.get("vulkan"), PIN, env_with(sdk))
    assert exc.value.message == toolchain.VK_HEADERS_TOO_OLD.format(profile="vulkan", version="1.3.239", include=sdk / "include", minimum="1.3.261")


def test_stand_in_sdk_without_the_cpp_headers_names_them(tmp_path: Path) -> None:
    sdk = stand_in_sdk(tmp_path, hpp=False)
    with pytest.raises(ToolchainError) as exc:
        detect(profiles.get("vulkan"), PIN, env_with(sdk))
    assert exc.value.message == toolchain.VK_NO_CPP_HEADERS.format(profile="vulkan", include=sdk / "include", hint=toolchain.VK_HINT)


@pytest.mark.skipif(SYSTEM_HAS_VULKAN, reason="this machine has Vulkan headers in /usr: nothing is missing")
def test_nothing_there_names_each_missing_piece_on_its_own_line(tmp_path: Path) -> None:
    sdk = tmp_path / "empty"
    sdk.mkdir()
    env = env_with(sdk)
    env["PATH"] = os.pathsep.join(p for p in env["PATH"].split(os.pathsep) if not Path(p, "glslc").exists())
    with pytest.raises(ToolchainError) as exc:
        detect(profiles.get("vulkan"), PIN, env)
    where = f"{sdk}, /usr, /usr/local"
    assert exc.value.message.splitlines() == [
        toolchain.VK_NO_GLSLC.format(profile="vulkan", hint=toolchain.VK_HINT),
        toolchain.VK_NO_HEADERS.format(profile="vulkan", where=where, hint=toolchain.VK_HINT),
        toolchain.VK_NO_LOADER.format(profile="vulkan", where=where),
    ]
