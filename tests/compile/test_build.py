from __future__ import annotations

import errno
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from ci import cli, errors, schema
from ci.compile import cmake, flags, profiles, rocm, stage, toolchain
from ci.compile.manifest import DIFFERS, build_key
from ci.compile.toolchain import Tool, Toolchain, detect
from ci.files import sha256_file
from ci.pin.pins import NOT_A_CMAKE_FLAG, BuildConfig, parse, target_problem
from tests.support.build import BuildFork, add_fixture_patch, build_cpu, count_calls, manifest, run_binary
from tests.support.messages import pattern, said
from tests.support.patches import add_to_series, make_patch_text
from tests.support.processes import live_in_group
from tests.support.project import Project, pins_text

SRC = Path("/src/llama.cpp-rocmfpx")
OUT = Path("/out")


def tools(*extra: Tool) -> Toolchain:
    base = (Tool("cmake", "/usr/bin/cmake", "3.28.3"), Tool("ninja", "/usr/bin/ninja", "1.11.1"))
    return Toolchain(base + extra, ("-DCMAKE_MAKE_PROGRAM=/usr/bin/ninja",))


def argv_of(name: str, pins_flags: BuildConfig, toolchain: Toolchain, defines: tuple[str, ...] = (), local: tuple[str, ...] = ()) -> tuple[str, ...]:
    pins = parse(pins_text("a" * 40), Path("pins.yaml"))
    pins = type(pins)(**{**pins.__dict__, "build": pins_flags})
    profile = profiles.get(name)
    merged = flags.flags_for(profile, pins, local, flags.one_off_flags(defines)).merged
    return cmake.configure_argv(merged, toolchain, SRC, OUT / name, "Release")


HEAD = ("/usr/bin/cmake", "-S", str(SRC), "-G", "Ninja", "-DCMAKE_BUILD_TYPE=Release", "-DCMAKE_MAKE_PROGRAM=/usr/bin/ninja")


def head(name: str) -> tuple[str, ...]:
    return (*HEAD[:3], "-B", str(OUT / name), *HEAD[3:])


PIN_FLAGS = BuildConfig(flags=("-DLLAMA_BUILD_WEBUI=OFF", "-DLLAMA_CURL=OFF"), profile_flags=(("gfx1151", ("-DGGML_HIP_ROCMI4_W4A4=ON",)),))
COMMON = ("-DLLAMA_BUILD_TESTS=ON", "-DLLAMA_BUILD_SERVER=ON")
PIN = ("-DLLAMA_BUILD_WEBUI=OFF", "-DLLAMA_CURL=OFF")
ORIGIN = profiles.EVERY_PROFILE  # every profile's binaries find their libraries by $ORIGIN


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("gfx1151", (*ORIGIN, "-DGGML_HIP=ON", "-DGPU_TARGETS=gfx1151", "-DCMAKE_HIP_ARCHITECTURES=gfx1151", "-DGGML_HIP_FORCE_MMQ=ON", *PIN, "-DGGML_HIP_ROCMI4_W4A4=ON")),
        ("gfx1100", (*ORIGIN, "-DGGML_HIP=ON", "-DGPU_TARGETS=gfx1100", "-DCMAKE_HIP_ARCHITECTURES=gfx1100", "-DGGML_HIP_FORCE_MMQ=ON", *PIN)),
        ("gfx1201", (*ORIGIN, "-DGGML_HIP=ON", "-DGPU_TARGETS=gfx1201", "-DCMAKE_HIP_ARCHITECTURES=gfx1201", "-DGGML_HIP_FORCE_MMQ=ON", *PIN)),
        ("cuda", (*ORIGIN, "-DGGML_CUDA=ON", "-DCMAKE_CUDA_ARCHITECTURES=90", *PIN)),
        ("vulkan", (*ORIGIN, "-DGGML_VULKAN=ON", *PIN)),
        ("cpu", (*ORIGIN, *PIN)),
    ],
)
def test_configure_argv_of_every_profile(name: str, expected: tuple[str, ...]) -> None:
    assert argv_of(name, PIN_FLAGS, tools()) == (*head(name), *COMMON, *expected)


