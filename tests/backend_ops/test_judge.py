"""Every verdict of the judge, on real captures and logs derived from them."""

from __future__ import annotations

from pathlib import Path

import pytest

from ci import errors
from ci.errors import ConfigError
from ci.gates.backend_ops import judge as judging
from ci.gates.backend_ops import run as backend_ops
from ci.gates.backend_ops import spec as bo_spec
from ci.gates.backend_ops.judge import judge
from ci.gates.backend_ops.output import CaseMark, parse_console, parse_sql
from ci.gates.backend_ops.run import judge_log
from ci.gates.backend_ops.spec import EXPECTED_BY_FLAG, EXPECTED_IN_PINS, ConsoleRun, DirtyRule, GateSpec, Outcome, SqlRun
from ci.gates.results import GateResult, Status
from tests.support.backend_ops import CAPTURE_COMMIT, DATA, ENGINE_PIN, OP, text
from tests.support.derive import ABORT_LINE
from tests.support.messages import partly, pattern, said

FORK_SQL = "h200-cuda0-rocmfpx-c14872f.sql.txt"
RUN = judging.LABEL_RUN.format(op=OP, device="CUDA0")  # what a console run of the op on CUDA0 is called
SQL = judging.SQL_LABEL
STATUS_0 = errors.STATUS.format(code=0)  # a run that exited 0, in words
CUT_SHORT = partly(judging.CUT_SHORT, seen=judging.SEEN_CASES)  # a run cut short after case lines: its fields and theirs
# the last case line of h200-cuda0-abort.console.txt, whose status the abort lost
ABORT_CASE = f"{OP}(type=f32,head_count=4,head_size=16,n_seq_tokens=1,n_seqs=2,v_repeat=1,permuted=0,kda=1,K=1)"
ABORT_TALLY = ", ".join((judging.SEEN_OK.format(count=12), judging.SEEN_FAIL.format(count=0), judging.SEEN_NO_STATUS.format(count=1, case=ABORT_CASE)))


def counted(expected: int, ran: int, passed: int, op: str = OP) -> str:
    """The count problem of an op whose expectation is pins.yaml's."""
    return judging.COUNT.format(op=op, expected=expected, source=EXPECTED_IN_PINS.format(op=op, expected=expected), ran=ran, passed=passed)


def tally(passed: int, expected: int) -> str:
    return judging.TALLY.format(op=OP, passed=passed, expected=expected)


def skipped(device: str) -> str:
    return judging.LISTED_SKIPPED.format(device=device)


def from_log(name: str, device: str = "CUDA0", expected: int = 36, **kwargs: object) -> GateResult:
    return judge_log(DATA / name, device, {OP: expected}, **kwargs)  # type: ignore[arg-type]


def from_log_text(body: str, device: str = "CUDA0", expected: int = 36) -> GateResult:
    return judge(spec(device, expected, pinned=None), [ConsoleRun(parse_console(body), Outcome(), None, "forged.log")], None)


def spec(device: str = "CUDA0", expected: int = 36, pinned: str | None = CAPTURE_COMMIT, patched: bool = True, **kw: object) -> GateSpec:
    return GateSpec.make(device, {OP: expected}, pinned, patched, **kw)  # type: ignore[arg-type]


def ran(name: str, returncode: int | None = 0, timed_out: bool = False, timeout: float | None = 600.0) -> ConsoleRun:
    return ConsoleRun(parse_console(text(name)), Outcome(returncode, timed_out, timeout, 1.5), OP, f"logs/{name}")


def sql_run(body: str, returncode: int | None = 0, timed_out: bool = False) -> SqlRun:
    return SqlRun(parse_sql(body), Outcome(returncode, timed_out, 600.0), "logs/sql")


def props(result: GateResult) -> dict[str, str]:
    return dict(result.properties)


# -- passing ------------------------------------------------------------------------------------------------


