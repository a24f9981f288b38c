"""The gate's result as JUnit XML and JSON, read back with junitparser and json."""

from __future__ import annotations

import json
from pathlib import Path

from junitparser import Error, Failure, JUnitXml, Skipped, TestSuite

from ci.gates import results
from ci.gates.backend_ops import judge as judging
from ci.gates.backend_ops.run import judge_log
from ci.gates.backend_ops.spec import EXPECTED_IN_PINS
from ci.gates.results import GateResult
from tests.support.backend_ops import CAPTURE_COMMIT, DATA, OP


def junit(tmp_path: Path, result: GateResult) -> TestSuite:
    path = tmp_path / "backend_ops.junit.xml"
    results.write_junit(path, [result])
    [suite] = list(JUnitXml.fromfile(str(path)))
    assert isinstance(suite, TestSuite)
    return suite


def properties(suite: TestSuite) -> dict[str, str]:
    return {p.name: p.value for p in suite.properties()}


def outcomes(suite: TestSuite) -> dict[str, list[tuple[str, str]]]:
    out: dict[str, list[tuple[str, str]]] = {}
    for case in suite:
        for r in case.result:
            out.setdefault(type(r).__name__, []).append((case.name, r.message))
    return out


def test_one_test_case_per_op_case_failures_with_their_message(tmp_path: Path) -> None:
    result = judge_log(DATA / "h200-cuda0-fail.console.txt", "CUDA0", {OP: 36}, CAPTURE_COMMIT, True, "rocm-key-1")
    suite = junit(tmp_path, result)
    assert suite.name == "backend_ops"
    assert (suite.tests, suite.failures, suite.errors, suite.skipped) == (36, 3, 0, 0)
    failures = outcomes(suite)["Failure"]
    assert [m for _, m in failures] == [
        "[GATED_DELTA_NET] ERR = 0.012300000 > 0.000500000",
        "[GATED_DELTA_NET] NaN at index 17 (CUDA0=nan CPU=0.318254)",
        "[GATED_DELTA_NET] inf mismatch: CUDA0=inf CPU=1.250000",
    ]
    assert all(name.startswith(f"{OP}(type=f32,") for name, _ in failures)
    p = properties(suite)
    assert (p["device"], p["op"], p["build_key"], p["pin"], p["verdict"]) == ("CUDA0", OP, "rocm-key-1", CAPTURE_COMMIT, "failed")
    assert (p["count.passed"], p["count.failed"], p["count.expected"]) == ("33", "3", "36")


def test_unsupported_cases_are_skipped(tmp_path: Path) -> None:
    suite = junit(tmp_path, judge_log(DATA / "h200-cuda0-unsupported.console.txt", "CUDA0", {OP: 34}))
    assert (suite.tests, suite.failures, suite.errors, suite.skipped) == (36, 0, 0, 2)
    assert [m for _, m in outcomes(suite)["Skipped"]] == [judging.NOT_SUPPORTED_CASE.format(reason="CUDA0")] * 2
    assert properties(suite)["verdict"] == "passed"


def test_a_count_failure_shows_in_junit_with_every_case_passing(tmp_path: Path) -> None:
    suite = junit(tmp_path, judge_log(DATA / "h200-cuda0.console.txt", "CUDA0", {OP: 54}))
    assert (suite.tests, suite.failures, suite.errors, suite.skipped) == (37, 1, 0, 0)
    assert outcomes(suite)["Failure"] == [(results.VERDICT_CASE, judging.COUNT.format(op=OP, expected=54, source=EXPECTED_IN_PINS.format(op=OP), ran=36, passed=36) + judging.COUNT_CHANGED)]


def test_a_cut_run_has_its_last_case_as_an_error(tmp_path: Path) -> None:
    suite = junit(tmp_path, judge_log(DATA / "h200-cuda0-abort.console.txt", "CUDA0", {OP: 36}))
    assert (suite.tests, suite.failures, suite.errors) == (13, 0, 1)
    [(name, message)] = outcomes(suite)["Error"]
    assert name.startswith(f"{OP}(type=f32,head_count=4,head_size=16,")
    assert message.startswith(judging.CUT_AFTER_CASE)
    assert {type(r) for case in suite for r in case.result} == {Error}


def test_a_passing_gate_has_no_failure(tmp_path: Path) -> None:
    result = judge_log(DATA / "h200-cuda0.console.txt", "CUDA0", {OP: 36}, CAPTURE_COMMIT, True, sql_path=DATA / "h200-cuda0-rocmfpx-c14872f.sql.txt")
    suite = junit(tmp_path, result)
    assert (suite.tests, suite.failures, suite.errors, suite.skipped) == (36, 0, 0, 0)
    assert not any(isinstance(r, (Failure, Error, Skipped)) for case in suite for r in case.result)
    assert properties(suite)["build_commit"] == "c14872f-dirty"


def test_json(tmp_path: Path) -> None:
    result = judge_log(DATA / "h200-cuda0-fail.console.txt", "CUDA0", {OP: 54})
    path = tmp_path / "backend_ops.json"
    results.write_json(path, result)
    data = json.loads(path.read_text())
    assert data["gate"] == "backend_ops"
    assert data["status"] == "failed"
    assert data["summary"] == judging.FAILED_SUMMARY.format(device="CUDA0", tallies=judging.TALLY.format(op=OP, passed=33, expected=54), problems="4 problems")
    assert data["problems"][0] == judging.COUNT.format(op=OP, expected=54, source=EXPECTED_IN_PINS.format(op=OP), ran=36, passed=33) + judging.COUNT_CHANGED
    assert data["counts"] == {"passed": 33, "failed": 3, "skipped": 0, "error": 0, "expected": 54}
    assert data["properties"]["device"] == "CUDA0"
    assert len(data["cases"]) == 36
    assert [c["status"] for c in data["cases"]].count("failed") == 3
    [nan] = [c for c in data["cases"] if "NaN" in c.get("message", "")]
    assert nan == {
        "name": f"{OP}(type=f32,head_count=4,head_size=64,n_seq_tokens=1,n_seqs=2,v_repeat=1,permuted=0,kda=1,K=1)",
        "status": "failed",
        "message": "[GATED_DELTA_NET] NaN at index 17 (CUDA0=nan CPU=0.318254)",
        "detail": judging.CASE_LINE_OF.format(line=29, log=DATA / "h200-cuda0-fail.console.txt"),
    }