def test_a_define_overrides_in_place_and_the_hip_compiler_is_handed_to_cmake() -> None:
    hip = Toolchain(tools().tools, ("-DCMAKE_MAKE_PROGRAM=/usr/bin/ninja", "-DCMAKE_HIP_COMPILER=/opt/rocm-therock/lib/llvm/bin/clang++"))
    argv = argv_of("cuda", PIN_FLAGS, hip, ("-DCMAKE_CUDA_ARCHITECTURES=89", "-DLLAMA_CURL=ON"))
    assert argv[len(head("cuda")) :] == (
        "-DCMAKE_HIP_COMPILER=/opt/rocm-therock/lib/llvm/bin/clang++",
        *COMMON,
        *ORIGIN,
        "-DGGML_CUDA=ON",
        "-DCMAKE_CUDA_ARCHITECTURES=89",
        "-DLLAMA_BUILD_WEBUI=OFF",
        "-DLLAMA_CURL=ON",
    )


def test_the_key_separates_configure_from_build_parts() -> None:
    ident = tools().identity()
    a = build_key("cpu", COMMON, ident, "Release", "a" * 40, "s1", ("llama-server",))
    b = build_key("cpu", COMMON, ident, "Release", "a" * 40, "s2", ("llama-server",))
    c = build_key("cpu", (*COMMON, "-DX=1"), ident, "Release", "a" * 40, "s1", ("llama-server",))
    d = build_key("cpu", COMMON, tools(Tool("cxx", "/usr/bin/g++", "13.2.0")).identity(), "Release", "a" * 40, "s1", ("llama-server",))
    assert a.configure == b.configure
    assert a.full != b.full
    assert a.configure != c.configure
    assert a.configure != d.configure
    assert a.full == build_key("cpu", COMMON, ident, "Release", "a" * 40, "s1", ("llama-server",)).full
    # the pin and a series that changes ggml/ are baked in at configure time (ggml's build commit)
    assert a.configure != build_key("cpu", COMMON, ident, "Release", "b" * 40, "s1", ("llama-server",)).configure
    assert a.configure != build_key("cpu", COMMON, ident, "Release", "a" * 40, "s1", ("llama-server",), ggml_dirty=True).configure


# -- real builds of the fixture project with the cpu profile -------------------------------------------------


def test_a_cpu_build_compiles_for_real_and_writes_the_manifest(build_project: Project) -> None:
    r = build_cpu(build_project)
    assert r.code == 0, r.err
    m = manifest(build_project)
    assert stage.BUILDING.format(profile="cpu", key=m["key"][:12], reasons=cmake.NEVER_BUILT) in r.out
    assert cmake.NEVER_BUILT in r.out
    assert said(cmake.CONFIGURE_DONE, r.out)
    assert said(cmake.PROGRESS, r.out)  # ninja's progress
    assert said(stage.STEP, r.out, step=stage.STEP_COMPILE, state=stage.STEP_DONE)
    assert m["profile"] == "cpu"
    assert m["device"] == "CPU"
    assert m["pin"]["commit"] == build_project.gitlink()
    assert set(m["binaries"]) == {"test-backend-ops", "llama-server"}
    assert set(m["libraries"]) == {"libggml.so"}
    assert m["toolchain"]["cmake"].endswith(("3.25.1", m["toolchain"]["cmake"].split()[-1]))
    assert "-DLLAMA_BUILD_TESTS=ON" in m["flags"]
    assert run_binary(build_project, "test-backend-ops") == "test-backend-ops fixture 42\n"
    assert run_binary(build_project, "llama-server") == "llama-server fixture\n"
    assert len(pattern(cmake.LOGGED_COMMAND).findall((build_project.root / "build" / "cpu" / "build.log").read_text())) == 2


def test_an_unchanged_key_is_a_no_op_that_says_why(build_project: Project, monkeypatch: pytest.MonkeyPatch) -> None:
    assert build_cpu(build_project).code == 0
    log_before = (build_project.root / "build" / "cpu" / "build.log").read_bytes()
    calls = count_calls(monkeypatch, "ci.pin.pins.load", "ci.compile.cmake.build_key", "ci.pin.verify.verify")
    r = build_cpu(build_project)
    assert r.code == 0, r.err
    assert calls == {"ci.pin.pins.load": 1, "ci.compile.cmake.build_key": 1, "ci.pin.verify.verify": 1}  # the job, resolved once
    m = manifest(build_project)
    known = {"key": m["key"][:12], "pin": m["pin"]["commit"][:7], "patches": m["patches"]["digest"][:12], "profile": "cpu"}
    assert said(stage.UP_TO_DATE, r.out, **known, manifest="build/cpu/build.json", binaries=2, libraries=1)
    assert "configure:" not in r.out
    assert (build_project.root / "build" / "cpu" / "build.log").read_bytes() == log_before