def test_the_real_h200_run_with_the_fork_sql_passes() -> None:
    result = judge(spec(), [ran("h200-cuda0.console.txt")], sql_run(text(FORK_SQL)))
    assert result.problems == ()
    assert result.status is Status.PASSED
    assert result.summary == judging.PASSED_AS_PINNED.format(device="CUDA0", tallies=tally(36, 36), build_commit="c14872f-dirty", pin="c14872f")
    assert result.count("passed") == 36
    assert result.count("expected") == 36
    p = props(result)
    assert (p["device"], p["op"], p["pin"], p["build_commit"], p["build_commit_check"], p["sql_cross_check"]) == (
        "CUDA0", OP, CAPTURE_COMMIT, "c14872f-dirty", "passed", "made",
    )
    assert (p["exit.GATED_DELTA_NET"], p["exit.sql"], p["dirty_rule"], p["patched"], p["source"]) == (STATUS_0, STATUS_0, "dirty", "yes", "run")
    # which GPU ran is in the record: the backend's own device line and test-backend-ops' description
    assert p["backend_info"] == "Device 0: NVIDIA H200, compute capability 9.0, VMM: yes, VRAM: 143155 MiB"
    assert p["device_description"] == "NVIDIA H200"


def test_a_saved_log_passes_but_says_the_cross_check_was_not_made() -> None:
    result = from_log("h200-cuda0.console.txt", pinned_commit=ENGINE_PIN)
    assert result.ok
    assert props(result)["sql_cross_check"] == backend_ops.SAVED_LOG
    assert props(result)["build_commit"] == judging.BUILD_COMMIT_NOT_SEEN
    assert props(result)["source"] == judging.SOURCE_SAVED_LOG
    assert result.summary == judging.PASSED_UNCHECKED.format(device="CUDA0", tallies=tally(36, 36), check=judging.NO_SQL_OUTPUT)


def test_stderr_between_case_and_status_still_passes() -> None:
    assert from_log("h200-cuda0-interleaved.console.txt").ok


# -- the device did not run ---------------------------------------------------------------------------------


def test_an_unknown_device_name() -> None:
    result = from_log("cpu-b-nope.console.txt", device="NOPE")
    assert not result.ok
    assert result.problems == (judging.NO_SUCH_DEVICE.format(device="NOPE", listed=skipped("CPU"), verdict="OK"),)


def test_a_cpu_only_build_without_b() -> None:
    result = from_log("cpu-no-b.console.txt", device="CPU")
    assert result.problems == (judging.DEVICE_SKIPPED.format(device="CPU", skipped='"Skipping CPU backend"', hint=judging.HINT_CPU_WITHOUT_B),)


def test_every_device_skipped_on_a_gpu_box() -> None:
    result = from_log("h200-rocm0-skipped.console.txt", device="ROCm0")
    listed = f"{skipped('CUDA0')}, {skipped('CPU')}"
    assert result.problems[0] == judging.NO_SUCH_DEVICE.format(device="ROCm0", listed=listed, verdict="OK")


def test_a_device_that_was_skipped_while_another_ran() -> None:
    result = from_log("h200-cuda0.console.txt", device="CPU")
    assert result.problems == (judging.DEVICE_SKIPPED.format(device="CPU", skipped='"Skipping"', hint=judging.HINT_OTHER_B.format(device="CPU")),)


def test_a_device_absent_while_another_ran() -> None:
    result = from_log("h200-cuda0.console.txt", device="ROCm0")
    assert result.problems == (judging.NOT_LISTED.format(device="ROCm0", listed=f"CUDA0, {skipped('CPU')}", tested="CUDA0"),)


def test_two_reports_in_one_log(tmp_path: Path) -> None:
    log = tmp_path / "twice.log"
    log.write_text(text("cpu.console.txt") + text("cpu-fail.console.txt"))
    result = judge_log(log, "CPU", {OP: 36})
    assert result.problems == (judging.REPORTED_TWICE.format(label=judging.LABEL_LOG.format(log=log), device="CPU"),)


def test_output_that_is_not_test_backend_ops(tmp_path: Path) -> None:
    log = tmp_path / "log.txt"
    log.write_text("Segmentation fault\n")
    result = judge_log(log, "ROCm0", {OP: 54})
    assert result.problems[0] == judging.CUT_SHORT.format(
        label=judging.LABEL_LOG.format(log=log), subject=judging.CUT_SUBJECT_LOG, how=judging.HOW_STOPPED,
        seen=judging.SEEN_NOTHING.format(device="ROCm0"), rest=judging.REST_NOT_RUN.format(op=OP, left=54, expected=54),
    ) + judging.LAST_OUTPUT.format(last='"Segmentation fault"')  # fmt: skip


# -- counts -------------------------------------------------------------------------------------------------


