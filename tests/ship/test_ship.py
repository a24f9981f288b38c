from __future__ import annotations

import json
import zipfile
from pathlib import Path

import pytest

from ci.release import ledger
from tests.support.build import BuildFork
from tests.support.build import add_fixture_patch, build_cpu
from tests.support.project import Project
from tests.ship.conftest import RealGates

pytestmark = pytest.mark.slow


def built(project: Project) -> dict:  # type: ignore[type-arg]
    r = build_cpu(project)
    assert r.code == 0, r.err
    return json.loads((project.root / "build" / "cpu" / "build.json").read_text())  # type: ignore[no-any-return]


def record(project: Project, manifest: dict, *results) -> None:  # type: ignore[no-untyped-def, type-arg]
    context = ledger.BuildContext(manifest["key"], manifest["pin"]["commit"], manifest["patches"]["digest"], "cpu", "CPU")
    for r in results:
        ledger.append(project.root / "build" / "results" / "ledger.jsonl", r, context)


def ship(project: Project, *args: str):  # type: ignore[no-untyped-def]
    return project.ci("ship", "--profile", "cpu", *args)


def test_no_records_refuses_listing_every_gate(build_project: Project, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    built(build_project)
    summary = tmp_path / "step-summary.md"
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))  # on GitHub Actions the table goes to the job summary too
    r = ship(build_project)
    assert summary.read_text().startswith("### ship, profile cpu: REFUSED\n\n```\nship: build ")
    assert summary.read_text().count("MISSING") == 3
    assert r.code == 7
    for gate in ("route", "backend_ops", "equivalence"):
        assert f"  {gate}" in r.out
    assert r.out.count("MISSING") == 3
    assert "ship: refused: 3 of 3 gates have not passed for this build (route, backend_ops, equivalence)" in r.err
    assert not (build_project.root / "dist").exists()


def test_one_failed_gate_refuses(build_project: Project, real_gates: RealGates) -> None:
    m = built(build_project)
    record(build_project, m, real_gates.route, real_gates.backend_ops_failed, real_gates.equivalence)
    r = ship(build_project)
    assert r.code == 7
    assert "backend_ops  FAILED" in r.out
    assert "GATED_DELTA_NET: 54 expected, 36 ran and passed" in r.out
    assert "ship: refused: 1 of 3 gates" in r.err


def test_a_later_failure_overrides_an_earlier_pass(build_project: Project, real_gates: RealGates) -> None:
    m = built(build_project)
    record(build_project, m, real_gates.route, real_gates.backend_ops, real_gates.equivalence, real_gates.backend_ops_failed)
    assert ship(build_project).code == 7


def test_records_for_another_key_never_count(build_project: Project, real_gates: RealGates) -> None:
    m = built(build_project)
    other = dict(m, key="0" * 64)
    record(build_project, other, real_gates.route, real_gates.backend_ops, real_gates.equivalence)
    r = ship(build_project)
    assert r.code == 7
    assert r.out.count("STALE") == 3
    assert "judged key 000000000000" in r.out


def test_a_patch_change_makes_the_build_and_then_the_records_stale(build_project: Project, build_fork: BuildFork, real_gates: RealGates) -> None:
    m = built(build_project)
    record(build_project, m, real_gates.route, real_gates.backend_ops, real_gates.equivalence)
    assert ship(build_project, "--check").code == 0
    add_fixture_patch(build_project, build_fork, "hello.patch", "tools/server/server.cpp", "llama-server %s", "llama-server says %s")
    r = ship(build_project)
    assert r.code == 4
    assert "the cpu build is stale" in r.err
    assert "patches changed" in r.err
    built(build_project)
    r = ship(build_project)
    assert r.code == 7
    assert r.out.count("STALE") == 3


def test_every_gate_passed_ships_with_the_evidence(build_project: Project, real_gates: RealGates) -> None:
    m = built(build_project)
    record(build_project, m, real_gates.route, real_gates.backend_ops, real_gates.equivalence)
    r = ship(build_project)
    assert r.code == 0, r.err
    dist = build_project.root / "dist"
    wheel = next(dist.glob("onebit_serve-*.whl"))
    sdist = next(dist.glob("onebit_serve-*.tar.gz"))
    release = json.loads(next(dist.glob("onebit_serve-*.release.json")).read_text())
    assert f"+{m['pin']['commit'][:7]}.{m['key'][:8]}" in wheel.name
    assert sdist.stat().st_size > 0
    assert release["build"]["key"] == m["key"]
    assert release["pin"]["commit"] == m["pin"]["commit"]
    assert release["patches"]["digest"] == m["patches"]["digest"]
    records = ledger.read(build_project.root / "build" / "results" / "ledger.jsonl").records
    for gate, rec in zip(("route", "backend_ops", "equivalence"), records, strict=True):
        assert release["gates"][gate]["verdict"] == "passed"
        assert release["gates"][gate]["record_sha256"] == rec.sha256
        assert release["gates"][gate]["counts"] == rec.data["counts"]
    with zipfile.ZipFile(wheel) as zf:
        inside = json.loads(zf.read("serve/release.json"))
        names = zf.namelist()
        entry_points = next(n for n in names if n.endswith("entry_points.txt"))
        assert "1bit = serve.cli:main" in zf.read(entry_points).decode()
    assert inside == release
    assert "serve/config/recipes.json" in names
    assert not any(n.startswith("ci/") for n in names)
