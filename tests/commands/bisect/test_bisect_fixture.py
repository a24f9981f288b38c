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

from ci.git import Git
from ci.release import ledger
from tests.support.bisect_fork import CONFLICT, PATCH_NEW, REGRESSION, SERVER, BisectFork
from tests.support.build import build_cpu, manifest, replay_flags
from tests.support.processes import live_processes_naming
from tests.support.project import Project

pytestmark = pytest.mark.slow


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
    assert "bisect: 32 commits, about 5 steps" in out.replace(
        f"backend_ops on cpu, {bisect_fork.fork.f0[:7]} (good) .. {bisect_fork.c(32)[:7]} (bad): ", ""
    )
    assert f"bisect: {first_bad[:7]} is the first bad commit for backend_ops (ggml: fold the answer's rounding into the kernel), " in out
    steps = [ln for ln in out.splitlines() if ln.startswith("bisect: step ") and "/" in ln.split()[2]]
    assert 1 <= len(steps) <= 6, "\n".join(steps)
    skipped = [ln for ln in steps if " skip: " in ln]
    assert len(skipped) == 1
    assert skipped[0].split()[3] == bisect_fork.c(CONFLICT)[:7]
    assert "the series does not apply: patches/banner.patch: conflicts (tools/server/server.cpp: hunk 1" in skipped[0]
    assert "  files: ggml/ggml.c, notes/c21.txt" in out
    assert "  backend_ops: GATED_DELTA_NET: 36 expected, 36 ran, 35 passed" in out
    assert f"  last good: {bisect_fork.c(REGRESSION - 1)[:7]} notes: commit 20" in out
    assert_at_pin_and_series(bisect_project, bisect_fork)
    report = (bisect_project.root / "build" / "bisect" / "report.md").read_text()
    assert f"**First bad commit: `{first_bad}`** ggml: fold the answer's rounding into the kernel" in report
    assert "Files touched: `ggml/ggml.c`, `notes/c21.txt`" in report
    assert f"Last good: `{bisect_fork.c(REGRESSION - 1)}` notes: commit 20" in report
    assert report.count("\n| ") == len(steps) + 2  # the header, its rule and a row per step
    assert "git bisect start" in report
    assert f"# first bad commit: [{first_bad}]" in report
    records = ledger.read(bisect_project.root / "build" / "results" / "ledger.jsonl").records
    assert len(records) == len(steps) - 1  # every step but the skipped one ran the gate
    assert all(r.build_key.startswith("bisect:") and r.gate == "backend_ops" for r in records)
    assert {r.data["pin"] for r in records} <= set(bisect_fork.commits)


def test_ship_never_counts_a_step_even_at_the_pins_own_build(bisect_project: Project, bisect_fork: BisectFork) -> None:
    """--check-good builds and judges the pin itself (the default --good): same build, same key, and still its
    record is the bisection's, not the pin's."""
    code, out, err = bisect(bisect_project, bisect_fork, "--check-good", "--max-steps", "1")
    assert code == 1, out + err
    assert "bisect: step check-good: " in out
    assert " good: PASSED on CPU" in out
    assert "bisect: stopped after 1 step (--max-steps) with " in out
    assert_at_pin_and_series(bisect_project, bisect_fork)
    assert build_cpu(bisect_project).code == 0
    key = manifest(bisect_project)["key"]
    records = ledger.read(bisect_project.root / "build" / "results" / "ledger.jsonl").records
    assert records[0].build_key == "bisect:" + key  # the check-good step built exactly the pin's build
    assert records[0].verdict == "passed"
    r = bisect_project.ci("ship", "--profile", "cpu", "--check")
    assert r.code == 7, r.out + r.err
    row = next(ln for ln in r.out.splitlines() if ln.lstrip().startswith("backend_ops"))
    assert "passed" not in row.split()[:2], r.out


def test_max_steps_stops_with_the_range_left(bisect_project: Project, bisect_fork: BisectFork) -> None:
    code, out, err = bisect(bisect_project, bisect_fork, "--max-steps", "2")
    assert code == 1, out + err
    line = next(ln for ln in out.splitlines() if ln.startswith("bisect: stopped after 2 steps (--max-steps) with "))
    left = int(line.split(" with ")[1].split()[0])
    assert 1 < left < 32
    assert_at_pin_and_series(bisect_project, bisect_fork)
    assert "Stopped by --max-steps with" in (bisect_project.root / "build" / "bisect" / "report.md").read_text()


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
    env = {**os.environ, "ONEBIT_CMAKE_ARGS": f"{replay_flags()} -DFIXTURE_SLOW=ON", "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
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
        assert "bisect: step 1 (of about 5)" in log.read_text()
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
    assert "onebit-ci: interrupted" in text
    assert f"bisect: the checkout is back at the pin {bisect_fork.fork.f0[:7]} + the series" in text
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
    assert (
        f"onebit-ci: error: --check-good: the good end {bisect_fork.fork.f0[:7]} is bad for backend_ops (FAILED on CPU: GATED_DELTA_NET 36/54 passed"
        in err
    )
    assert_at_pin_and_series(bisect_project, bisect_fork)
    code, out, err = bisect(bisect_project, bisect_fork, "--check-good", "--expect", "GATED_DELTA_NET=36", "--max-steps", "1")
    assert code == 1, out + err
    assert "bisect: step check-good: " in out
    assert " good: PASSED on CPU: GATED_DELTA_NET 36/36 passed" in out
