"""A judge that puts itself back (a hostile pass, 2026-12-05): a line planted in ci/gates/backend_ops/judge.py turned a
FAILED run into a pass and copied the committed file back over itself when imported; the record carried the clean
tree's ci_sha256, and ship wrote the wheel. The digest is now taken as the command starts, compared after every judge
is imported, and again when each record is written: a change anywhere between is refused, nothing recorded."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from ci import digests
from ci.errors import Refused
from ci.gates.results import GateResult, Status
from ci.gates.serving import launcher as launcher_files
from ci.pin import pins
from ci.release import binding

REPO_PINS = Path(__file__).resolve().parents[2] / "pins.yaml"


@pytest.fixture
def orchestration(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    copy = tmp_path / "ci"
    shutil.copytree(binding.orchestration_dir(), copy, ignore=shutil.ignore_patterns(*launcher_files.LAUNCHER_SKIPS))
    monkeypatch.setattr(binding, "orchestration_dir", lambda: copy)
    return copy


def test_a_judge_that_puts_itself_back_on_import_is_refused_before_any_gate(orchestration: Path) -> None:
    judge = orchestration / "gates" / "backend_ops" / "judge.py"
    committed = judge.read_text()
    judge.write_text(committed + "\n# planted: every result a pass, and this file put back on import\n")
    digests.remember_start(orchestration)  # the CLI takes it as the command starts
    judge.write_text(committed)  # what the planted import did
    with pytest.raises(Refused) as exc:
        binding.judging_now()
    assert exc.value.message.startswith(binding.CI_CHANGED.split(" (", 1)[0])


def test_a_change_to_ci_while_a_gate_runs_is_not_recorded(orchestration: Path) -> None:
    digests.remember_start(orchestration)
    judging = binding.judging_now()
    loaded = pins.load(REPO_PINS)
    result = GateResult("archs", Status.PASSED, "PASSED", properties=(("archs", "llama"), ("seed", "1"), ("threshold", "0.0001")))
    assert binding.judged_criteria(loaded, result, "cpu", judging)["ci_sha256"] == judging  # unchanged: recorded as judged
    (orchestration / "gates" / "archs" / "judge.py").write_text("# written by a program the gate started\n")
    with pytest.raises(Refused) as exc:
        binding.judged_criteria(loaded, result, "cpu", judging)
    assert exc.value.message == binding.CI_CHANGED.format(judged=judging[:12], now=binding.orchestration_sha256()[:12])


def test_route_tests_changed_while_they_ran_are_an_error_and_record_what_they_started_as(tmp_path: Path) -> None:
    """A conftest hook planted for the run and put back before the record (the hostile pass: 'route passed 1/1' and ship
    wrote the wheel): what changes while the tests run is an error, and the record names the digests they started at."""
    from ci.gates.route import run as route
    from ci.gates.route.gate import GATE as ROUTE

    source = tmp_path / "src"
    (source / "tests" / "route").mkdir(parents=True)
    (source / "tests" / "serve").mkdir(parents=True)
    (source / "pyproject.toml").write_text('[tool.pytest.ini_options]\naddopts = ["-ra"]\n')
    (source / "tests" / "serve" / "test_it.py").write_text(
        "from pathlib import Path\n\n\ndef test_it() -> None:\n    (Path(__file__).parent / 'conftest.py').write_text('# planted, to be put back\\n')\n"
    )
    (tmp_path / "out").mkdir()
    started = route.route_tests_sha256(source)
    result = route.route_gate(tmp_path / "out", source)
    assert result.status is Status.ERROR
    assert route.CHANGED_WHILE_RUNNING in result.problems
    assert ROUTE.judged(result, pins.load(REPO_PINS), "cpu")["route_tests_sha256"] == started