def test_fewer_cases_than_the_pin_expects() -> None:
    result = from_log("h200-cuda0.console.txt", expected=54)
    assert result.problems == (counted(54, 36, 36) + judging.COUNT_CHANGED,)
    # issue 37: the message says where the 54 comes from, and where to set it
    assert result.problems[0] == (
        "GATED_DELTA_NET: 54 expected (pins.yaml expect.backend_ops.GATED_DELTA_NET), 36 ran, 36 passed; if the fork's count changed, set it there"
    )
    assert result.summary == judging.FAILED_SUMMARY.format(device="CUDA0", tallies=tally(36, 54), problems="1 problem")
    assert result.count("expected") == 54


def test_more_cases_than_the_pin_expects() -> None:
    result = from_log("h200-cuda0.console.txt", expected=30)
    assert result.problems == (counted(30, 36, 36) + judging.COUNT_CHANGED,)


def test_an_expectation_given_by_flag_is_named_so() -> None:
    result = judge(GateSpec.make("CUDA0", {OP: 54}, None, False, expected_from=EXPECTED_BY_FLAG), [ran("h200-cuda0.console.txt")], None)
    source = EXPECTED_BY_FLAG.format(op=OP, expected=54)
    assert source == "--expect GATED_DELTA_NET=54"
    assert result.problems == (judging.COUNT.format(op=OP, expected=54, source=source, ran=36, passed=36) + judging.COUNT_CHANGED,)


def test_unsupported_cases_are_skipped_and_do_not_count() -> None:
    result = from_log("h200-cuda0-unsupported.console.txt")
    # 34 ran and 2 were refused: the fork's 36 cases are all there, so the count is not what changed
    assert result.problems == (counted(36, 34, 34) + judging.COUNT_UNSUPPORTED.format(unsupported=2, device="CUDA0"),)
    assert (result.count("passed"), result.count("skipped")) == (34, 2)
    assert {c.message for c in result.cases if c.status is Status.SKIPPED} == {judging.NOT_SUPPORTED_CASE.format(reason="CUDA0")}
    assert from_log("h200-cuda0-unsupported.console.txt", expected=34).ok


def test_an_op_with_no_case_at_all() -> None:
    result = judge_log(DATA / "h200-cuda0.console.txt", "CUDA0", {OP: 36, "MUL_MAT": 5})
    assert result.problems == (counted(5, 0, 0, op="MUL_MAT") + judging.COUNT_NO_CASE.format(op="MUL_MAT"),)


def test_an_op_that_was_not_run() -> None:
    result = judge(GateSpec.make("CUDA0", {OP: 36, "MUL_MAT": 5}, None, False), [ran("h200-cuda0.console.txt")], None)
    assert judging.NOT_RUN_FOR.format(op="MUL_MAT") in result.problems


# -- failed cases -------------------------------------------------------------------------------------------


def test_failed_cases_are_named_with_their_message() -> None:
    result = from_log("h200-cuda0-fail.console.txt")
    assert result.problems == (
        counted(36, 36, 33),
        judging.FAILED_CASE.format(
            case=f"{OP}(type=f32,head_count=16,head_size=64,n_seq_tokens=1,n_seqs=2,v_repeat=1,permuted=0,kda=0,K=1)",
            why="[GATED_DELTA_NET] ERR = 0.012300000 > 0.000500000",
        ),
        judging.FAILED_CASE.format(
            case=f"{OP}(type=f32,head_count=4,head_size=64,n_seq_tokens=1,n_seqs=2,v_repeat=1,permuted=0,kda=1,K=1)",
            why="[GATED_DELTA_NET] NaN at index 17 (CUDA0=nan CPU=0.318254)",
        ),
        judging.FAILED_CASE.format(
            case=f"{OP}(type=f32,head_count=4,head_size=64,n_seq_tokens=127,n_seqs=1,v_repeat=1,permuted=0,kda=0,K=1)",
            why="[GATED_DELTA_NET] inf mismatch: CUDA0=inf CPU=1.250000",
        ),
    )
    failed = [c for c in result.cases if c.status is Status.FAILED]
    assert [c.message for c in failed] == [
        "[GATED_DELTA_NET] ERR = 0.012300000 > 0.000500000",
        "[GATED_DELTA_NET] NaN at index 17 (CUDA0=nan CPU=0.318254)",
        "[GATED_DELTA_NET] inf mismatch: CUDA0=inf CPU=1.250000",
    ]
    assert failed[0].classname == "backend_ops.CUDA0.GATED_DELTA_NET"


