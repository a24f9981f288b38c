from __future__ import annotations

import pytest

from ci.release import ledger
from tests.support.project import Project


def test_without_the_toolchain_it_verifies_and_runs_the_no_gpu_gate(build_project: Project, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ROCM_PATH", str(build_project.root / "no-rocm-here"))
    r = build_project.ci("main-job", "--profile", "gfx1151")
    assert r.code == 0, r.err
    assert r.out.startswith("verify_pin: OK")
    assert "main job: no gfx1151 toolchain here (gfx1151: ROCM_PATH=" in r.out
    assert "running the gate that needs no GPU: the route tests" in r.out
    assert "route  passed" in r.out
    (record,) = ledger.read(build_project.root / "build" / "results" / "ledger.jsonl").records
    assert (record.gate, record.verdict, record.build_key) == ("route", "passed", "")


def test_with_the_toolchain_it_builds_gates_and_checks_shipping(build_project: Project) -> None:
    r = build_project.ci("main-job", "--profile", "cpu", "--remote", str(build_project.fork.path))
    assert "build: building cpu" in r.out
    assert "gpu_tests: cpu build" in r.out
    # the fixture's test-backend-ops is no llama.cpp, so the real gate fails and nothing may ship
    assert r.code == 7
    assert "gpu_tests: 2 of 3 gates did not pass: backend_ops, equivalence" in r.err
