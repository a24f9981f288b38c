from __future__ import annotations

import hashlib
import json
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest
from junitparser import JUnitXml

from ci import cli
from ci.commands import gpu_tests
from ci.compile import cmake, manifest, stage
from ci.gates.backend_ops import judge as backend_ops_judge
from ci.gates.backend_ops.spec import EXPECTED_IN_PINS
from ci.gates.serving import model_sets
from ci.release import ledger, records
from tests.support.build import BuildFork, add_fixture_patch, build_cpu
from tests.support.messages import pattern, said
from tests.support.project import Project

DATA = Path(__file__).parents[1] / "backend_ops" / "data"


def test_without_a_build_it_refuses_and_says_how_to_make_one(build_project: Project) -> None:
    r = build_project.ci("gpu-tests", "--profile", "cpu")
    assert r.code == 4
    assert stage.NO_BUILD.format(profile="cpu", manifest="build/cpu/build.json", hint=stage.REBUILD.format(profile="cpu")) in r.err


def test_a_stale_build_is_never_tested(build_project: Project, build_fork: BuildFork) -> None:
    assert build_cpu(build_project).code == 0
    add_fixture_patch(build_project, build_fork, "hello.patch", "tools/server/server.cpp", "llama-server %s", "llama-server says %s")
    r = build_project.ci("gpu-tests", "--profile", "cpu")
    assert r.code == 4
    reasons = cmake.KEY_PART_CHANGED.format(part="patches")
    assert said(stage.STALE_BUILD, r.err, profile="cpu", reasons=reasons, hint=stage.REBUILD.format(profile="cpu"))
    assert not (build_project.root / "build" / "results" / "ledger.jsonl").exists()


def test_a_replaced_binary_is_never_tested(build_project: Project) -> None:
    assert build_cpu(build_project).code == 0
    tbo = build_project.root / "build" / "cpu" / "bin" / "test-backend-ops"
    shutil.copy(tbo, tbo.with_suffix(".orig"))
    tbo.write_bytes(tbo.read_bytes() + b"\0")
    r = build_project.ci("gpu-tests", "--profile", "cpu")
    assert r.code == 4
    assert cmake.ARTIFACT_WRONG.format(name="test-backend-ops", problem=manifest.DIFFERS) in r.err


def test_the_gates_run_on_the_build_and_land_in_the_ledger(build_project: Project) -> None:
    """The fixture build's test-backend-ops is no llama.cpp: the real gate must say so and fail."""
    assert build_cpu(build_project).code == 0
    r = build_project.ci("gpu-tests", "--profile", "cpu", "--gate", "route", "--gate", "backend_ops")
    assert r.code == 7, r.out + r.err
    built = json.loads((build_project.root / "build" / "cpu" / "build.json").read_text())
    out = build_project.root / "build" / "results" / built["key"][:12]
    lines = r.out.splitlines()
    header = next(i for i, ln in enumerate(lines) if ln.split() == list(records.TABLE_COLUMNS))
    assert lines[header + 1].split()[:2] == ["route", "passed"]
    assert lines[header + 2].split()[:2] == ["backend_ops", "FAILED"]
    assert records.GATES_FAILED.format(failed=1, total=2, gates="backend_ops") in r.err
    route = json.loads((out / "route.json").read_text())
    assert route["status"] == "passed"
    assert route["counts"]["passed"] > 100
    bo = json.loads((out / "backend_ops.json").read_text())
    assert bo["status"] == "failed"
    assert bo["problems"]
    xml = JUnitXml.fromfile(str(out / "gpu_tests.junit.xml"))
    assert [s.name for s in xml] == ["route", "backend_ops"]
    done = ledger.read(build_project.root / "build" / "results" / "ledger.jsonl").records
    assert [(rec.gate, rec.verdict) for rec in done] == [("route", "passed"), ("backend_ops", "failed")]
    assert {rec.build_key for rec in done} == {built["key"]}
    assert done[1].data["artefacts"]["junit"] == f"build/results/{built['key'][:12]}/backend_ops.junit.xml"


# the real H200 capture's 36 cases against pins.yaml's 54
PINNED_54_RAN_36 = (
    backend_ops_judge.COUNT.format(op="GATED_DELTA_NET", expected=54, source=EXPECTED_IN_PINS.format(op="GATED_DELTA_NET"), ran=36, passed=36)
    + backend_ops_judge.COUNT_CHANGED
)