def test_a_failure_fails_even_when_the_count_is_met() -> None:
    result = from_log("cpu-fail.console.txt", device="CPU", expected=35)
    assert len(result.problems) == 1
    assert pattern(judging.FAILED_CASE, why="[GATED_DELTA_NET] ERR = 0.000203100 > 0.000000100").fullmatch(result.problems[0])


def test_an_allocation_failure_named_only_in_the_failing_list() -> None:
    result = from_log("h200-cuda0-alloc.console.txt")
    assert result.problems[0] == counted(36, 36, 35)
    assert result.problems[1] == judging.FAILED_CASE.format(
        case=f"{OP}(type=f32,head_count=32,head_size=16,n_seq_tokens=1,n_seqs=1,v_repeat=1,permuted=1,kda=1,K=1)",
        why=judging.LISTED_ONLY + judging.PRINTED_BEFORE.format(printed='"failed to allocate tensors [CUDA0]"'),
    )
    assert result.count("failed") == 1


def test_many_failures_are_listed_up_to_ten() -> None:
    lines = text("h200-cuda0.console.txt").split("\n")
    body = "\n".join(line.replace("\x1b[1;32mOK", "\x1b[1;31mFAIL") if line.startswith(f"  {OP}(") else line for line in lines)
    body = body.replace("36/36 tests passed", "0/36 tests passed")
    result = judge(spec(patched=False), [ConsoleRun(parse_console(body), Outcome(1), OP)], None)
    assert result.count("failed") == 36
    listed = [p for p in result.problems if said(judging.FAILED_CASE, p)]
    assert len(listed) == 10
    assert judging.MORE_FAILED.format(more=26) in result.problems
    # the backend line and the final verdict still say OK: the log contradicts itself, and that is said too
    assert judging.OK_ALTHOUGH_FAILED.format(label=RUN, device="CUDA0") in result.problems
    assert judging.EXITED_ALTHOUGH_OK.format(label=RUN, status=errors.STATUS.format(code=1)) in result.problems


# -- non-finite figures ---------------------------------------------------------------------------------------

# a case of the real H200 capture, its line forged below to carry a figure before an OK
FORGED_CASE = f"{OP}(type=f32,head_count=4,head_size=64,n_seq_tokens=4,n_seqs=1,v_repeat=1,permuted=0,kda=0,K=1)"
FIRST_SQL_CASE = f"{OP}(type=f32,head_count=32,head_size=128,n_seq_tokens=1,n_seqs=1,v_repeat=1,permuted=0,kda=0,K=1)"


@pytest.mark.parametrize(
    ("printed", "figure"),
    [
        ("[GATED_DELTA_NET] ERR = nan > 0.000500000", "ERR = nan"),
        ("[GATED_DELTA_NET] ERR = -nan > 0.000500000", "ERR = -nan"),
        ("[GATED_DELTA_NET] NMSE = inf > 0.000500000", "NMSE = inf"),
        ("[GATED_DELTA_NET] NaN at index 3 (CUDA0=nan CPU=0.318254)", "CUDA0=nan"),
    ],
)
def test_a_non_finite_figure_fails_its_case_though_the_line_says_ok(printed: str, figure: str) -> None:
    """NaN > max_err is false: an error figure that is NaN or inf is no pass, whatever status follows it."""
    real = text("h200-cuda0.console.txt")
    forged = real.replace(f"  {FORGED_CASE}:", f"{printed}   {FORGED_CASE}:")
    assert forged != real
    run = ConsoleRun(parse_console(forged), Outcome(0, False, 600.0, 1.5), OP, "logs/forged")
    result = judge(spec(), [run], sql_run(text(FORK_SQL)))
    why = judging.NON_FINITE_OK.format(figure=figure, printed=f'"{printed}"')
    assert result.problems == (counted(36, 36, 35), judging.FAILED_CASE.format(case=FORGED_CASE, why=why))
    assert [(c.name, c.message) for c in result.cases if not c.status.ok] == [(FORGED_CASE, why)]
    assert result.summary == judging.FAILED_SUMMARY.format(device="CUDA0", tallies=tally(35, 36), problems="2 problems")


