"""bisect on the fixture fork, for real: git bisect, the series, CMake and the fixture's test-backend-ops replaying
the real CPU one's output (a stand-in for test-backend-ops: it reports the fixture's build commit)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ci import cli
from ci import git as ci_git
from ci.commands import bisect as bisect_
from ci.gates.backend_ops import judge as backend_ops_judge
from ci.gates.backend_ops.spec import EXPECTED_IN_PINS
from ci.git import Git
from ci.release import ledger
from ci.source.classify import NOT_APPLYING, VERDICT_DETAILED, Fate
from ci.words import count
from tests.support.bisect_fork import CONFLICT, PATCH_NEW, REGRESSION, SERVER, BisectFork
from tests.support.build import build_cpu, manifest, replay_flags
from tests.support.messages import partly, pattern, said
from tests.support.processes import live_processes_naming
from tests.support.project import Project

pytestmark = pytest.mark.slow

TALLY_36 = backend_ops_judge.TALLY.format(op="GATED_DELTA_NET", passed=36, expected=36)  # the pin's count, every case passed


def bisect(project: Project, fork: BisectFork, *args: str) -> tuple[int, str, str]:
    r = project.ci("bisect", "--profile", "cpu", "--gate", "backend_ops", "--remote", str(fork.path), "--bad", fork.c(32), *args)
    return r.code, r.out, r.err


def assert_at_pin_and_series(project: Project, fork: BisectFork) -> None:
    gitdir = project.root / ".git" / "modules" / "third_party" / "llama.cpp-rocmfpx"
    git = Git(gitdir, project.submodule)
    assert git.text("rev-parse", "HEAD") == fork.fork.f0
    assert PATCH_NEW in (project.submodule / SERVER).read_text()
    assert git.text("status", "--porcelain", "--untracked-files=all") == f"M  {SERVER}"  # the index holds pin + series
    assert not (gitdir / "BISECT_START").exists()
    assert git.text("for-each-ref", "refs/bisect/") == ""


def test_bisect_names_the_planted_regression_and_skips_the_commit_the_series_does_not_apply_to(
    bisect_project: Project, bisect_fork: BisectFork
) -> None:
    code, out, err = bisect(bisect_project, bisect_fork)
    assert code == 0, out + err
    first_bad = bisect_fork.c(REGRESSION)
    subject = "ggml: fold the answer's rounding into the kernel"
    start = bisect_.START.format(
        gate="backend_ops", profile="cpu", good=bisect_fork.fork.f0[:7], bad=bisect_fork.c(32)[:7], commits="32 commits", steps="5 steps"
    )
    assert start in out
    steps = [ln for ln in out.splitlines() if pattern(bisect_.STEP_DONE).match(ln) and "/" in ln.split()[2]]
    assert 1 <= len(steps) <= 6, "\n".join(steps)
    assert said(bisect_.FOUND, out, commit=first_bad[:7], gate="backend_ops", subject=subject, steps=count(len(steps), "step"))
    skipped = [ln for ln in steps if said(bisect_.STEP_RESULT, ln, outcome=bisect_.Outcome.SKIP.value)]
    assert len(skipped) == 1
    assert said(bisect_.STEP_RESULT, skipped[0], commit=bisect_fork.c(CONFLICT)[:7], outcome=bisect_.Outcome.SKIP.value)
    verdict = VERDICT_DETAILED.format(patch="banner.patch", fate=Fate.CONFLICTS.value, detail=ci_git.HUNK_DOES_NOT_MATCH)
    conflict = bisect_.SERIES_DOES_NOT_APPLY.format(problems=NOT_APPLYING.format(verdict=verdict))
    assert said(conflict, skipped[0], path="tools/server/server.cpp", number=1)
    assert bisect_.FIRST_BAD_FILES.format(files="ggml/ggml.c, notes/c21.txt") in out
    problem = backend_ops_judge.COUNT.format(
        op="GATED_DELTA_NET", expected=36, source=EXPECTED_IN_PINS.format(op="GATED_DELTA_NET"), ran=36, passed=35
    )
    assert bisect_.FIRST_BAD_PROBLEM.format(gate="backend_ops", problem=problem) in out
    assert bisect_.LAST_GOOD_LINE.format(commit=bisect_fork.c(REGRESSION - 1)[:7], subject="notes: commit 20") in out
    assert_at_pin_and_series(bisect_project, bisect_fork)
    report = (bisect_project.root / "build" / "bisect" / "report.md").read_text()
    assert bisect_.FIRST_BAD_HEADING.format(sha=first_bad, subject=subject) in report
    assert bisect_.FILES_TOUCHED.format(files="`ggml/ggml.c`, `notes/c21.txt`") in report
    assert said(bisect_.LAST_GOOD, report, sha=bisect_fork.c(REGRESSION - 1), subject="notes: commit 20")
    assert report.count("\n| ") == len(steps) + 2  # the header, its rule and a row per step
    assert "git bisect start" in report
    assert f"# first bad commit: [{first_bad}]" in report
    records = ledger.read(bisect_project.root / "build" / "results" / "ledger.jsonl").records
    assert len(records) == len(steps) - 1  # every step but the skipped one ran the gate
    assert all(r.build_key.startswith(bisect_.KEY_PREFIX) and r.gate == "backend_ops" for r in records)
    assert {r.data["pin"] for r in records} <= set(bisect_fork.commits)


def test_ship_never_counts_a_step_even_at_the_pins_own_build(bisect_project: Project, bisect_fork: BisectFork) -> None:
    """--check-good builds and judges the pin itself (the default --good): same build, same key, and still its
    record is the bisection's, not the pin's."""
    code, out, err = bisect(bisect_project, bisect_fork, "--check-good", "--max-steps", "1")
    assert code == 1, out + err
    # the backend_ops gate's summary as the step's reason, its end unknown here
    check_good = partly(bisect_.STEP_DONE, step="check-good", result=bisect_.STEP_RESULT)
    passed = partly(backend_ops_judge.PASSED_AS_PINNED, device="CPU", tallies=TALLY_36)
    assert said(partly(check_good, commit=bisect_fork.fork.f0[:7], outcome=bisect_.Outcome.GOOD.value, reason=passed), out)
    assert said(bisect_.STOPPED, out, steps="1 step")
    assert_at_pin_and_series(bisect_project, bisect_fork)
    assert build_cpu(bisect_project).code == 0
    key = manifest(bisect_project)["key"]
    records = ledger.read(bisect_project.root / "build" / "results" / "ledger.jsonl").records
    assert records[0].build_key == bisect_.KEY_PREFIX + key  # the check-good step built exactly the pin's build
    assert records[0].verdict == "passed"
    r = bisect_project.ci("ship", "--profile", "cpu", "--check")
    assert r.code == 7, r.out + r.err
    row = next(ln for ln in r.out.splitlines() if ln.lstrip().startswith("backend_ops"))
    assert "passed" not in row.split()[:2], r.out


def test_max_steps_stops_with_the_range_left(bisect_project: Project, bisect_fork: BisectFork) -> None:
    code, out, err = bisect(bisect_project, bisect_fork, "--max-steps", "2")
    assert code == 1, out + err
    line = next(ln for ln in out.splitlines() if pattern(bisect_.STOPPED, steps="2 steps").match(ln))
    left = int(line.split(" with ")[1].split()[0])
    assert 1 < left < 32
    assert_at_pin_and_series(bisect_project, bisect_fork)
    assert said(bisect_.STOPPED_SECTION, (bisect_project.root / "build" / "bisect" / "report.md").read_text())


def in_session(sid: int, text: str) -> list[str]:
    """The live processes of session ``sid`` (the bisect started its own) whose command line holds ``text``: other
    engineers' builds may sleep the same way."""
    found = []
    for line in live_processes_naming(text):
        pid = line.split(":")[0]
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            continue
        if int(stat[stat.rfind(")") + 2 :].split()[3]) == sid:
            found.append(line)
    return found


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_mid_step_leaves_the_checkout_at_pin_and_series(
    bisect_project: Project, bisect_fork: BisectFork, sig: signal.Signals, tmp_path: Path
) -> None:
    """The first step's build sleeps 60 s (the fixture's FIXTURE_SLOW); the signal lands while it runs."""
    env = {**os.environ, "ONEBIT_CMAKE_ARGS": f"{replay_flags()} -DFIXTURE_SLOW=ON", "PYTHONPATH": str(Path(__file__).resolve().parents[3])}
    argv = [sys.executable, "-m", "ci", "--root", str(bisect_project.root), "bisect", "--profile", "cpu", "--gate", "backend_ops",
            "--remote", str(bisect_fork.path), "--bad", bisect_fork.c(32)]  # fmt: skip
    log = tmp_path / "bisect.log"
    with log.open("w") as fh:
        proc = subprocess.Popen(argv, stdout=fh, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    try:
        deadline = time.monotonic() + 120
        while not (sleeping := in_session(proc.pid, "-E sleep 60")) and time.monotonic() < deadline:
            assert proc.poll() is None, log.read_text()
            time.sleep(0.2)
        assert sleeping, log.read_text()
        assert said(bisect_.STEP_START, log.read_text(), step=1, expected=5)
        if sig is signal.SIGINT:
            os.killpg(proc.pid, sig)  # Ctrl-C: the terminal signals the whole foreground group
        else:
            proc.send_signal(sig)
        code = proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    text = log.read_text()
    assert code == 130, text
    assert cli.INTERRUPTED in text
    assert bisect_.PUT_BACK.format(commit=bisect_fork.fork.f0[:7]) in text
    assert_at_pin_and_series(bisect_project, bisect_fork)
    assert live_processes_naming(str(bisect_project.root)) == []
    assert in_session(proc.pid, "") == []  # the build's whole tree ended with it


def test_check_good_refuses_a_good_end_that_fails_and_expect_replaces_the_pins_counts(
    bisect_project: Project, bisect_fork: BisectFork
) -> None:
    """The pin's test-backend-ops counts need not hold in the range: --check-good says so before bisecting, and
    --expect gives the range's own."""
    bisect_project.pins.write_text(bisect_project.pins.read_text().replace("GATED_DELTA_NET: 36", "GATED_DELTA_NET: 54"))
    code, out, err = bisect(bisect_project, bisect_fork, "--check-good")
    assert code == 4, out + err
    # the backend_ops gate's summary as the reason, its end unknown here
    refused = partly(cli.ERROR, message=bisect_.GOOD_END_FAILS)
    failed = partly(backend_ops_judge.FAILED_SUMMARY, device="CPU", tallies=backend_ops_judge.TALLY.format(op="GATED_DELTA_NET", passed=36, expected=54))
    assert said(partly(refused, commit=bisect_fork.fork.f0[:7], outcome=bisect_.Outcome.BAD.value, gate="backend_ops", reason=failed), err)
    assert_at_pin_and_series(bisect_project, bisect_fork)
    code, out, err = bisect(bisect_project, bisect_fork, "--check-good", "--expect", "GATED_DELTA_NET=36", "--max-steps", "1")
    assert code == 1, out + err
    check_good = partly(bisect_.STEP_DONE, step="check-good", result=bisect_.STEP_RESULT)
    passed = partly(backend_ops_judge.PASSED_AS_PINNED, device="CPU", tallies=TALLY_36)
    assert said(partly(check_good, commit=bisect_fork.fork.f0[:7], outcome=bisect_.Outcome.GOOD.value, reason=passed), out)
