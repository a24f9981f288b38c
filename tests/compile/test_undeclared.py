"""A -D the fork never declared stops the configure, naming the closest declared option, for every profile.

CMake's "not used" warning cannot see a GGML_ flag: ggml reads every variable (ROCmFPX c14872f,
ggml/CMakeLists.txt line 377), and so does the fixture's ggml/ggml.cmake. The cache still tells."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from ci import cli
from ci.compile import stage, undeclared
from ci.compile.cmake import UNDECLARED_FLAGS
from ci.compile.flags import FROM_ONE_OFF
from ci.schema import DID_YOU_MEAN
from tests.support.build import build_cpu, manifest, run_binary
from tests.support.messages import said
from tests.support.project import Project

CACHE = """# This is the CMakeCache file.
CMAKE_BUILD_TYPE:STRING=Release
CMAKE_C_COMPILER_LAUNCHER:UNINITIALIZED=ccache
GGML_HIP:BOOL=ON
GGML_HIP_FORCE_MMQ:BOOL=ON
GGML_HIP_ROCMI4_W4A4:UNINITIALIZED=ON
GPU_TARGETS:UNINITIALIZED=gfx1151
LLAMA_BUILD_WEBUI:BOOL=OFF
//INTERNAL cache entries
GGML_HIP_MMQ_MFMA:INTERNAL=ON
"""


def test_an_uninitialized_flag_is_named_with_the_closest_declared_option() -> None:
    flags = (
        "-DGGML_HIP=ON",
        "-DGGML_HIP_FORCE_MQM=ON",
        "-DGGML_HIP_ROCMI4_W4A4=ON",
        "-DGPU_TARGETS=gfx1151",
        "-DCMAKE_C_COMPILER_LAUNCHER=ccache",
    )
    text = CACHE + "GGML_HIP_FORCE_MQM:UNINITIALIZED=ON\n"
    mmq = DID_YOU_MEAN.format(choice="GGML_HIP_FORCE_MMQ")
    assert undeclared.undeclared(text, flags) == [
        undeclared.UNDECLARED.format(flag="-DGGML_HIP_FORCE_MQM=ON", name="GGML_HIP_FORCE_MQM", suggestion=mmq),
        # no declared option is close to it: GGML_HIP_FORCE_MMQ had been suggested, alike only in GGML_HIP_
        undeclared.UNDECLARED.format(flag="-DGGML_HIP_ROCMI4_W4A4=ON", name="GGML_HIP_ROCMI4_W4A4", suggestion=""),
    ]


# ggml's options at ROCmFPX c14872f that the misspellings below were once compared with
GGML_OPTIONS = ("GGML_AVX", "GGML_AVX2", "GGML_CUDA", "GGML_FMA", "GGML_HIP_ROCWMMA_FATTN", "GGML_LTO", "GGML_NATIVE", "GGML_OPENMP")


@pytest.mark.parametrize(
    ("name", "closest"),
    [
        ("GGML_TYPO_FLAG", ""),  # GGML_FMA had been suggested: the shared GGML_ made them look alike (difflib ratio 0.64)
        ("GGML_HIP_ROCMI4_W4A4", ""),  # GGML_HIP_ROCWMMA_FATTN had been (0.71, docs/build.md): another option altogether
        ("GGML_XYZ", ""),
        ("GGML_NATVE", "GGML_NATIVE"),
        ("GGML_CUAD", "GGML_CUDA"),
        ("GGML_OPNEMP", "GGML_OPENMP"),
        ("GGML_AVX3", "GGML_AVX"),
    ],
)
def test_only_a_close_name_is_suggested(name: str, closest: str) -> None:
    text = "".join(f"{option}:BOOL=OFF\n" for option in GGML_OPTIONS) + f"{name}:UNINITIALIZED=ON\n"
    suggestion = DID_YOU_MEAN.format(choice=closest) if closest else ""
    found = undeclared.UNDECLARED.format(flag=f"-D{name}=ON", name=name, suggestion=suggestion)
    assert undeclared.undeclared(text, (f"-D{name}=ON",)) == [found]


def test_a_declared_flag_cmakes_own_variables_and_the_hip_targets_ggml_reads_pass() -> None:
    assert (
        undeclared.undeclared(CACHE, ("-DGGML_HIP=ON", "-DGPU_TARGETS=gfx1151", "-DCMAKE_C_COMPILER_LAUNCHER=ccache", "-DNOT_IN_CACHE=1"))
        == []
    )


def test_a_misspelled_ggml_flag_stops_the_fixtures_configure_which_cmake_itself_does_not_warn_about(build_project: Project) -> None:
    r = build_cpu(build_project, "-DGGML_FIXTURE_FSAT=ON")
    assert r.code == 2, r.err
    fast = DID_YOU_MEAN.format(choice="GGML_FIXTURE_FAST")
    found = undeclared.UNDECLARED.format(flag="-DGGML_FIXTURE_FSAT=ON", name="GGML_FIXTURE_FSAT", suggestion=fast)
    assert r.err == cli.ERROR.format(message=UNDECLARED_FLAGS.format(flags=found, where=FROM_ONE_OFF)) + "\n"
    log = (build_project.root / "build" / "cpu" / "build.log").read_text()
    assert "Manually-specified variables were not used" not in log
    assert not (build_project.root / "build" / "cpu" / "build.json").exists()  # there was no build before
    # the declared one builds, and the next build configures again (the failed configure left no stamp)
    r = build_cpu(build_project, "-DGGML_FIXTURE_FAST=ON")
    assert r.code == 0, r.err
    assert "-DGGML_FIXTURE_FAST=ON" in manifest(build_project)["flags"]


def test_a_refused_flag_keeps_the_last_good_build(build_project: Project) -> None:
    """A misspelled -D is refused after the configure, before anything is compiled: the binaries are still the last
    good build's, and so is its build.json (it was deleted, and the gates had nothing to test until a rebuild)."""
    assert build_cpu(build_project).code == 0
    build_json = build_project.root / "build" / "cpu" / "build.json"
    before = build_json.read_bytes()
    r = build_cpu(build_project, "-DGGML_FIXTURE_FSAT=ON")
    assert r.code == 2, r.err
    assert build_json.read_bytes() == before
    assert run_binary(build_project, "llama-server") == "llama-server fixture\n"
    r = build_cpu(build_project)  # the same build as before the refused one: nothing to do
    assert r.code == 0, r.err
    assert said(stage.UP_TO_DATE, r.out, key=manifest(build_project)["key"][:12])
    assert build_json.read_bytes() == before