def test_a_finite_figure_before_an_ok_is_no_failure() -> None:
    real = text("h200-cuda0.console.txt")
    forged = real.replace(f"  {FORGED_CASE}:", f"[GATED_DELTA_NET] ERR = 0.000000100 > 0.000500000   {FORGED_CASE}:")
    assert from_log_text(forged).ok


@pytest.mark.parametrize("error", ["[GATED_DELTA_NET] ERR = nan > 0.000500000", "[GATED_DELTA_NET] inf mismatch: CUDA0=inf CPU=1.250000"])
def test_a_sql_row_with_a_non_finite_figure_fails_though_it_passed(error: str) -> None:
    body = text(FORK_SQL).replace("'test', '1', '1', ''", f"'test', '1', '1', '{error}'", 1)
    result = judge(spec(), [ran("h200-cuda0.console.txt")], sql_run(body))
    figure = "ERR = nan" if "ERR" in error else "CUDA0=inf"
    assert result.problems == (judging.SQL_ROW_NON_FINITE.format(label=SQL, case=FIRST_SQL_CASE, figure=figure, error=error),)


# -- cut short ------------------------------------------------------------------------------------------------


def test_a_saved_log_of_an_aborted_run() -> None:
    result = from_log("h200-cuda0-abort.console.txt")
    assert result.problems == (
        CUT_SHORT.format(
            label=judging.LABEL_LOG.format(log=DATA / "h200-cuda0-abort.console.txt"), subject=judging.CUT_SUBJECT_LOG, how=judging.HOW_STOPPED,
            lines="13 case lines", device="CUDA0", tally=ABORT_TALLY, rest=judging.REST_NOT_RUN.format(op=OP, left=24, expected=36),
        ) + judging.LAST_OUTPUT.format(last=f'"{ABORT_LINE}"'),
    )  # fmt: skip
    assert (result.count("passed"), result.count("error")) == (12, 1)
    [cut] = [c for c in result.cases if c.status is Status.ERROR]
    assert cut.message.startswith(judging.CUT_AFTER_CASE)


@pytest.mark.parametrize(("returncode", "name"), [(-6, "SIGABRT"), (-8, "SIGFPE"), (-11, "SIGSEGV")])
def test_a_run_killed_by_a_signal_names_it(returncode: int, name: str) -> None:
    result = judge(spec(expected=54), [ran("h200-cuda0-abort.console.txt", returncode)], None, sql_not_made=backend_ops.CONSOLE_UNFINISHED)
    [problem] = result.problems
    how = judging.HOW_KILLED.format(signal=name, number=-returncode)
    assert pattern(CUT_SHORT, label=RUN, subject=judging.CUT_SUBJECT_RUN, how=how, lines="13 case lines", device="CUDA0", tally=ABORT_TALLY).match(problem)
    assert judging.REST_NOT_RUN.format(op=OP, left=42, expected=54) in problem
    assert props(result)["exit.GATED_DELTA_NET"] == errors.KILLED_BY.format(name=name, number=-returncode)
    assert props(result)["sql_cross_check"] == backend_ops.CONSOLE_UNFINISHED


def test_a_killed_run_fails_even_if_its_output_looks_complete() -> None:
    result = judge(spec(), [ran("h200-cuda0.console.txt", -6)], None)
    how = judging.HOW_KILLED.format(signal="SIGABRT", number=6)
    assert pattern(CUT_SHORT, label=RUN, subject=judging.CUT_SUBJECT_RUN, how=how, lines="36 case lines").match(result.problems[0])


def test_a_timeout() -> None:
    result = judge(spec(), [ran("h200-cuda0-cut.console.txt", -9, timed_out=True, timeout=600.0)], None)
    [problem] = result.problems
    how = judging.HOW_TIMED_OUT.format(timeout=600.0) + judging.HOW_SIGNAL.format(signal="SIGKILL")
    assert pattern(CUT_SHORT, label=RUN, subject=judging.CUT_SUBJECT_RUN, how=how, lines="21 case lines", device="CUDA0").match(problem)
    assert judging.REST_NOT_RUN.format(op=OP, left=16, expected=36) in problem
    assert props(result)["exit.GATED_DELTA_NET"] == bo_spec.EXIT_TIMED_OUT.format(status=errors.KILLED_BY.format(name="SIGKILL", number=9))


