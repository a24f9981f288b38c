"""Compile evidence for a HIP build where no AMD GPU is: the HIP units from build.ninja, whether llama-server lists a
ROCm device, the ``compile`` record, and ship still waiting for the device gates.

The build directory and llama-server here are stand-ins (build.ninja lines as CMake 4.3 writes them for the gfx1151
build of ciru-ai/ROCmFPX c14872f, a script that answers --list-devices): this machine cannot compile HIP. The real
record, written in a Debian unstable root, is in docs/build.md."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ci.commands import bump_pin
from ci.commands.bump_pin import compile_verdict
from ci.commands.job import Job
from ci.compile import cmake, rocm
from ci.compile.manifest import Artifact, Manifest
from ci.compile.stage import CurrentBuild
from ci.gates.registry import always
from ci.gates.results import Status
from ci.release import compile_record, ledger, ship
from ci.release import standings as release_standings
from tests.support.messages import pattern
from tests.support.project import Project

SRC = "/src/onebit-ci/third_party/llama.cpp-rocmfpx/ggml/src/ggml-cuda"
UNITS = (
    (f"{SRC}/acc.cu", "ggml/src/ggml-hip/CMakeFiles/ggml-hip.dir/__/ggml-cuda/acc.cu.o"),
    (f"{SRC}/gated_delta_net.cu", "ggml/src/ggml-hip/CMakeFiles/ggml-hip.dir/__/ggml-cuda/gated_delta_net.cu.o"),
    (
        f"{SRC}/template-instances/mmq-instance-q4_0_rocmfp4.cu",
        "ggml/src/ggml-hip/CMakeFiles/ggml-hip.dir/__/ggml-cuda/template-instances/mmq-instance-q4_0_rocmfp4.cu.o",
    ),
    (
        "/src/onebit-ci/third_party/llama.cpp-rocmfpx/ggml/rocmfp4/rocmfp4_hip.cu",
        "ggml/src/ggml-hip/CMakeFiles/ggml-hip.dir/__/__/rocmfp4/rocmfp4_hip.cu.o",
    ),
)


def stand_in_build(tmp_path: Path, devices: str, compiled: int = len(UNITS)) -> CurrentBuild:
    build_dir = tmp_path / "build" / "gfx1151"
    lines = [
        f"build {obj}: HIP_COMPILER__ggml-hip_unscanned_Release {src} || cmake_object_order_depends_target_ggml-hip" for src, obj in UNITS
    ]
    lines.append("build ggml/src/CMakeFiles/ggml-base.dir/ggml.c.o: C_COMPILER__ggml-base_unscanned_Release /src/ggml/src/ggml.c")
    (build_dir / "bin").mkdir(parents=True)
    (build_dir / "build.ninja").write_text("\n".join(lines) + "\n")
    for _, obj in UNITS[:compiled]:
        (build_dir / obj).parent.mkdir(parents=True, exist_ok=True)
        (build_dir / obj).write_bytes(b"\x7fELF")
    server = build_dir / "bin" / "llama-server"
    server.write_text(f"#!/bin/sh\necho 'Available devices:'\n{devices}\n")
    server.chmod(0o755)
    manifest = Manifest(
        key="k" * 64,
        configure_key="c" * 64,
        profile="gfx1151",
        device="ROCm0",
        pin={"commit": "c" * 40},
        patches={"digest": "d" * 64, "names": []},
        flags=(),
        toolchain={"hip": "/usr/lib/llvm-21/bin/clang++ 21.1.8"},
        build_type="Release",
        targets=("llama-server",),
        binaries={"llama-server": Artifact.of(build_dir, server)},
        seconds=2812.5,
    )
    cmake.WholeCompile(seconds=2812.5, steps=len(UNITS), built_at=manifest.built_at).write(build_dir)
    return CurrentBuild(manifest, build_dir)


def test_stand_in_build_without_a_rocm_device_is_recorded_as_compiled_with_the_forks_units(tmp_path: Path) -> None:
    build = stand_in_build(tmp_path, "true")
    assert compile_record.lacks_device(build, "hip")
    r = compile_record.result(build)
    assert r.status is Status.PASSED
    assert r.summary == compile_record.COMPILED.format(
        profile="gfx1151",
        compiler="/usr/lib/llvm-21/bin/clang++ 21.1.8",
        seconds=2812.5,
        units=4,
        own=3,
        names="gated_delta_net.cu, mmq-instance-q4_0_rocmfp4.cu, rocmfp4_hip.cu",
    )
    assert dict(r.counts) == {"hip_units": 4, "fork_units": 3, "missing": 0}
    assert dict(r.properties)["compiler"] == "/usr/lib/llvm-21/bin/clang++ 21.1.8"


def test_stand_in_build_with_a_rocm_device_runs_the_device_gates(tmp_path: Path) -> None:
    build = stand_in_build(tmp_path, "echo '  ROCm0: AMD Radeon 8060S Graphics (gfx1151) (98304 MiB, 97000 MiB free)'")
    assert not compile_record.lacks_device(build, "hip")
    assert not compile_record.lacks_device(build, "cpu")


def test_stand_in_build_with_a_missing_object_fails_the_compile_record(tmp_path: Path) -> None:
    r = compile_record.result(stand_in_build(tmp_path, "true", compiled=3))
    assert r.status is Status.FAILED
    assert r.problems == (compile_record.UNIT_NOT_COMPILED.format(source=UNITS[3][0], object=UNITS[3][1]),)


def test_the_no_device_line_says_what_the_device_gates_need() -> None:
    assert compile_record.no_device_line("gfx1151", "ROCm0", 7) == compile_record.NO_DEVICE.format(
        device="ROCm0", profile="gfx1151", line=7, board=compile_record.STRIX_HALO
    )


def test_ship_still_wants_the_device_gates_after_a_compile_record_stand_in(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ONEBIT_LEDGER_KEY", raising=False)
    build = stand_in_build(tmp_path, "true")
    path = tmp_path / "results" / "ledger.jsonl"
    path.parent.mkdir()
    context = ledger.BuildContext(build.key, "c" * 40, "d" * 64, "gfx1151", "ROCm0")
    ledger.append(path, compile_record.result(build), context, key=b"")
    standings = release_standings.standings(ledger.read(path, b""), build.key, always())
    assert compile_record.GATE not in always()
    assert [s.gate for s in standings] == list(always())
    assert not any(s.state is release_standings.Standing.PASSED for s in standings)
    # and its refusal says where they can run: gpu_tests here runs none of them (issue 37)
    refused = ship.refusal(ship.ShipCheck(build.key, build.manifest, standings, ()))
    assert refused.message.endswith(ship.GATES_NEED_A_DEVICE.format(device="ROCm0", profile="gfx1151", board=compile_record.STRIX_HALO))


def test_a_bump_report_gets_the_compile_verdict_of_the_new_pin(build_project: Project) -> None:
    # the cpu profile of the fixture fork, compiled for real: the session asks for gfx1151, whose toolchain is not here
    report = build_project.root / "build" / "bump-report.md"
    report.parent.mkdir(parents=True, exist_ok=True)
    report.write_text("## Bump to c14872f\n\nthe report\n")
    said: list[str] = []
    verdict = compile_verdict(Job.resolve(build_project.root), report, said.append, profile="cpu", remote=str(build_project.fork.path))
    key = json.loads((build_project.root / "build" / "cpu" / "build.json").read_text())["key"]
    assert verdict is not None
    assert pattern(bump_pin.COMPILED_IN + bump_pin.BUILD_KEY, profile="cpu", key=key[:12], up_to_date="").fullmatch(verdict), verdict
    heading = bump_pin.COMPILE_HEADING.format(profile="cpu")
    assert report.read_text() == f"## Bump to c14872f\n\nthe report\n\n{heading}\n\n{verdict}\n"
    assert said[-1] == bump_pin.COMPILE_SAID.format(profile="cpu", verdict=verdict)


def test_no_toolchain_no_verdict_and_the_report_untouched(build_project: Project, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("ROCM_PATH", str(tmp_path / "no-rocm"))
    report = build_project.root / "bump-report.md"
    report.write_text("the report\n")
    said: list[str] = []
    assert compile_verdict(Job.resolve(build_project.root), report, said.append) is None
    assert report.read_text() == "the report\n"
    missing = rocm.ROCM_PATH_MISSING.format(profile="gfx1151", root=tmp_path / "no-rocm")
    assert said == [bump_pin.NO_COMPILE_VERDICT.format(profile="gfx1151", reason=missing)]


def test_a_cpu_refusal_names_no_device() -> None:
    standings = (release_standings.GateStanding("route", release_standings.Standing.MISSING, release_standings.NO_RECORD),)
    manifest = Manifest(key="k" * 64, configure_key="c" * 64, profile="cpu", device="CPU", pin={}, patches={}, flags=(), toolchain={}, build_type="Release", targets=(), binaries={}, seconds=1.0)
    refused = ship.refusal(ship.ShipCheck("k" * 64, manifest, standings, ()))
    assert refused.message == ship.REFUSED.format(failing=1, total=1, gates="route")