def test_a_refused_runs_other_flags_do_not_reach_a_later_build(build_project: Project) -> None:
    """The refused configure wrote FIXTURE_GREETING=hello into CMakeCache.txt; the next configure, without it, kept it,
    and built binaries that its build.json did not describe."""
    assert build_cpu(build_project).code == 0
    assert build_cpu(build_project, "-DFIXTURE_GREETING=hello", "-DGGML_FIXTURE_FSAT=ON").code == 2
    r = build_cpu(build_project, "-DGGML_FIXTURE_FAST=ON")  # configures again
    assert r.code == 0, r.err
    assert run_binary(build_project, "llama-server") == "llama-server fixture\n"


FORK_GIT = os.environ.get("ONEBIT_ROCMFPX_GIT", "")  # a clone of ciru-ai/ROCmFPX that holds c14872f
FORK_COMMIT = "c14872f8407f5b0642f3c395439b929021df753a"


@pytest.mark.slow
@pytest.mark.skipif(not FORK_GIT, reason="ONEBIT_ROCMFPX_GIT names no clone of ciru-ai/ROCmFPX (docs/build.md)")
def test_the_real_forks_cpu_configure_keeps_a_misspelled_ggml_flag_uninitialized(tmp_path: Path) -> None:
    src, build = tmp_path / "src", tmp_path / "build"
    src.mkdir()
    archive = subprocess.run(
        ["git", "--git-dir", FORK_GIT, "archive", FORK_COMMIT, "--", ".", ":!models", ":!docs"], capture_output=True, check=True
    ).stdout
    subprocess.run(["tar", "-x", "-C", str(src)], input=archive, check=True)
    flags = (
        "-DLLAMA_BUILD_TESTS=ON",
        "-DLLAMA_BUILD_SERVER=ON",
        "-DLLAMA_BUILD_WEBUI=OFF",
        "-DGGML_NATIVE=OFF",
        "-DGGML_NATVE=ON",
        "-DLLAMA_TYPO_FLAG=ON",
    )
    cmake = shutil.which("cmake")
    assert cmake is not None
    done = subprocess.run([cmake, "-S", str(src), "-B", str(build), "-G", "Ninja", *flags], capture_output=True, text=True, check=True)
    warning = done.stderr[done.stderr.find("Manually-specified variables were not used") :]
    # CMake's own warning names the LLAMA_ flag and is blind to the GGML_ one
    assert "LLAMA_TYPO_FLAG" in warning
    assert "GGML_NATVE" not in warning
    assert undeclared.check_cache(build, flags) == [
        undeclared.UNDECLARED.format(flag="-DGGML_NATVE=ON", name="GGML_NATVE", suggestion=DID_YOU_MEAN.format(choice="GGML_NATIVE")),
        undeclared.UNDECLARED.format(flag="-DLLAMA_TYPO_FLAG=ON", name="LLAMA_TYPO_FLAG", suggestion=""),  # nothing close to suggest
    ]
