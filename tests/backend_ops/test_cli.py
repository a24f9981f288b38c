"""``python -m ci backend-ops``: flags, defaults from pins.yaml, output files, exit codes."""

from __future__ import annotations

import contextlib
import io
import json
from dataclasses import dataclass
from pathlib import Path

import pytest

from ci import cli
from ci.cli import main
from ci.commands import backend_ops as command
from ci.errors import ConfigError, GateFailed
from ci.gates.backend_ops import judge
from ci.gates.backend_ops import run as backend_ops
from ci.gates.backend_ops import spec as bo_spec
from ci.pin import project as pin_project
from ci.release import records
from tests.support.backend_ops import CAPTURE_COMMIT, DATA, OP
from tests.support.messages import partly, pattern, said
from tests.support.project import FORK_URL, PINS_TEMPLATE


@dataclass(frozen=True)
class Ran:
    code: int
    out: str
    err: str


def ci(*args: str) -> Ran:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(list(args))
    return Ran(code, out.getvalue(), err.getvalue())


@pytest.fixture
def outside(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A working directory with no pins.yaml at or above it."""
    here = tmp_path / "elsewhere"
    here.mkdir()
    monkeypatch.chdir(here)
    return here


@pytest.fixture
def project(tmp_path: Path) -> Path:
    root = tmp_path / "project"
    root.mkdir()
    (root / "pins.yaml").write_text(PINS_TEMPLATE.format(url=FORK_URL, commit=CAPTURE_COMMIT))
    return root


def test_a_passing_log(outside: Path) -> None:
    ran = ci("backend-ops", "--device", "CUDA0", "--from-log", str(DATA / "h200-cuda0.console.txt"), "--expect", f"{OP}=36", "--pinned-commit", "none", "--out", "gates")
    assert ran.code == 0, ran.err
    lines = ran.out.splitlines()
    tallies = judge.TALLY.format(op=OP, passed=36, expected=36)
    assert lines[0] == summary(judge.PASSED_UNCHECKED.format(device="CUDA0", tallies=tallies, check=judge.NO_SQL_OUTPUT))
    assert lines[1] == records.WROTE.format(gate="backend_ops", json="gates/backend_ops.json", junit="gates/backend_ops.junit.xml")
    data = json.loads((outside / "gates" / "backend_ops.json").read_text())
    assert data["status"] == "passed"
    assert (outside / "gates" / "backend_ops.junit.xml").is_file()


def test_a_failing_log_exits_with_the_gate_code(outside: Path) -> None:
    ran = ci("backend-ops", "--device", "CUDA0", "--from-log", str(DATA / "h200-cuda0.console.txt"), "--expect", f"{OP}=54", "--pinned-commit", "none", "--out", "gates")
    assert ran.code == GateFailed.exit_code == 7
    head, problem = ran.out.splitlines()[:2]
    assert head == summary(judge.FAILED_SUMMARY.format(device="CUDA0", tallies=judge.TALLY.format(op=OP, passed=36, expected=54), problems="1 problem"))
    # where the 54 was set is left open here: test_an_expectation_by_flag_is_named_in_the_count_problem
    assert pattern(records.GATE_PROBLEM.format(problem=judge.COUNT + judge.COUNT_CHANGED), op=OP, expected=54, ran=36, passed=36).fullmatch(problem)


def test_an_expectation_by_flag_is_named_in_the_count_problem(outside: Path) -> None:
    ran = ci("backend-ops", "--device", "CUDA0", "--from-log", str(DATA / "h200-cuda0.console.txt"), "--expect", f"{OP}=54", "--pinned-commit", "none", "--out", "gates")
    source = bo_spec.EXPECTED_BY_FLAG.format(op=OP, expected=54)
    problem = judge.COUNT.format(op=OP, expected=54, source=source, ran=36, passed=36) + judge.COUNT_CHANGED
    assert records.GATE_PROBLEM.format(problem=problem) in ran.out.splitlines()


def test_defaults_come_from_pins_yaml(project: Path) -> None:
    ran = ci(
        "--root", str(project), "backend-ops", "--device", "CUDA0", "--from-log", str(DATA / "h200-cuda0.console.txt"),
        "--from-sql", str(DATA / "h200-cuda0-rocmfpx-c14872f.sql.txt"), "--patched", "--build-key", "cuda-key",
    )
    assert ran.code == 7
    problem = judge.COUNT.format(op=OP, expected=54, source=bo_spec.EXPECTED_IN_PINS.format(op=OP), ran=36, passed=36) + judge.COUNT_CHANGED
    assert records.GATE_PROBLEM.format(problem=problem) in ran.out.splitlines()
    data = json.loads((project / "build" / "gates" / "backend_ops.json").read_text())
    assert data["properties"]["pin"] == CAPTURE_COMMIT
    assert data["properties"]["expected"] == f"{OP}=54"
    assert data["properties"]["build_commit_check"] == "passed"
    assert data["properties"]["build_key"] == "cuda-key"
    assert data["problems"] == [problem]


def test_expect_replaces_the_pins_expectations(project: Path) -> None:
    ran = ci(
        "--root", str(project), "backend-ops", "--device", "CUDA0", "--from-log", str(DATA / "h200-cuda0.console.txt"),
        "--from-sql", str(DATA / "h200-cuda0-rocmfpx-c14872f.sql.txt"), "--expect", f"{OP}=36", "--dirty", "dirty",
    )
    assert ran.code == 0, ran.out
    tallies = judge.TALLY.format(op=OP, passed=36, expected=36)
    assert ran.out.startswith(summary(judge.PASSED_AS_PINNED.format(device="CUDA0", tallies=tallies, build_commit="c14872f-dirty", pin="c14872f")))


def test_the_dirty_rule_defaults_to_clean_without_patches(project: Path) -> None:
    ran = ci(
        "--root", str(project), "backend-ops", "--device", "CUDA0", "--from-log", str(DATA / "h200-cuda0.console.txt"),
        "--from-sql", str(DATA / "h200-cuda0-rocmfpx-c14872f.sql.txt"), "--expect", f"{OP}=36",
    )
    assert ran.code == 7
    assert said(judge.DIRTY_ALTHOUGH_CLEAN, ran.out, build_commit="c14872f-dirty")


def summary(text: str) -> str:
    """The gate's summary as the command's first line says it (records.GATE_SUMMARY)."""
    return records.GATE_SUMMARY.format(gate="backend_ops", summary=text)


def error(template: str) -> str:
    """``template`` as the command line says a ConfigError (ci/cli.py), a template still."""
    return partly(cli.ERROR, message=template)


@pytest.mark.parametrize(
    ("args", "message", "known"),
    [
        (["--device", "CUDA0", "--from-log", "x.log"], error(pin_project.NOT_FOUND_ABOVE), {"file": "pins.yaml"}),
        (["--device", "CUDA0", "--from-log", "x.log", "--expect", f"{OP}=36"], command.OUTSIDE_THE_PROJECT, {"flags": "--pinned-commit SHA|none"}),
        (["--device", "CUDA0", "--from-log", "x.log", "--pinned-commit", "none"], command.OUTSIDE_THE_PROJECT, {"flags": "--expect OP=N"}),
        (["--device", "CUDA0", "--expect", f"{OP}", "--pinned-commit", "none"], error(command.BAD_EXPECT), {"value": OP}),
        (["--device", "CUDA0", "--expect", f"{OP}=0", "--pinned-commit", "none"], command.BAD_EXPECT, {"value": f"{OP}=0"}),
        (["--device", "CUDA0", "--expect", f"{OP}=1", "--expect", f"{OP}=2", "--pinned-commit", "none"], command.EXPECT_TWICE, {"op": OP}),
        (["--device", "CUDA0", "--expect", f"{OP}=36", "--pinned-commit", "none"], error(command.BINARY_REQUIRED), {}),
        (["--device", "CUDA0", "--expect", f"{OP}=36", "--pinned-commit", "none", "--binary", "no/such/test-backend-ops"], error(command.NOT_EXECUTABLE), {"binary": "no/such/test-backend-ops"}),
        (["--device", "CUDA0", "--expect", f"{OP}=36", "--pinned-commit", "none", "--timeout", "0", "--binary", "x"], error(backend_ops.BAD_TIMEOUT), {"timeout": 0.0}),
        (["--device", "CUDA0", "--expect", f"{OP}=36", "--pinned-commit", "b82c", "--from-log", "x.log"], error(bo_spec.NOT_A_SHA), {"commit": "b82c"}),
        (["--device", "CUDA0", "--expect", f"{OP}=36", "--pinned-commit", "none", "--from-log", "x.log"], error(backend_ops.LOG_NOT_FOUND), {"flag": "--from-log", "path": "x.log"}),
        (["--device", "CUDA0", "--from-sql", "x.sql"], error(command.SQL_WITHOUT_LOG), {}),
        (["--device", "CUDA0", "--from-log", "x.log", "--binary", "x"], error(command.BINARY_AND_LOG), {}),
    ],
)
def test_bad_input_is_one_line_naming_the_flag(outside: Path, args: list[str], message: str, known: dict[str, object]) -> None:
    ran = ci("backend-ops", *args)
    assert ran.code == ConfigError.exit_code
    assert ran.out == ""
    [line] = ran.err.splitlines()
    assert said(message, line, **known)
    assert not (outside / "build").exists()
