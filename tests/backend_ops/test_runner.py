"""run_gate end to end through ci.command.run, with a stand-in for a GPU build's test-backend-ops.

No GPU here: the stand-in is a real program that prints a real H200 capture (or a log derived from one) and then
ends the way the GPU run did: exit 0, or a real SIGABRT/SIGFPE it sends itself, or a hang. The real CPU binary
goes through the same runner in test_real.py.
"""

from __future__ import annotations

import json
import stat
import sys
from pathlib import Path

import pytest

from ci import errors
from ci.gates.backend_ops import judge as judging
from ci.gates.backend_ops import run as backend_ops
from ci.gates.backend_ops.run import plan, run_gate
from tests.support.backend_ops import CAPTURE_COMMIT, DATA, OP
from tests.support.messages import partly, pattern, said

STAND_IN = """\
#!{python}
import json, os, signal, sys, time
with open(os.environ["STANDIN_ARGV"], "a") as f:
    f.write(json.dumps(sys.argv[1:]) + "\\n")
name = os.environ["STANDIN_SQL"] if "--output" in sys.argv else os.environ["STANDIN_CONSOLE"]
sys.stdout.write(open(name, encoding="utf-8").read())
sys.stdout.flush()
if os.environ.get("STANDIN_SIGNAL"):
    os.kill(os.getpid(), getattr(signal, os.environ["STANDIN_SIGNAL"]))
if os.environ.get("STANDIN_HANG"):
    time.sleep(60)
sys.exit(int(os.environ.get("STANDIN_EXIT", "0")))
"""


@pytest.fixture
def stand_in(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    exe = tmp_path / "bin" / "test-backend-ops"
    exe.parent.mkdir()
    exe.write_text(STAND_IN.format(python=sys.executable))
    exe.chmod(exe.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("STANDIN_ARGV", str(tmp_path / "argv.jsonl"))
    monkeypatch.setenv("STANDIN_CONSOLE", str(DATA / "h200-cuda0.console.txt"))
    monkeypatch.setenv("STANDIN_SQL", str(DATA / "h200-cuda0-rocmfpx-c14872f.sql.txt"))
    # what the stand-in reads is no program's by default (ci.command.environment): the test names it to be passed on
    monkeypatch.setenv("ONEBIT_PASS_ENV", "STANDIN_ARGV STANDIN_CONSOLE STANDIN_SQL STANDIN_SIGNAL STANDIN_HANG STANDIN_EXIT")
    return exe


RUN = judging.LABEL_RUN.format(op=OP, device="CUDA0")
SQL = judging.SQL_LABEL
# a run cut short after case lines, with the fields of what it saw and of the one op's cases left
CUT_SHORT = partly(judging.CUT_SHORT, seen=judging.SEEN_CASES, rest=judging.REST_NOT_RUN)


def argv_seen(tmp_path: Path) -> list[list[str]]:
    return [json.loads(line) for line in (tmp_path / "argv.jsonl").read_text().splitlines()]


def test_the_plan_runs_and_passes(stand_in: Path, tmp_path: Path) -> None:
    logs = tmp_path / "logs"
    result = run_gate(stand_in, "CUDA0", {OP: 36}, CAPTURE_COMMIT, True, 30.0, logs, "cuda-sm90-key")
    assert result.problems == ()
    assert result.ok
    assert argv_seen(tmp_path) == [list(s.argv[1:]) for s in plan(stand_in, "CUDA0", [OP]).steps]
    assert (logs / "test-backend-ops.CUDA0.GATED_DELTA_NET.log").read_text() == (DATA / "h200-cuda0.console.txt").read_text()
    assert (logs / "test-backend-ops.CUDA0.sql").read_text() == (DATA / "h200-cuda0-rocmfpx-c14872f.sql.txt").read_text()
    p = dict(result.properties)
    assert (p["build_key"], p["build_commit"], p["exit.GATED_DELTA_NET"], p["exit.sql"]) == ("cuda-sm90-key", "c14872f-dirty", errors.STATUS.format(code=0), errors.STATUS.format(code=0))
    assert result.seconds > 0


@pytest.mark.parametrize(("signal_name", "number", "log"), [("SIGABRT", 6, "h200-cuda0-abort.console.txt"), ("SIGFPE", 8, "h200-cuda0-cut.console.txt")])
def test_a_run_that_dies_by_a_signal(stand_in: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, signal_name: str, number: int, log: str) -> None:
    monkeypatch.setenv("STANDIN_CONSOLE", str(DATA / log))
    monkeypatch.setenv("STANDIN_SIGNAL", signal_name)
    result = run_gate(stand_in, "CUDA0", {OP: 54}, CAPTURE_COMMIT, True, 30.0, tmp_path / "logs")
    [problem] = result.problems
    how = judging.HOW_KILLED.format(signal=signal_name, number=number)
    assert pattern(CUT_SHORT, label=RUN, subject=judging.CUT_SUBJECT_RUN, how=how, op=OP).match(problem)
    assert dict(result.properties)["exit.GATED_DELTA_NET"] == errors.KILLED_BY.format(name=signal_name, number=number)
    assert dict(result.properties)["sql_cross_check"] == backend_ops.CONSOLE_UNFINISHED
    assert len(argv_seen(tmp_path)) == 1  # the sql run is not started after a crash
    assert not (tmp_path / "logs" / "test-backend-ops.CUDA0.sql").exists()


def test_a_run_that_hangs(stand_in: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("STANDIN_CONSOLE", str(DATA / "h200-cuda0-cut.console.txt"))
    monkeypatch.setenv("STANDIN_HANG", "1")
    result = run_gate(stand_in, "CUDA0", {OP: 54}, CAPTURE_COMMIT, True, 2.0, tmp_path / "logs")
    [problem] = result.problems
    how = judging.HOW_TIMED_OUT.format(timeout=2.0) + judging.HOW_SIGNAL.format(signal="SIGTERM")
    assert pattern(CUT_SHORT, label=RUN, subject=judging.CUT_SUBJECT_RUN, how=how, lines="21 case lines", device="CUDA0", op=OP, left=34, expected=54).match(problem)


def test_a_failing_run_exits_1(stand_in: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("STANDIN_CONSOLE", str(DATA / "h200-cuda0-fail.console.txt"))
    monkeypatch.setenv("STANDIN_EXIT", "1")
    result = run_gate(stand_in, "CUDA0", {OP: 36}, CAPTURE_COMMIT, True, 30.0, tmp_path / "logs")
    assert result.count("failed") == 3
    assert dict(result.properties)["exit.GATED_DELTA_NET"] == errors.STATUS.format(code=1)
    # exit 1 with three FAIL lines is what test-backend-ops does: no complaint about the console run's status
    exited = (judging.EXITED_ALTHOUGH_OK, judging.EXITED_0_ALTHOUGH_FAIL)
    assert not any(pattern(template, label=RUN).match(p) for template in exited for p in result.problems)
    # the stand-in's sql run replays a capture where every row passed (the failing cases have rows that passed):
    # a real disagreement; its exit status 1 is what a run with failing cases does, no problem of its own
    assert not any(said(judging.SQL_EXITED_ALTHOUGH_PASSED, p, label=SQL) for p in result.problems)
    assert judging.SQL_DISAGREES.format(label=SQL, op=OP, sql_passed=36, sql_ran=36, passed=33, ran=36) in result.problems
