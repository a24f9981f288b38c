"""A record is consistent or it is refused, and one reading of the ledger says which record stands (issue 43, items 3
and 4).

- verdict over counts: ship counted a ``passed`` record whose own counts said ``failed: 1`` (35/36 passed);
- the self-test's premise: after an ad-hoc equivalence run on models of one's own (outputs identical, evidence below
  the floors), the self-test refused every equivalence fault ("equivalence fails the unplanted build"), while ship
  rightly said of the same record "not counted: models given models": the two read the ledger by different rules;
- swapped tiny models: a drafter renamed over during the equivalence gate left a record whose ``drafter_sha256`` was
  the target's, and ship counted it (no digest was compared when pins.yaml names no model).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from ci import cli
from ci.commands import bisect, gate_selftest
from ci.compile.manifest import Manifest
from ci.errors import ConfigError
from ci.gates.results import CaseResult, GateResult, Status, case_counts
from ci.gates.serving.model_sets import GIVEN_MODELS, TINY_MODELS
from ci.pin import pins as pins_mod
from ci.release import ledger, standings
from ci.release import ship as release_ship
from tests.release.test_ship import GATES, built, record, ship, tiny_properties
from tests.support.messages import said
from tests.support.project import Project

CONTEXT = ledger.BuildContext("k" * 64, "p" * 40, "s" * 64, "cpu", "CPU")


def passed_with(counts: dict[str, int]) -> GateResult:
    cases = tuple(CaseResult(f"case {i}", Status.PASSED) for i in range(3))
    return GateResult("backend_ops", Status.PASSED, "PASSED on CPU: GATED_DELTA_NET 36/36 passed", cases, (), tuple(counts.items()))


@pytest.mark.parametrize(
    ("counts", "why"),
    [
        ({"passed": 35, "failed": 1, "skipped": 0, "error": 0}, "failed 1"),
        ({"passed": 36, "failed": 0, "skipped": 0, "error": 2}, "error 2"),
        ({"passed": 35, "failed": 0, "skipped": 0, "error": 0, "expected": 36}, "passed 35 of 36 expected"),
    ],
)
def test_a_passed_record_whose_counts_say_otherwise_is_refused(tmp_path: Path, counts: dict[str, int], why: str) -> None:
    path = tmp_path / "ledger.jsonl"
    ledger.append(path, GateResult("route", Status.PASSED, "3/3 route tests passed"), CONTEXT)
    with pytest.raises(ConfigError) as refused:  # never written
        ledger.append(path, passed_with(counts), CONTEXT)
    assert refused.value.message == ledger.INCONSISTENT.format(where=ledger.APPENDED.format(gate="backend_ops"), why=why)
    assert len(ledger.read(path).records) == 1


def test_a_passed_record_with_a_failure_in_its_counts_is_refused_on_reading(build_project: Project) -> None:
    """Written by hand (an unsigned ledger's last record and its head, rewritten together): ship names the line."""
    m = built(build_project)
    record(build_project, m, GATES.route, GATES.equivalence)
    path = build_project.root / "build" / "results" / "ledger.jsonl"
    forged = dataclasses.replace(GATES.backend_ops, counts=(("passed", 35), ("failed", 1), ("skipped", 0), ("error", 0)))
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(ledger, "_inconsistent", lambda data: None)  # as an editor of the file would write it
        record(build_project, m, forged)
    r = ship(build_project, "--check")
    assert r.code == ConfigError.exit_code, r.out + r.err
    where = ledger.AT_LINE.format(path=path, line=3)
    assert r.err == cli.ERROR.format(message=ledger.INCONSISTENT.format(where=where, why="failed 1")) + "\n"


def test_the_self_test_reads_a_record_on_models_of_ones_own_as_ship_does(build_project: Project) -> None:
    """An ad-hoc run on given models that failed its floors judged something else than the release: ship does not
    count it, and the self-test does not take the gate for one that fails the unplanted build."""
    m = built(build_project)
    adhoc = dataclasses.replace(
        GATES.equivalence, status=Status.FAILED, summary="FAILED: 3/3 prompts identical; evidence below the floors on 3", properties=(("models", GIVEN_MODELS),)
    )
    record(build_project, m, GATES.route, GATES.backend_ops, GATES.equivalence, adhoc)
    r = ship(build_project, "--check")
    assert r.code == 0, r.out + r.err  # the ad-hoc failure stays not counted
    book = build_project.root / "build" / "results" / "ledger.jsonl"
    manifest, pins = Manifest.from_json(m), pins_mod.load(build_project.pins)
    assert gate_selftest.unplanted_failures(book, manifest, pins, build_project.root) == {}
    # a failure on the release's models is one, for both
    record(build_project, m, dataclasses.replace(GATES.equivalence, status=Status.FAILED, summary="FAILED: 2/3 prompts identical"))
    assert ship(build_project, "--check").code == 7
    failing = gate_selftest.unplanted_failures(book, manifest, pins, build_project.root)
    assert list(failing) == ["equivalence"]


def test_bisect_takes_no_record_on_models_of_ones_own_for_the_failing_gate(build_project: Project) -> None:
    m = built(build_project)
    adhoc = dataclasses.replace(GATES.equivalence, status=Status.FAILED, summary="FAILED: below the floors", properties=(("models", GIVEN_MODELS),))
    record(build_project, m, GATES.route, GATES.backend_ops_failed, adhoc)
    assert bisect.default_gate(build_project.root, "cpu", m["pin"]["commit"]) == "backend_ops"


def test_a_tiny_model_record_whose_drafter_is_another_file_does_not_count(build_project: Project) -> None:
    m = built(build_project)
    props = {**dict(GATES.equivalence.properties), **dict(tiny_properties(Path("/b/tiny-models")))}
    props["near.drafter_sha256"] = props["model_sha256"]  # the target renamed over the drafter before it was hashed
    swapped = dataclasses.replace(GATES.equivalence, properties=tuple(props.items()))
    record(build_project, m, GATES.route, GATES.backend_ops, swapped)
    r = ship(build_project, "--check")
    assert r.code == 7, r.out + r.err
    why = standings.NOT_THE_GENERATORS.format(key="near.drafter_sha256", got=props["model_sha256"][:12], file="tiny-qwen35-near-drafter.gguf")
    assert said(release_ship.TABLE_ROW, r.out, gate="equivalence", state="MISSING")
    assert standings.NOT_COUNTED.format(why=why, line=3, more="") in r.out


def test_a_tiny_model_record_that_names_no_model_digest_does_not_count() -> None:
    assert standings.model_files_problem({"models": TINY_MODELS}) == standings.NO_MODEL_DIGEST
    assert standings.model_files_problem(dict(tiny_properties(Path("/b/tiny-models")))) is None


def test_counts_of_a_passed_record_are_consistent_in_every_gate_result_the_suite_builds() -> None:
    """The gates' own results: a pass never carries a failure (the check refuses nothing they write)."""
    for result in (GATES.route, GATES.backend_ops, GATES.equivalence):
        assert ledger.inconsistency(result.status.value, dict(result.counts)) is None
    cases = (CaseResult("a", Status.PASSED), CaseResult("b", Status.SKIPPED))
    assert ledger.inconsistency("passed", dict(case_counts(cases))) is None
