"""bisect's pure parts (steps expected, a gate's result as good/bad/skip, what git bisect said, the report) and the
checks made before the checkout is touched, on the small fixture fork (c0..c6)."""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from ci import cli, schema
from ci.commands import bisect
from ci.commands.job import Job
from ci.gates import registry
from ci.gates.perf.judge import INCONCLUSIVE
from ci.gates.results import CaseResult, GateResult, Status
from ci.release import ledger
from ci.source import store, sync
from tests.support.project import Fork, Project


@pytest.mark.parametrize(("commits", "steps"), [(1, 0), (2, 1), (32, 5), (33, 6), (60, 6), (141, 8)])
def test_expected_steps_is_log2_of_the_commits_in_range(commits: int, steps: int) -> None:
    assert bisect.expected_steps(commits) == steps


def result(gate: str, status: Status, *cases: CaseResult) -> GateResult:
    return GateResult(gate, status, f"{status.value.upper()}: summary", cases)


def test_a_pass_is_good_a_failure_bad_and_a_gate_that_could_not_judge_skips() -> None:
    assert bisect.outcome_of(result("backend_ops", Status.PASSED)) == (bisect.Outcome.GOOD, "PASSED: summary")
    assert bisect.outcome_of(result("backend_ops", Status.FAILED)) == (bisect.Outcome.BAD, "FAILED: summary")
    assert bisect.outcome_of(result("equivalence", Status.ERROR))[0] is bisect.Outcome.SKIP
    assert bisect.outcome_of(result("route", Status.SKIPPED))[0] is bisect.Outcome.SKIP


def test_perf_is_bad_when_a_check_fails_and_skips_when_still_inconclusive_after_more_rounds() -> None:
    fails = CaseResult("decode", Status.FAILED, "decode = 0.8 (95% interval 0.7-0.9, 10 rounds) against the floor 1: fails")
    straddles = CaseResult("prefill", Status.FAILED, f"prefill = 1.0 (95% interval 0.9-1.1, 10 rounds) against the floor 1: {INCONCLUSIVE}", inconclusive=True)
    holds = CaseResult("code", Status.PASSED, "code = 1.5: passes")
    outcome, why = bisect.outcome_of(result("perf", Status.FAILED, straddles, holds))
    assert outcome is bisect.Outcome.SKIP
    assert why == bisect.INCONCLUSIVE_STEP.format(gate="perf", summary="FAILED: summary")
    assert bisect.outcome_of(result("perf", Status.FAILED, fails, straddles))[0] is bisect.Outcome.BAD
    assert bisect.outcome_of(result("perf", Status.FAILED, fails))[0] is bisect.Outcome.BAD


def run_git_bisect(tmp_path: Path) -> tuple[str, str, list[str]]:
    """Real git bisect output: one run to a first bad commit, one ending on skipped commits only."""
    repo = tmp_path / "r"
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    shas = []
    for i in range(8):
        (repo / "f").write_text(f"{i}\n")
        subprocess.run(["git", "-C", str(repo), "add", "f"], check=True)
        subprocess.run(["git", "-C", str(repo), "commit", "-qm", f"c{i}"], check=True)
        shas.append(
            subprocess.run(["git", "-C", str(repo), "rev-parse", "HEAD"], capture_output=True, text=True, check=True).stdout.strip()
        )

    def git(*args: str) -> str:
        return subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True).stdout

    git("bisect", "start", "--no-checkout", shas[7], shas[0])
    for sha in shas[1:4]:
        said = git("bisect", "good", sha)
    said = git("bisect", "bad", shas[4])
    found = said
    git("bisect", "reset")
    git("bisect", "start", "--no-checkout", shas[7], shas[0])
    for sha in shas[1:7]:
        said = git("bisect", "skip", sha)
    return found, said, shas


def test_what_git_bisect_said_is_read_from_its_own_output(tmp_path: Path) -> None:
    found, skipped, shas = run_git_bisect(tmp_path)
    assert bisect.parse_bisect(found) == bisect.GitSaid(first_bad=shas[4])
    said = bisect.parse_bisect(skipped)
    assert said.first_bad is None
    assert set(said.only_skipped) == set(shas[1:8])
    assert bisect.parse_bisect("Bisecting: 3 revisions left to test after this (roughly 2 steps)\n") == bisect.GitSaid()


