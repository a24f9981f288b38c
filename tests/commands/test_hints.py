"""Every next step and every refusal names a command that works on the machine where it is printed (issue 41): after a
bump on a machine without ROCm, ``next: nox -s build gpu_tests`` failed at once (the default profile is gfx1151), and
the toolchain's line suggested a flag bump_pin does not take."""

from __future__ import annotations

from pathlib import Path

import pytest

from ci.commands import bump_pin, job, main_job
from ci.compile import rocm
from tests.support.messages import said
from tests.support.project import Project


@pytest.fixture
def no_rocm(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    missing = tmp_path / "no-rocm-here"
    monkeypatch.setenv("ROCM_PATH", str(missing))
    return missing


def test_a_build_without_its_toolchain_names_a_profile_this_machine_builds(build_project: Project, no_rocm: Path) -> None:
    r = build_project.ci("build", "--profile", "gfx1151", "--remote", str(build_project.fork.path))
    assert r.code == 5
    assert rocm.ROCM_PATH_MISSING.format(profile="gfx1151", root=no_rocm) in r.err
    command = job.SESSION_COMMAND.format(sessions="build", profile="cpu")
    assert said(job.BUILDS_HERE, r.err, command=command), r.err
    assert "gfx1151" not in r.err.splitlines()[-1]  # the profile that cannot build is not offered again


def test_the_main_job_without_its_toolchain_ends_saying_what_ran_what_did_not_and_what_can(build_project: Project, no_rocm: Path) -> None:
    r = build_project.ci("main-job", "--profile", "gfx1151")
    assert r.code == 0, r.err
    last = r.out.rstrip().splitlines()[-1]
    instead = main_job.INSTEAD.format(builds_here=job.BUILDS_HERE.format(profiles="{profiles}", command=job.MAIN_JOB_COMMAND.format(profile="cpu")))
    assert said(main_job.PARTLY_RAN.format(route="{route}", profile="gfx1151", instead=instead), last), last


def test_the_next_step_after_a_bump_is_a_command_this_machine_can_run(project: Project, no_rocm: Path) -> None:
    r = project.ci("bump-pin", project.fork.c2[:8], "--remote", str(project.fork.path))
    assert r.code == 0, r.err
    gates = job.SESSION_COMMAND.format(sessions="build gpu_tests", profile="cpu")
    assert bump_pin.NEXT.format(gates=gates, report="build/bump-report.md") in r.out
    assert said(bump_pin.NO_COMPILE_VERDICT, r.out, profile="gfx1151")