def test_a_patch_change_rebuilds_without_configuring_again(build_project: Project, build_fork: BuildFork) -> None:
    assert build_cpu(build_project).code == 0
    before = manifest(build_project)
    add_fixture_patch(build_project, build_fork, "hello.patch", "tools/server/server.cpp", "llama-server %s", "llama-server says %s")
    r = build_cpu(build_project)
    assert r.code == 0, r.err
    assert cmake.KEY_PART_CHANGED.format(part="patches") in r.out
    assert cmake.CONFIGURE_REUSED in r.out
    after = manifest(build_project)
    assert after["key"] != before["key"]
    assert after["configure_key"] == before["configure_key"]
    assert after["patches"]["names"] == ["hello.patch"]
    assert run_binary(build_project, "llama-server") == "llama-server says fixture\n"


def test_a_patch_to_ggml_configures_again_for_its_build_commit(build_project: Project, build_fork: BuildFork) -> None:
    assert build_cpu(build_project).code == 0
    before = manifest(build_project)
    add_fixture_patch(build_project, build_fork, "answer.patch", "ggml/ggml.c", "return 42", "return 43")
    r = build_cpu(build_project)
    assert r.code == 0, r.err
    assert cmake.KEY_PART_CHANGED.format(part="ggml_dirty") in r.out
    assert said(cmake.CONFIGURE_DONE, r.out)
    assert manifest(build_project)["configure_key"] != before["configure_key"]
    assert run_binary(build_project, "test-backend-ops") == "test-backend-ops fixture 43\n"


def test_a_flag_change_configures_again(build_project: Project) -> None:
    assert build_cpu(build_project).code == 0
    r = build_cpu(build_project, "-DFIXTURE_GREETING=hello")
    assert r.code == 0, r.err
    assert cmake.KEY_PART_CHANGED.format(part="flags") in r.out
    assert said(cmake.CONFIGURE_DONE, r.out)
    assert run_binary(build_project, "llama-server") == "llama-server hello\n"


def test_a_flag_dropped_since_the_last_configure_is_gone_from_the_next(build_project: Project) -> None:
    """CMake keeps a -D in CMakeCache.txt: a build without the flag configured again and kept it, so the binaries said
    hello while build.json's flags did not have it."""
    assert build_cpu(build_project, "-DFIXTURE_GREETING=hello").code == 0
    r = build_cpu(build_project)
    assert r.code == 0, r.err
    assert cmake.KEY_PART_CHANGED.format(part="flags") in r.out
    assert run_binary(build_project, "llama-server") == "llama-server fixture\n"
    assert "FIXTURE_GREETING=hello" not in " ".join(manifest(build_project)["flags"])


def test_a_replaced_binary_is_stale_and_made_again(build_project: Project) -> None:
    assert build_cpu(build_project).code == 0
    server = build_project.root / "build" / "cpu" / "bin" / "llama-server"
    server.write_bytes(server.read_bytes() + b"\0")
    r = build_cpu(build_project)
    assert r.code == 0, r.err
    assert cmake.ARTIFACT_WRONG.format(name="llama-server", problem=DIFFERS) in r.out
    assert run_binary(build_project, "llama-server") == "llama-server fixture\n"
    assert sha256_file(server) == manifest(build_project)["binaries"]["llama-server"]["sha256"]


def test_a_failing_compile_leaves_no_manifest(build_project: Project, build_fork: BuildFork) -> None:
    assert build_cpu(build_project).code == 0
    broken = {"tools/server/server.cpp": "int main() { this is not C++ }\n"}
    add_to_series(build_project.root, "broken.patch", make_patch_text(build_fork.builder, build_fork.f0, broken))
    r = build_cpu(build_project)
    assert r.code == 6
    failed = errors.EXITED.format(program=cmake.STEP_FAILED.format(step="build", program="cmake --build"), status=errors.STATUS.format(code=1))
    assert r.err.endswith(cli.ERROR.format(message=failed) + "\n")
    assert "server.cpp" in r.err  # the tail of the log
    assert stage.FULL_LOG.format(log="build/cpu/build.log") in r.out
    assert not (build_project.root / "build" / "cpu" / "build.json").exists()