def test_from_log_judges_a_saved_capture_with_the_pins_expectation(build_project: Project) -> None:
    capture = DATA / "h200-cuda0.console.txt"  # the real H200 capture of upstream llama.cpp
    r = build_project.ci("gpu-tests", "--profile", "cuda", "--from-log", str(capture))
    assert r.code == 7
    assert PINNED_54_RAN_36 in r.out
    done = ledger.read(build_project.root / "build" / "results" / "ledger.jsonl").records
    assert done[-1].build_key == ""  # a log from elsewhere never counts for ship


def test_an_out_inside_another_runs_records_is_refused_and_nothing_there_is_written_over(build_project: Project) -> None:
    """--out build/results/<another key> overwrote that build's backend_ops.json and JUnit (a hostile pass)."""
    other = build_project.root / "build" / "results" / "0123456789ab"
    other.mkdir(parents=True)
    (other / "backend_ops.json").write_text("{}")
    capture = DATA / "h200-cuda0.console.txt"
    r = build_project.ci("gpu-tests", "--profile", "cuda", "--from-log", str(capture), "--out", str(other))
    assert (r.code, r.err) == (2, cli.ERROR.format(message=gpu_tests.OUT_ELSEWHERE.format(out=other, other="0123456789ab")) + "\n")
    assert [p.name for p in other.iterdir()] == ["backend_ops.json"]
    assert (other / "backend_ops.json").read_text() == "{}"


def test_on_github_actions_the_table_goes_to_the_job_summary(build_project: Project, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    summary = tmp_path / "step-summary.md"
    summary.write_text("earlier step\n")
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))
    r = build_project.ci("gpu-tests", "--profile", "cuda", "--from-log", str(DATA / "h200-cuda0.console.txt"))
    assert r.code == 7
    text = summary.read_text()
    heading = gpu_tests.TITLE.format(profile="cuda")
    assert text.startswith(f"earlier step\n{records.SUMMARY_HEADING.format(title=heading)}\n\n{records.SUMMARY_HEADER}\n")
    failed = records.SUMMARY_FAILED.format(verdict="FAILED")
    assert pattern(records.SUMMARY_ROW, gate="backend_ops", verdict=failed, counts="36 | 0 | 0 | 0").search(text)
    problem = PINNED_54_RAN_36
    assert records.SUMMARY_PROBLEM.format(gate="backend_ops", problem=problem) in text



def test_release_models_are_checked_against_their_sha256_before_anything_runs(make_build_project: Callable[..., Project]) -> None:
    pins = "\nequivalence:\n  model: {path: models/target.gguf, sha256: " + "a" * 64 + "}\n  drafter: {path: models/drafter.gguf, sha256: " + "b" * 64 + "}\n"
    project = make_build_project(pins)
    assert build_cpu(project).code == 0
    r = project.ci("gpu-tests", "--profile", "cpu", "--gate", "equivalence")
    assert r.code == 2
    assert r.err.startswith(cli.ERROR.format(message=model_sets.MODEL_MISSING.format(key="model", path="models/target.gguf")))
    (project.root / "models").mkdir()
    (project.root / "models" / "target.gguf").write_bytes(b"not the release's target")
    (project.root / "models" / "drafter.gguf").write_bytes(b"nor its drafter")
    r = project.ci("gpu-tests", "--profile", "cpu", "--gate", "equivalence")
    assert r.code == 4
    sha256 = hashlib.sha256(b"not the release's target").hexdigest()[:12]
    assert model_sets.MODEL_OTHER_FILE.format(key="model", path="models/target.gguf", sha256=sha256, pinned="a" * 12) in r.err
    assert not (project.root / "build" / "results" / "ledger.jsonl").exists()


def test_the_archs_gate_is_in_the_registry_and_names_a_missing_binary(build_project: Project) -> None:
    """The fixture build has no test-llama-archs: ``--gate archs`` reaches the registry's archs gate, which says so."""
    assert build_cpu(build_project).code == 0
    r = build_project.ci("gpu-tests", "--profile", "cpu", "--gate", "archs")
    assert manifest.NO_SUCH_BINARY.format(profile="cpu", name="test-llama-archs") in r.err, r.out + r.err
    assert r.code != 0
