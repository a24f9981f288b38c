"""``python -m ci backend-ops``: flags, defaults from pins.yaml, output files, exit codes."""

from __future__ import annotations

import contextlib
import io
import json
from dataclasses import dataclass
from pathlib import Path

import pytest

from ci.cli import main
from ci.errors import ConfigError, GateFailed
from tests.support.backend_ops import CAPTURE_COMMIT, DATA, OP
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
    assert lines[0] == "backend_ops: PASSED on CUDA0: GATED_DELTA_NET 36/36 passed; build_commit check not made: no --output sql output"
    assert lines[1] == "backend_ops: wrote gates/backend_ops.json and gates/backend_ops.junit.xml"
    data = json.loads((outside / "gates" / "backend_ops.json").read_text())
    assert data["status"] == "passed"
    assert (outside / "gates" / "backend_ops.junit.xml").is_file()


def test_a_failing_log_exits_with_the_gate_code(outside: Path) -> None:
    ran = ci("backend-ops", "--device", "CUDA0", "--from-log", str(DATA / "h200-cuda0.console.txt"), "--expect", f"{OP}=54", "--pinned-commit", "none", "--out", "gates")
    assert ran.code == GateFailed.exit_code == 7
    assert ran.out.splitlines()[:2] == [
        "backend_ops: FAILED on CUDA0: GATED_DELTA_NET 36/54 passed; 1 problem",
        "  - GATED_DELTA_NET: 54 expected, 36 ran and passed",
    ]


def test_defaults_come_from_pins_yaml(project: Path) -> None:
    ran = ci(
        "--root", str(project), "backend-ops", "--device", "CUDA0", "--from-log", str(DATA / "h200-cuda0.console.txt"),
        "--from-sql", str(DATA / "h200-cuda0-rocmfpx-c14872f.sql.txt"), "--patched", "--build-key", "cuda-key",
    )
    assert ran.code == 7
    assert "  - GATED_DELTA_NET: 54 expected, 36 ran and passed" in ran.out.splitlines()
    data = json.loads((project / "build" / "gates" / "backend_ops.json").read_text())
    assert data["properties"]["pin"] == CAPTURE_COMMIT
    assert data["properties"]["expected"] == f"{OP}=54"
    assert data["properties"]["build_commit_check"] == "passed"
    assert data["properties"]["build_key"] == "cuda-key"
    assert data["problems"] == ["GATED_DELTA_NET: 54 expected, 36 ran and passed"]


def test_expect_replaces_the_pins_expectations(project: Path) -> None:
    ran = ci(
        "--root", str(project), "backend-ops", "--device", "CUDA0", "--from-log", str(DATA / "h200-cuda0.console.txt"),
        "--from-sql", str(DATA / "h200-cuda0-rocmfpx-c14872f.sql.txt"), "--expect", f"{OP}=36", "--dirty", "dirty",
    )
    assert ran.code == 0, ran.out
    assert ran.out.startswith("backend_ops: PASSED on CUDA0: GATED_DELTA_NET 36/36 passed; build_commit c14872f-dirty is the pin c14872f")


def test_the_dirty_rule_defaults_to_clean_without_patches(project: Path) -> None:
    ran = ci(
        "--root", str(project), "backend-ops", "--device", "CUDA0", "--from-log", str(DATA / "h200-cuda0.console.txt"),
        "--from-sql", str(DATA / "h200-cuda0-rocmfpx-c14872f.sql.txt"), "--expect", f"{OP}=36",
    )
    assert ran.code == 7
    assert "has a -dirty suffix but the dirty rule is 'clean'" in ran.out


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--device", "CUDA0", "--from-log", "x.log"], "onebit-ci: error: pins.yaml: not found in "),
        (["--device", "CUDA0", "--from-log", "x.log", "--expect", f"{OP}=36"], "; outside the project give --pinned-commit SHA|none"),
        (["--device", "CUDA0", "--from-log", "x.log", "--pinned-commit", "none"], "; outside the project give --expect OP=N"),
        (["--device", "CUDA0", "--expect", f"{OP}", "--pinned-commit", "none"], f'onebit-ci: error: --expect "{OP}": not OP=N with N cases, 1 or more (e.g. --expect GATED_DELTA_NET=54)'),
        (["--device", "CUDA0", "--expect", f"{OP}=0", "--pinned-commit", "none"], f'--expect "{OP}=0": not OP=N'),
        (["--device", "CUDA0", "--expect", f"{OP}=1", "--expect", f"{OP}=2", "--pinned-commit", "none"], f"--expect {OP}: given twice"),
        (["--device", "CUDA0", "--expect", f"{OP}=36", "--pinned-commit", "none"], "onebit-ci: error: --binary PATH is required (the build's test-backend-ops), unless --from-log FILE judges a saved log"),
        (["--device", "CUDA0", "--expect", f"{OP}=36", "--pinned-commit", "none", "--binary", "no/such/test-backend-ops"], "onebit-ci: error: --binary no/such/test-backend-ops: not an executable file; give the build's test-backend-ops"),
        (["--device", "CUDA0", "--expect", f"{OP}=36", "--pinned-commit", "none", "--timeout", "0", "--binary", "x"], "onebit-ci: error: --timeout 0: must be more than 0 seconds"),
        (["--device", "CUDA0", "--expect", f"{OP}=36", "--pinned-commit", "b82c", "--from-log", "x.log"], 'onebit-ci: error: pinned commit "b82c": not a commit sha (7 to 40 hex digits)'),
        (["--device", "CUDA0", "--expect", f"{OP}=36", "--pinned-commit", "none", "--from-log", "x.log"], "onebit-ci: error: --from-log x.log: not found; give a saved test-backend-ops output"),
        (["--device", "CUDA0", "--from-sql", "x.sql"], "onebit-ci: error: --from-sql FILE goes with --from-log FILE"),
        (["--device", "CUDA0", "--from-log", "x.log", "--binary", "x"], "onebit-ci: error: --binary and --from-log: give one"),
    ],
)
def test_bad_input_is_one_line_naming_the_flag(outside: Path, args: list[str], message: str) -> None:
    ran = ci("backend-ops", *args)
    assert ran.code == ConfigError.exit_code
    assert ran.out == ""
    [line] = ran.err.splitlines()
    assert message in line
    assert not (outside / "build").exists()