def test_the_bump_reports_ends_are_read_from_its_from_and_to_lines() -> None:
    text = (
        "## Bump the ROCmFPX pin: aaaaaaa -> bbbbbbb\n\n- Fork: https://x, branch `main`\n- From: `"
        + "a" * 40
        + "` (ROCmFPX#2)\n- To: `"
        + "b" * 40
        + "` (ROCmFPX#3)\n"
    )
    assert bisect.bump_ends(text) == ("a" * 40, "b" * 40)
    assert bisect.bump_ends("no report\n") == (None, None)


def answer(**kw: object) -> bisect.BisectAnswer:
    bad = bisect.Commit("b" * 40, "ggml: the change", ("ggml/x.c",))
    good = bisect.Commit("a" * 40, "notes | a pipe")
    steps = (
        bisect.Step(1, good, bisect.Outcome.GOOD, "PASSED", build_seconds=4.0, gate_seconds=1.0, seconds=5.0, ledger_line=3),
        bisect.Step(2, bad, bisect.Outcome.BAD, "FAILED: 35/36", ("GATED_DELTA_NET: 36 expected, 35 passed",), 3.0, 1.0, 4.0),
    )
    base: dict[str, object] = {
        "gate": "backend_ops",
        "profile": "cpu",
        "good": "0" * 40,
        "bad": "f" * 40,
        "commits": 4,
        "expected": 2,
        "steps": steps,
        "first_bad": bad,
        "log": "git bisect start\n",
        "seconds": 9.5,
    }
    base |= kw
    return bisect.BisectAnswer(**base)  # type: ignore[arg-type]


def test_the_report_names_the_first_bad_commit_its_files_its_problem_the_last_good_and_every_step() -> None:
    text = bisect.markdown(answer())
    assert bisect.FIRST_BAD_HEADING.format(sha="b" * 40, subject="ggml: the change") in text
    assert bisect.FILES_TOUCHED.format(files="`ggml/x.c`") in text
    assert bisect.PROBLEM_ITEM.format(problem="GATED_DELTA_NET: 36 expected, 35 passed") in text
    last_good = bisect.LAST_GOOD.format(sha="a" * 40, subject="notes | a pipe", reason="PASSED") + bisect.LEDGER_LINE.format(line=3)
    assert last_good in text
    row = bisect.STEP_ROW.format
    assert row(step=1, commit="aaaaaaa", subject="notes / a pipe", verdict="good", build=4.0, gate=1.0, total=5.0, why="PASSED") in text
    assert row(step=2, commit="bbbbbbb", subject="ggml: the change", verdict="bad", build=3.0, gate=1.0, total=4.0, why="FAILED: 35/36") in text  # fmt: skip
    assert bisect.LOG_BLOCK.format(log="git bisect start") in text


def test_the_report_without_an_answer_says_what_is_left() -> None:
    skipped = answer(first_bad=None, candidates=(bisect.Commit("c" * 40, "one"), bisect.Commit("d" * 40, "two")))
    one, two = bisect.CANDIDATE_ITEM.format(sha="c" * 40, subject="one"), bisect.CANDIDATE_ITEM.format(sha="d" * 40, subject="two")
    assert f"{bisect.ONLY_SKIPPED_SECTION}\n\n{one}\n{two}" in bisect.markdown(skipped)
    headline = bisect.ONLY_SKIPPED_LEFT.format(gate="backend_ops", commits="ccccccc, ddddddd", steps="2 steps", seconds=9.5)
    assert skipped.headline() == headline
    stopped = answer(first_bad=None, left=("e" * 40, "f" * 40))
    assert bisect.STOPPED_SECTION.format(left="2 commits", commits="`eeeeeee`, `fffffff`") in bisect.markdown(stopped)


# -- before anything is touched -------------------------------------------------------------------------------------


def request(fork: Fork, **kw: object) -> bisect.BisectRequest:
    base: dict[str, object] = {"profile": "cpu", "remote": str(fork.path), "gate": "backend_ops"}
    return bisect.BisectRequest(**(base | kw))  # type: ignore[arg-type]


def ctx_of(project: Project) -> Job:
    return Job.resolve(project.root)