# -- the report disagrees with itself or with the exit status -------------------------------------------------


def test_a_summary_that_disagrees_with_the_case_lines() -> None:
    lines = text("h200-cuda0.console.txt").split("\n")
    dropped = "\n".join(line for i, line in enumerate(lines) if i != 9)  # one case line lost
    result = judge(spec(expected=35, pinned=None), [ConsoleRun(parse_console(dropped), Outcome(0), OP)], None)
    assert result.problems == (judging.SUMMARY_DISAGREES.format(label=RUN, passed=36, total=36, device="CUDA0", ok=35, ran=35),)


def test_exit_status_against_the_verdict() -> None:
    result = judge(spec(pinned=None), [ran("h200-cuda0.console.txt", 1)], None)
    assert result.problems == (judging.EXITED_ALTHOUGH_OK.format(label=RUN, status=errors.STATUS.format(code=1)),)
    result = judge(spec(pinned=None), [ran("h200-cuda0-fail.console.txt", 0)], None)
    assert judging.EXITED_0_ALTHOUGH_FAIL.format(label=RUN) in result.problems


def test_a_perf_log_is_not_judged_as_a_test_log() -> None:
    result = from_log("h200-cuda0.perf.txt")
    [problem] = result.problems
    assert problem == judging.NOT_TEST_OUTPUT.format(label=judging.LABEL_LOG.format(log=DATA / "h200-cuda0.perf.txt"), mode="perf")
    assert result.cases == ()


# -- the sql cross-check --------------------------------------------------------------------------------------


def test_build_commit_of_another_commit() -> None:
    result = judge(spec(pinned=ENGINE_PIN), [ran("h200-cuda0.console.txt")], sql_run(text(FORK_SQL)))
    assert result.problems == (judging.OTHER_COMMIT.format(build_commit="c14872f-dirty", pin="8abd563", pinned=ENGINE_PIN),)
    assert props(result)["build_commit_check"] == "failed"


def test_dirty_without_patches() -> None:
    result = judge(spec(patched=False), [ran("h200-cuda0.console.txt")], sql_run(text(FORK_SQL)))
    assert result.problems == (judging.DIRTY_ALTHOUGH_CLEAN.format(build_commit="c14872f-dirty"),)
    # the fork's checkout lacked files: said explicitly, the same build passes
    assert judge(spec(patched=False, dirty=DirtyRule.DIRTY), [ran("h200-cuda0.console.txt")], sql_run(text(FORK_SQL))).ok


def test_clean_although_patches_are_applied() -> None:
    clean = text(FORK_SQL).replace("'c14872f-dirty'", "'c14872f'")
    result = judge(spec(patched=True), [ran("h200-cuda0.console.txt")], sql_run(clean))
    assert result.problems == (judging.CLEAN_ALTHOUGH_PATCHED.format(build_commit="c14872f"),)
    assert judge(spec(patched=False), [ran("h200-cuda0.console.txt")], sql_run(clean)).ok


@pytest.mark.parametrize(("short", "ok"), [("c14872f8", True), ("c14872f8407f5b0642f3c395439b929021df753a", True), ("c14872", False), ("c14872e", False)])
def test_the_short_sha_as_git_abbreviates_it(short: str, ok: bool) -> None:
    body = text(FORK_SQL).replace("'c14872f-dirty'", f"'{short}-dirty'")
    assert judge(spec(), [ran("h200-cuda0.console.txt")], sql_run(body)).ok is ok


def test_build_commit_unknown() -> None:
    cpu = ConsoleRun(parse_console(text("cpu.console.txt")), Outcome(0), OP)
    result = judge(spec(device="CPU", pinned=ENGINE_PIN, patched=False), [cpu], sql_run(text("cpu.sql.txt")))
    assert result.problems == (judging.COMMIT_UNKNOWN.format(build_commit="unknown", pin="8abd563"),)
    unpinned = judge(spec(device="CPU", pinned=None, patched=False), [cpu], sql_run(text("cpu.sql.txt")))
    assert unpinned.ok
    assert props(unpinned)["build_commit_check"] == judging.NO_PIN_GIVEN
    assert unpinned.summary == judging.PASSED_UNCHECKED.format(device="CPU", tallies=tally(36, 36), check=judging.NO_PIN_GIVEN)


