from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from ci import cli
from ci.commands import gpu_tests, main_job
from ci.commands import ship as ship_command
from ci.compile import profiles, rocm, stage
from ci.gates.perf import judge as perf
from ci.pin import verify
from ci.release import ledger, records
from tests.support.build import count_calls, manifest, stand_in_flags, stand_in_server_flags
from tests.support.messages import pattern, said
from tests.support.project import Project


def test_without_the_toolchain_it_verifies_and_runs_the_no_gpu_gate(build_project: Project, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ROCM_PATH", str(build_project.root / "no-rocm-here"))
    r = build_project.ci("main-job", "--profile", "gfx1151")
    assert r.code == 0, r.err
    assert pattern(verify.VERIFIED, reference="ROCmFPX#2", branch="main").match(r.out)
    missing = rocm.ROCM_PATH_MISSING.format(profile="gfx1151", root=build_project.root / "no-rocm-here")
    assert main_job.NO_TOOLCHAIN.format(profile="gfx1151", missing=missing) in r.out
    assert main_job.ROUTE_ONLY in r.out
    assert "route  passed" in r.out
    (record,) = ledger.read(build_project.root / "build" / "results" / "ledger.jsonl").records
    assert (record.gate, record.verdict, record.build_key) == ("route", "passed", "")


def test_an_unknown_profile_from_the_environment_is_named_as_the_variable_before_anything_runs(
    build_project: Project, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Before: '--profile junk: unknown profile', though no --profile was given, after verify_pin had printed OK."""
    monkeypatch.setenv(main_job.PROFILE_VAR, "junk")
    r = build_project.ci("main-job")
    known = ", ".join(profiles.PROFILES)
    assert (r.code, r.out) == (2, "")
    assert r.err == cli.ERROR.format(message=profiles.UNKNOWN_PROFILE.format(given="ONEBIT_PROFILE=junk", suggestion="", known=known)) + "\n"
    r = build_project.ci("main-job", "--profile", "cdua")  # the option, when given, is what is named
    assert r.err.startswith(cli.ERROR.format(message=profiles.GIVEN_AS.format(name="cdua")))


def test_with_the_toolchain_it_builds_gates_and_checks_shipping(build_project: Project) -> None:
    r = build_project.ci("main-job", "--profile", "cpu", "--remote", str(build_project.fork.path))
    assert said(stage.BUILDING, r.out, profile="cpu")
    built = manifest(build_project)
    on_build = gpu_tests.ON_BUILD.format(
        profile="cpu", key=built["key"][:12], pin=built["pin"]["commit"][:7], patches=built["patches"]["digest"][:12], device=built["device"]
    )
    assert on_build in r.out
    # the fixture's test-backend-ops is no llama.cpp, so the real gate fails and nothing may ship
    assert r.code == 7
    assert records.GATES_FAILED.format(failed=2, total=3, gates="backend_ops, equivalence") in r.err


PERF = """\
  perf:
    tiny:
      - check: "tokens_per_step(draft, code) >= 1.5"
        measured: "the stand-in server's toy drafter, a third of its drafts wrong"
      - check: "acceptance(draft) >= 0.2"
        measured: "the same"
      - check: "decode(draft, code) / decode(base, code) >= 1.1"
        measured: "the same: its timings are a function of the counts"
"""


def test_the_main_job_is_the_whole_pipeline_with_perf_declared_on_a_stand_in_server(
    make_build_project: Callable[..., Project], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """`nox` on a box with the toolchain: build, every gate ship requires (perf too, since pins.yaml declares checks),
    then ship writes the wheel. A stand-in llama-server (the fast tier has no real one; the slow test below runs the
    real CPU server) and the fixture's test-backend-ops replaying the real CPU one's output."""
    project = make_build_project(pins_extra=PERF)
    project.pins.write_text(project.pins.read_text().replace("GATED_DELTA_NET: 54", "GATED_DELTA_NET: 36"))
    monkeypatch.setenv("ONEBIT_CMAKE_ARGS", stand_in_server_flags(tmp_path / "stand-in"))
    calls = count_calls(monkeypatch, "ci.pin.pins.load", "ci.compile.cmake.build_key", "ci.pin.verify.verify", "ci.compile.toolchain.detect")
    r = project.ci("main-job", "--profile", "cpu", "--remote", str(project.fork.path))
    assert r.code == 0, r.out + r.err
    # the job resolved once: pins.yaml parsed once, the pin verified once, the toolchain found once, the key derived once
    assert calls == {"ci.pin.pins.load": 1, "ci.compile.cmake.build_key": 1, "ci.pin.verify.verify": 1, "ci.compile.toolchain.detect": 1}
    assert records.ALL_PASSED.format(total=4) in r.out
    assert said(perf.FIGURE, r.out, check="tokens_per_step(draft, code)", floor=1.5)  # each perf check's figures on the console
    done = ledger.read(project.root / "build" / "results" / "ledger.jsonl").records
    key = manifest(project)["key"]
    assert [(rec.gate, rec.verdict) for rec in done] == [("route", "passed"), ("backend_ops", "passed"), ("equivalence", "passed"), ("perf", "passed"), ("ship", "passed")]
    assert {rec.build_key for rec in done} == {key}
    (wheel,) = (project.root / "dist").glob("*.whl")
    assert f"+g{manifest(project)['pin']['commit'][:7]}.b{key[:8]}" in wheel.name


@pytest.mark.slow
def test_the_main_job_passes_end_to_end_with_a_stand_in_test_backend_ops(make_build_project: Callable[..., Project], monkeypatch: pytest.MonkeyPatch) -> None:
    """Build, every gate and the ship check on the fixture fork: the real route tests, the real CPU llama-server
    behind the fixture's llama-server, and the fixture's test-backend-ops replaying the real CPU one's output with
    the build commit it was configured at (a stand-in: no real test-backend-ops reports the fixture's commit)."""
    project = make_build_project()
    project.pins.write_text(project.pins.read_text().replace("GATED_DELTA_NET: 54", "GATED_DELTA_NET: 36"))
    machine = stand_in_flags()
    monkeypatch.setenv("ONEBIT_CMAKE_ARGS", machine)  # the machine's flags reach the build, the gates and ship alike
    r = project.ci("main-job", "--profile", "cpu", "--remote", str(project.fork.path))
    assert r.code == 0, r.out + r.err
    assert records.ALL_PASSED.format(total=3) in r.out
    assert said(ship_command.WROTE.format(path="dist/{file}"), r.out)
    done = ledger.read(project.root / "build" / "results" / "ledger.jsonl").records
    assert [(rec.gate, rec.verdict) for rec in done] == [("route", "passed"), ("backend_ops", "passed"), ("equivalence", "passed"), ("ship", "passed")]
    key = manifest(project)["key"]
    assert {rec.build_key for rec in done} == {key}
