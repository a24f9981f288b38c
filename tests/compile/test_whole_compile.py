"""The compile's own time apart from the last build's (issue 37, item 5): a build of an empty build directory records
how long the whole compile took, later builds keep it, and the compile record says both. After a 3.5 s rebuild
the record had said ``gfx1151 compiled ... in 3.5 s: 152 HIP units``."""

from __future__ import annotations

from pathlib import Path

from ci.compile import cmake
from ci.compile.manifest import Manifest
from ci.compile.stage import CurrentBuild
from ci.gates.results import Status
from ci.release import compile_record
from tests.support.build import BuildFork, add_fixture_patch, build_cpu, manifest
from tests.support.patches import add_to_series, make_patch_text
from tests.support.project import Project

HIP = "/usr/lib/llvm-21/bin/clang++ 21.1.8"
UNIT = ("/src/ggml/src/ggml-cuda/gated_delta_net.cu", "ggml/src/ggml-hip/CMakeFiles/ggml-hip.dir/__/ggml-cuda/gated_delta_net.cu.o")


def hip_build(tmp_path: Path, seconds: float, built_at: str) -> CurrentBuild:
    """A gfx1151 build directory as CMake's Ninja generator leaves it, one HIP unit compiled (this machine has no HIP)."""
    build_dir = tmp_path / "gfx1151"
    source, obj = UNIT
    (build_dir / obj).parent.mkdir(parents=True)
    (build_dir / obj).write_bytes(b"\x7fELF")
    (build_dir / "build.ninja").write_text(f"build {obj}: HIP_COMPILER__ggml-hip_unscanned_Release {source} || order\n")
    manifest = Manifest(
        key="k" * 64,
        configure_key="c" * 64,
        profile="gfx1151",
        device="ROCm0",
        pin={"commit": "c" * 40},
        patches={"digest": "d" * 64, "names": []},
        flags=(),
        toolchain={"hip": HIP},
        build_type="Release",
        targets=(),
        binaries={},
        seconds=seconds,
        built_at=built_at,
    )
    return CurrentBuild(manifest, build_dir)


def compiled(seconds: float) -> str:
    return compile_record.COMPILED.format(profile="gfx1151", compiler=HIP, seconds=seconds, units=1, own=1, names="gated_delta_net.cu")


def test_after_a_rebuild_the_record_says_the_whole_compiles_time_and_the_last_builds(tmp_path: Path) -> None:
    build = hip_build(tmp_path, 3.5, "2026-12-05T10:00:00Z")
    cmake.WholeCompile(seconds=3288.0, steps=449, built_at="2026-12-05T08:00:00Z").write(build.build_dir)
    r = compile_record.result(build)
    assert r.status is Status.PASSED
    assert r.summary == compiled(3288.0) + compile_record.LAST_BUILD.format(seconds=3.5)
    assert dict(r.metrics) == {"build_seconds": 3.5, "compile_seconds": 3288.0}
    assert (dict(r.properties)["compile_steps"], dict(r.properties)["compiled_at"]) == ("449", "2026-12-05T08:00:00Z")


def test_the_build_that_was_the_whole_compile_is_said_once(tmp_path: Path) -> None:
    build = hip_build(tmp_path, 3288.0, "2026-12-05T08:00:00Z")
    cmake.WholeCompile(seconds=3288.0, steps=449, built_at="2026-12-05T08:00:00Z").write(build.build_dir)
    assert compile_record.result(build).summary == compiled(3288.0)


def test_a_build_directory_whose_whole_compile_was_not_timed_claims_no_compile_time(tmp_path: Path) -> None:
    """Made before the compile's time was kept, or its first compile stopped and went on in a later build."""
    build = hip_build(tmp_path, 3.5, "2026-12-05T10:00:00Z")
    r = compile_record.result(build)
    assert r.summary == compile_record.COMPILED_UNTIMED.format(
        profile="gfx1151", compiler=HIP, units=1, own=1, names="gated_delta_net.cu", seconds=3.5
    )
    assert dict(r.metrics) == {"build_seconds": 3.5}


def test_a_damaged_record_of_the_whole_compile_is_no_time(tmp_path: Path) -> None:
    build = hip_build(tmp_path, 3.5, "2026-12-05T10:00:00Z")
    (build.build_dir / cmake.WHOLE_COMPILE).write_text("{not json")
    assert cmake.whole_compile(build.build_dir) is None
    assert compile_record.result(build).summary.startswith(compiled(0).split(" in ")[0] + ":")


def test_the_first_build_of_a_directory_is_the_whole_compile_and_a_rebuild_keeps_it(build_project: Project, build_fork: BuildFork) -> None:
    assert build_cpu(build_project).code == 0
    build_dir = build_project.root / "build" / "cpu"
    first = manifest(build_project)
    whole = cmake.whole_compile(build_dir)
    assert whole is not None
    assert (round(whole.seconds, 1), whole.built_at) == (first["seconds"], first["built_at"])
    assert whole.steps >= 5  # the library, two executables, their objects
    add_fixture_patch(build_project, build_fork, "hello.patch", "tools/server/server.cpp", "llama-server %s", "llama-server says %s")
    assert build_cpu(build_project).code == 0
    assert cmake.whole_compile(build_dir) == whole  # a rebuild is not the whole compile
    assert manifest(build_project)["built_at"] >= first["built_at"]


def test_a_first_compile_that_failed_leaves_no_whole_compile_time(build_project: Project, build_fork: BuildFork) -> None:
    broken = {"tools/server/server.cpp": "int main() { this is not C++ }\n"}
    add_to_series(build_project.root, "broken.patch", make_patch_text(build_fork.builder, build_fork.f0, broken))
    assert build_cpu(build_project).code == 6
    assert cmake.whole_compile(build_project.root / "build" / "cpu") is None