def test_a_flag_cmake_does_not_use_is_an_error(make_build_project: Callable[..., Project]) -> None:
    project = make_build_project("build:\n  flags: [-DLLAMA_CURL=OFF]\n")
    r = build_cpu(project)
    assert r.code == 2
    assert cmake.IGNORED_FLAGS.format(flags=cmake.NOT_USED.format(flag="-DLLAMA_CURL=OFF"), where=flags.FROM_PIN) in r.err
    assert not (project.root / "build" / "cpu" / "build.json").exists()


def test_a_toolchain_older_than_the_pins_minimum_is_refused(make_build_project: Callable[..., Project]) -> None:
    project = make_build_project('build:\n  toolchain:\n    cmake: "99.0"\n')
    r = build_cpu(project)
    assert r.code == 5
    assert said(toolchain.TOO_OLD, r.err, role="cmake", minimum="99.0", key="cmake")


def test_a_missing_tool_is_one_line(build_project: Project, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    empty = tmp_path / "empty-bin"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))
    r = build_cpu(build_project)
    assert r.code == 5
    assert r.err == cli.ERROR.format(message=toolchain.NOT_ON_PATH.format(role="cmake", names="cmake", hint=toolchain.INSTALL_CMAKE)) + "\n"


def test_no_rocm_names_what_is_missing_and_how_to_point_at_it(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("ROCM_PATH", str(tmp_path / "no-rocm"))
    with pytest.raises(Exception, match=re.escape(rocm.ROCM_PATH_MISSING.format(profile="gfx1151", root=tmp_path / "no-rocm"))):
        detect(profiles.get("gfx1151"), BuildConfig())
    monkeypatch.delenv("ROCM_PATH")
    monkeypatch.setenv("PATH", os.environ["PATH"].replace("/opt/rocm/bin", ""))
    monkeypatch.setattr("ci.compile.rocm.SEARCHED", (tmp_path / "opt" / "rocm", tmp_path / "usr"))
    if not shutil.which("hipconfig"):
        with pytest.raises(Exception, match=pattern(rocm.NO_ROCM, profile="gfx1151", therock=rocm.THEROCK)):
            detect(profiles.get("gfx1151"), BuildConfig())


def test_an_unknown_profile_suggests_one(build_project: Project) -> None:
    r = build_project.ci("build", "--profile", "gfx1115")
    assert r.code == 2
    suggestion = schema.DID_YOU_MEAN.format(choice="gfx1151")
    assert profiles.UNKNOWN_PROFILE.format(given="--profile gfx1115", suggestion=suggestion, known=", ".join(profiles.PROFILES)) in r.err


def test_ctrl_c_during_the_compile_leaves_no_manifest_and_no_process(build_project: Project) -> None:
    assert build_cpu(build_project).code == 0
    proc = subprocess.Popen(
        [sys.executable, "-m", "ci", "--root", str(build_project.root), "build", "--profile", "cpu", "-DFIXTURE_SLOW=ON"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
        cwd=Path(__file__).parents[2],
    )
    assert proc.stdout is not None
    seen = []
    for line in proc.stdout:
        seen.append(line)
        if said(cmake.CONFIGURE_DONE, line):
            break
    time.sleep(1.0)  # ninja is inside the 60 s sleep target now
    os.killpg(proc.pid, signal.SIGINT)  # what a terminal's Ctrl-C does: the whole foreground group
    rest = proc.communicate(timeout=30)[0]
    assert proc.returncode == 130, "".join(seen) + rest
    assert cli.INTERRUPTED in rest
    assert not (build_project.root / "build" / "cpu" / "build.json").exists()
    assert live_in_group(proc.pid) == []


DEPRECATED = """CMake Warning at CMakeLists.txt:88 (message):
  LLAMA_CUDA is deprecated and will be removed in the future.

  Use GGML_CUDA instead

Call Stack (most recent call first):
  CMakeLists.txt:94 (llama_option_depr)

CMake Warning at CMakeLists.txt:154 (message):
  LLAMA_CURL is deprecated and will be ignored

-- Configuring done
CMake Warning:
  Manually-specified variables were not used by the project:

    GGML_HIPBLAS
    SOMETHING_ELSE

"""


def test_deprecated_and_unused_flags_are_caught_in_real_cmake_output() -> None:
    # the first warning as llama.cpp #8155 quotes it; the second as the ROCmFPX fork's llama_option_depr words it
    flags = ("-DLLAMA_CUDA=ON", "-DLLAMA_CURL=OFF", "-DGGML_HIPBLAS=ON", "-DGGML_CUDA=ON")
    assert cmake.ignored_flags(DEPRECATED, flags) == [
        cmake.DEPRECATED.format(flag="-DLLAMA_CUDA=ON", why="LLAMA_CUDA is deprecated and will be removed in the future. Use GGML_CUDA instead"),
        cmake.DEPRECATED.format(flag="-DLLAMA_CURL=OFF", why="LLAMA_CURL is deprecated and will be ignored"),
        cmake.NOT_USED.format(flag="-DGGML_HIPBLAS=ON"),
    ]


def test_a_full_disk_is_one_line_naming_the_log_and_compiles_nothing(build_project: Project) -> None:
    assert build_cpu(build_project).code == 0
    build_json = build_project.root / "build" / "cpu" / "build.json"
    before = build_json.read_bytes()
    log = build_project.root / "build" / "cpu" / "build.log"
    log.unlink()
    log.symlink_to("/dev/full")  # every write answers ENOSPC, as a full disk does
    r = build_cpu(build_project, "-DFIXTURE_GREETING=again")
    assert r.code == 74
    assert r.err == cli.ERROR.format(message=cli.AT_FILE.format(path=log, reason=os.strerror(errno.ENOSPC))) + "\n"
    # the configure's first line could not be logged: nothing was compiled, and the last good build.json stays
    assert build_json.read_bytes() == before
    assert run_binary(build_project, "llama-server") == "llama-server fixture\n"


@pytest.mark.parametrize("bad", ["=ON", "FOO BAR=1", "NOEQUALS", "X:BOOL"])
def test_a_bad_define_is_refused_before_anything_is_touched(build_project: Project, bad: str) -> None:
    assert build_cpu(build_project).code == 0
    before = (build_project.root / "build" / "cpu" / "build.json").read_bytes()
    r = build_cpu(build_project, "-D", bad)
    assert r.code == 2
    problem = NOT_A_CMAKE_FLAG.format(flag=f"-D{bad}")
    assert r.err.startswith(cli.ERROR.format(message=flags.BAD_FLAG.format(where="-D", problem=problem))), r.err
    assert (build_project.root / "build" / "cpu" / "build.json").read_bytes() == before


def test_a_target_that_is_no_binary_is_refused_before_anything_is_touched(build_project: Project) -> None:
    """--target clean reached cmake --build: it wiped the build and failed only after CMake had run."""
    assert build_cpu(build_project).code == 0
    before = (build_project.root / "build" / "cpu" / "build.json").read_bytes()
    r = build_cpu(build_project, "--target", "clean")
    assert (r.code, r.err) == (2, cli.ERROR.format(message=f"--target clean: {target_problem('clean')}") + "\n")
    assert (build_project.root / "build" / "cpu" / "build.json").read_bytes() == before


def test_a_bad_machine_flag_names_where_it_comes_from(build_project: Project, monkeypatch: pytest.MonkeyPatch) -> None:
    (build_project.root / "cmake-args.local").write_text("# this box\n-DGOOD=1 -D=ON\n")
    r = build_cpu(build_project)
    assert r.code == 2
    problem = NOT_A_CMAKE_FLAG.format(flag="-D=ON")
    assert r.err == cli.ERROR.format(message=flags.BAD_FLAG.format(where="cmake-args.local:2", problem=problem)) + "\n"
    (build_project.root / "cmake-args.local").unlink()
    monkeypatch.setenv("ONEBIT_CMAKE_ARGS", "-DA='unclosed")
    r = build_cpu(build_project)
    assert r.code == 2
    assert r.err == cli.ERROR.format(message=flags.UNSPLITTABLE.format(where="ONEBIT_CMAKE_ARGS", problem="No closing quotation")) + "\n"  # shlex's problem