def test_the_ends_default_to_the_pin_and_the_bump_reports_target(project: Project, fork: Fork) -> None:
    report = project.root / "build" / "bump-report.md"
    report.parent.mkdir(parents=True)
    report.write_text(f"## Bump\n\n- From: `{fork.c1}` (ROCmFPX#2)\n- To: `{fork.c6}` (ROCmFPX#3)\n")
    job = bisect.resolve(ctx_of(project), request(fork), lambda line: None)
    assert (job.good, job.bad, job.gate.name) == (fork.c1, fork.c6, "backend_ops")
    assert not project.submodule.exists() or not any(project.submodule.iterdir())  # nothing checked out yet


def test_when_the_pin_is_already_the_bumps_target_the_good_end_is_the_bumps_start(project: Project, fork: Fork) -> None:
    project.pins.write_text(project.pins.read_text().replace(fork.c1, fork.c6))
    cacheinfo = f"160000,{fork.c6},third_party/llama.cpp-rocmfpx"  # the gitlink moved too, as bump_pin leaves it
    subprocess.run(["git", "update-index", "--cacheinfo", cacheinfo], cwd=project.root, check=True, capture_output=True)
    report = project.root / "build" / "bump-report.md"
    report.parent.mkdir(parents=True)
    report.write_text(f"- From: `{fork.c1}`\n- To: `{fork.c6}`\n")
    job = bisect.resolve(ctx_of(project), request(fork), lambda line: None)
    assert (job.good, job.bad) == (fork.c1, fork.c6)


@pytest.mark.parametrize("start", ["elsewhere", "w1"])
def test_a_good_end_from_the_bump_report_that_is_no_good_end_here_says_where_it_came_from(project: Project, fork: Fork, start: str) -> None:
    """After a bump to another fork the report's From is the old fork's commit: not in this fork at all, or not in
    the To's history. The default bisect had failed on it without naming the report (issue 37, item 5)."""
    project.pins.write_text(project.pins.read_text().replace(fork.c1, fork.c6))
    cacheinfo = f"160000,{fork.c6},third_party/llama.cpp-rocmfpx"
    subprocess.run(["git", "update-index", "--cacheinfo", cacheinfo], cwd=project.root, check=True, capture_output=True)
    old = "ab" * 20 if start == "elsewhere" else fork.w1
    report = project.root / "build" / "bump-report.md"
    report.parent.mkdir(parents=True)
    report.write_text(f"- Fork: https://example.invalid/other.git, branch `main` (was https://example.invalid/old.git)\n- From: `{old}`\n- To: `{fork.c6}`\n")
    r = project.ci("bisect", "--profile", "cpu", "--remote", str(fork.path), "--gate", "backend_ops")
    assert r.code == 2, r.out + r.err
    assert r.err.count("\n") == 1
    problem = store.NOT_IN_FORK.format(spec=old) if start == "elsewhere" else bisect.REPORT_NOT_ANCESTOR.format(good=old[:7], bad=fork.c6[:7], relation="sideways")
    said_so = bisect.FROM_BUMP_REPORT.format(problem=problem, report="build/bump-report.md", start=old[:12], target=fork.c6[:12])
    assert r.err == cli.ERROR.format(message=said_so) + "\n"
    # given --good, the report's From is not used
    job = bisect.resolve(ctx_of(project), request(fork, good=fork.c1), lambda line: None)
    assert (job.good, job.bad) == (fork.c1, fork.c6)


def test_the_gate_defaults_to_the_newest_failed_record_at_the_bad_end(project: Project, fork: Fork) -> None:
    path = ledger.ledger_path(project.root / "build" / "results")
    ledger.append(path, GateResult("equivalence", Status.FAILED, "elsewhere"), ledger.BuildContext("k1", fork.c4, "", "cpu"))
    ledger.append(path, GateResult("backend_ops", Status.FAILED, "at the bad end"), ledger.BuildContext("k2", fork.c6, "", "cpu"))
    ledger.append(path, GateResult("route", Status.FAILED, "a step"), ledger.BuildContext("bisect:k3", fork.c6, "", "cpu"))
    job = bisect.resolve(ctx_of(project), request(fork, gate=None, bad=fork.c6), lambda line: None)
    assert job.gate.name == "backend_ops"


UNKNOWN_GATE = registry.UNKNOWN_GATE.format(
    gate="backend_opz", suggestion=schema.DID_YOU_MEAN.format(choice="backend_ops"), known=", ".join(registry.runnable())
)