def test_the_sql_run_disagrees_with_the_console_run() -> None:
    body = text(FORK_SQL).replace("'test', '1', '1', ''", "'test', '1', '0', 'test failed'", 1)
    result = judge(spec(), [ran("h200-cuda0.console.txt")], sql_run(body, returncode=1))
    assert result.problems == (
        judging.SQL_ROW_FAILED.format(
            label=SQL, case=f"{OP}(type=f32,head_count=32,head_size=128,n_seq_tokens=1,n_seqs=1,v_repeat=1,permuted=0,kda=0,K=1)", error="test failed"
        ),
        judging.SQL_DISAGREES.format(label=SQL, op=OP, sql_passed=35, sql_ran=36, passed=36, ran=36),
    )


def test_the_sql_run_has_no_rows_for_the_device() -> None:
    result = judge(spec(pinned=None, patched=False), [ran("h200-cuda0.console.txt")], sql_run(text("cpu.sql.txt")))
    assert judging.SQL_NO_ROWS.format(label=SQL, device="CUDA0") in result.problems
    assert judging.SQL_DISAGREES.format(label=SQL, op=OP, sql_passed=0, sql_ran=0, passed=36, ran=36) in result.problems


def test_the_sql_run_was_killed_or_cut() -> None:
    lines = text(FORK_SQL).splitlines()
    cut = "\n".join([*lines[:-1], lines[-1][:100]])
    result = judge(spec(), [ran("h200-cuda0.console.txt")], sql_run(cut, returncode=-6))
    assert result.problems[0] == judging.SQL_KILLED.format(label=SQL, status=errors.KILLED_BY.format(name="SIGABRT", number=6))
    assert result.problems[1] == judging.SQL_MALFORMED.format(label=SQL, lines="1 INSERT line", numbers=len(lines))
    timed = judge(spec(), [ran("h200-cuda0.console.txt")], sql_run(text(FORK_SQL), returncode=-9, timed_out=True))
    assert timed.problems == (judging.SQL_TIMED_OUT.format(label=SQL, timeout=600.0),)


def test_output_that_is_not_sql() -> None:
    result = judge(spec(), [ran("h200-cuda0.console.txt")], sql_run(text("h200-cuda0.console.txt")))
    assert judging.SQL_NO_HEADER.format(label=SQL) in result.problems
    assert judging.SQL_NO_COMMIT.format(label=SQL, pin=CAPTURE_COMMIT[:7]) in result.problems


def test_judge_log_with_the_fork_sql() -> None:
    result = judge_log(DATA / "h200-cuda0.console.txt", "CUDA0", {OP: 36}, CAPTURE_COMMIT, True, "rocm-gfx1151-abc", sql_path=DATA / FORK_SQL)
    assert result.ok
    assert props(result)["build_key"] == "rocm-gfx1151-abc"
    assert props(result)["sql_cross_check"] == "made"


def test_a_missing_log_is_one_line_naming_it(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as exc:
        judge_log(tmp_path / "nope.log", "ROCm0", {OP: 54})
    assert exc.value.message == backend_ops.LOG_NOT_FOUND.format(flag="--from-log", path=tmp_path / "nope.log")


def test_failing_cases_have_no_sql_row_and_that_is_agreement() -> None:
    """With a kernel fault the --output sql run exits 1 (measured on the H200), and only the passing cases' rows start
    their lines (a failing case's follows its comparison's message: test_top_k reads those); with the failing rows
    left out, the judge keeps the real problems (the failing cases) and adds no false disagreement."""
    console = parse_console(text("h200-cuda0-fail.console.txt"))
    failing = {c.params for d in console.devices for c in d.cases if c.status is CaseMark.FAIL}
    assert len(failing) == 3
    body = "\n".join(ln for ln in text(FORK_SQL).splitlines() if not any(f"'{p}'" in ln for p in failing)) + "\n"
    result = judge(spec(), [ran("h200-cuda0-fail.console.txt", 1)], sql_run(body, returncode=1))
    assert result.status is Status.FAILED
    assert not any(said(judging.SQL_EXITED_ALTHOUGH_PASSED, p, label=SQL) for p in result.problems), result.problems
    assert not any(said(judging.SQL_DISAGREES, p, label=SQL) for p in result.problems), result.problems
    assert any("FAIL" in p or "failed" in p for p in result.problems)