@pytest.mark.parametrize(
    ("kw", "code", "message"),
    [
        ({}, 2, lambda fork: bisect.NO_BAD.format(report="build/bump-report.md")),
        ({"bad": "c1", "good": "c6"}, 2, lambda fork: bisect.NOT_ANCESTOR.format(good=fork.c6[:7], bad=fork.c1[:7], relation="rollback")),
        ({"bad": "c6", "gate": "backend_opz"}, 2, lambda fork: UNKNOWN_GATE),
        ({"bad": "c6", "gate": None}, 2, lambda fork: bisect.NO_GATE.format(profile="cpu", gates="|".join(registry.runnable()))),
        ({"bad": "c6", "max_steps": 0}, 2, lambda fork: bisect.MAX_STEPS_TOO_FEW.format(max_steps=0)),
    ],
)
def test_bad_input_is_one_line_and_touches_nothing(
    project: Project, fork: Fork, kw: dict[str, str], code: int, message: Callable[[Fork], str]
) -> None:
    args = ["bisect", "--profile", "cpu", "--remote", str(fork.path)]
    for name, value in ({"gate": "backend_ops"} | kw).items():
        if value is not None:
            args += [f"--{name.replace('_', '-')}", getattr(fork, value) if name in ("good", "bad") else str(value)]
    r = project.ci(*args)
    assert r.code == code, r.out + r.err
    assert r.err.count("\n") == 1
    assert r.err.startswith(cli.ERROR.format(message=message(fork)))
    assert not project.submodule.exists() or not any(project.submodule.iterdir())


def test_a_bump_report_that_is_not_utf8_is_one_line(project: Project, fork: Fork) -> None:
    """Before: 'internal error: UnicodeDecodeError', exit 70 (a hostile pass)."""
    report = project.root / "build" / "bump-report.md"
    report.parent.mkdir(parents=True)
    report.write_bytes(b"- To: \xff\xfe\n")
    r = project.ci("bisect", "--profile", "cpu", "--remote", str(fork.path), "--gate", "route")
    assert (r.code, r.err) == (2, cli.ERROR.format(message=bisect.REPORT_NOT_UTF8.format(report="build/bump-report.md", byte=0xFF)) + "\n")
    assert report.read_bytes() == b"- To: \xff\xfe\n"


def test_a_bisection_already_under_way_is_refused(project: Project, fork: Fork) -> None:
    assert project.ci("patches", "--remote", str(fork.path)).code == 0
    gitdir = project.root / ".git" / "modules" / "third_party" / "llama.cpp-rocmfpx"
    (gitdir / "BISECT_START").write_text("main\n")
    r = project.ci("bisect", "--profile", "cpu", "--gate", "backend_ops", "--bad", fork.c6)
    assert r.code == 4
    assert bisect.UNDER_WAY.format(name="third_party/llama.cpp-rocmfpx") in r.err


def test_a_checkout_holding_someone_elses_changes_is_refused_untouched(project: Project, fork: Fork) -> None:
    assert project.ci("patches", "--remote", str(fork.path)).code == 0
    edited = project.submodule / "README.md"
    edited.write_text("my work\n")
    r = project.ci("bisect", "--profile", "cpu", "--gate", "backend_ops", "--bad", fork.c6)
    assert r.code == 4
    at = sync.AT_COMMIT.format(commit=fork.c1[:7])
    assert sync.LOCAL_CHANGES.format(name="third_party/llama.cpp-rocmfpx", at=at, listing="README.md") in r.err
    assert edited.read_text() == "my work\n"


def test_the_perf_gate_marks_a_straddling_check_inconclusive_as_a_field_not_a_message() -> None:
    """What bisect reads is the case's field, which the perf judge sets: a regression is decisive even so."""
    from ci.gates.perf import judge as perf
    from ci.pin.claims import parse_check

    check = parse_check("decode(draft) / decode(base) >= 1.0", "test", 0.05, "test")
    straddling = perf.judge_check(check, [0.8, 1.2, 0.9, 1.1, 1.0, 0.95, 1.05], None, "a" * 40)
    assert straddling.inconclusive
    assert straddling.status is Status.FAILED
    (case,) = perf.result([straddling], None, "a" * 40, "tiny", 1.0).cases
    assert case.inconclusive
    regressed = perf.judge_check(check, [0.8, 1.2, 0.9, 1.1, 1.0, 0.95, 1.05], perf.Released("b" * 40, {check.name: 2.0}), "a" * 40)
    assert not regressed.inconclusive
    assert regressed.status is Status.FAILED
