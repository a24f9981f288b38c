"""Every verdict of the judge, on real captures and logs derived from them."""

from __future__ import annotations

from pathlib import Path

import pytest

from ci.errors import ConfigError
from ci.gates.backend_ops import judge_log
from ci.gates.backend_ops_judge import ConsoleRun, DirtyRule, GateSpec, Outcome, SqlRun, judge
from ci.gates.backend_ops_output import CaseMark, parse_console, parse_sql
from ci.gates.results import GateResult, Status
from tests.support.backend_ops import CAPTURE_COMMIT, DATA, ENGINE_PIN, OP, text

FORK_SQL = "h200-cuda0-rocmfpx-c14872f.sql.txt"


def from_log(name: str, device: str = "CUDA0", expected: int = 36, **kwargs: object) -> GateResult:
    return judge_log(DATA / name, device, {OP: expected}, **kwargs)  # type: ignore[arg-type]


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
    assert result.summary == "PASSED on CUDA0: GATED_DELTA_NET 36/36 passed; build_commit c14872f-dirty is the pin c14872f"
    assert result.count("passed") == 36
    assert result.count("expected") == 36
    p = props(result)
    assert (p["device"], p["op"], p["pin"], p["build_commit"], p["build_commit_check"], p["sql_cross_check"]) == (
        "CUDA0", OP, CAPTURE_COMMIT, "c14872f-dirty", "passed", "made",
    )
    assert (p["exit.GATED_DELTA_NET"], p["exit.sql"], p["dirty_rule"], p["patched"], p["source"]) == ("status 0", "status 0", "dirty", "yes", "run")
    # which GPU ran is in the record: the backend's own device line and test-backend-ops' description
    assert p["backend_info"] == "Device 0: NVIDIA H200, compute capability 9.0, VMM: yes, VRAM: 143155 MiB"
    assert p["device_description"] == "NVIDIA H200"


def test_a_saved_log_passes_but_says_the_cross_check_was_not_made() -> None:
    result = from_log("h200-cuda0.console.txt", pinned_commit=ENGINE_PIN)
    assert result.ok
    assert props(result)["sql_cross_check"] == "not made: judged from a saved console log"
    assert props(result)["build_commit"] == "not seen"
    assert props(result)["source"] == "a saved console log"
    assert "build_commit check not made" in result.summary


def test_stderr_between_case_and_status_still_passes() -> None:
    assert from_log("h200-cuda0-interleaved.console.txt").ok


# -- the device did not run ---------------------------------------------------------------------------------


def test_an_unknown_device_name() -> None:
    result = from_log("cpu-b-nope.console.txt", device="NOPE")
    assert not result.ok
    assert result.problems == (
        "device NOPE did not run: the build has no device named NOPE (it listed CPU (skipped)); test-backend-ops skipped every device and still said OK",
    )


def test_a_cpu_only_build_without_b() -> None:
    result = from_log("cpu-no-b.console.txt", device="CPU")
    assert result.problems == (
        'device CPU did not run: test-backend-ops printed "Skipping CPU backend" for it (without -b it never tests the CPU, '
        "so a CPU-only build tests nothing and exits 0; run it with -b CPU)",
    )


def test_every_device_skipped_on_a_gpu_box() -> None:
    result = from_log("h200-rocm0-skipped.console.txt", device="ROCm0")
    assert result.problems[0].startswith("device ROCm0 did not run: the build has no device named ROCm0 (it listed CUDA0 (skipped), CPU (skipped))")


def test_a_device_that_was_skipped_while_another_ran() -> None:
    result = from_log("h200-cuda0.console.txt", device="CPU")
    assert result.problems == ('device CPU did not run: test-backend-ops printed "Skipping" for it (it was given another -b than CPU)',)


def test_a_device_absent_while_another_ran() -> None:
    result = from_log("h200-cuda0.console.txt", device="ROCm0")
    assert result.problems == ("device ROCm0 did not run: the output has no device named ROCm0 (it listed CUDA0, CPU (skipped)); it tested CUDA0 instead",)


def test_two_reports_in_one_log(tmp_path: Path) -> None:
    log = tmp_path / "twice.log"
    log.write_text(text("cpu.console.txt") + text("cpu-fail.console.txt"))
    result = judge_log(log, "CPU", {OP: 36})
    assert result.problems == (f"the log {log}: CPU is reported more than once: two runs in one output? Judge one run's output",)


def test_output_that_is_not_test_backend_ops(tmp_path: Path) -> None:
    log = tmp_path / "log.txt"
    log.write_text("Segmentation fault\n")
    result = judge_log(log, "ROCm0", {OP: 54})
    assert "device ROCm0" in result.problems[0]
    assert "the output stopped before test-backend-ops' final verdict" in result.problems[0]
    assert 'its last output: "Segmentation fault"' in result.problems[0]


# -- counts -------------------------------------------------------------------------------------------------


def test_fewer_cases_than_the_pin_expects() -> None:
    result = from_log("h200-cuda0.console.txt", expected=54)
    assert result.problems == ("GATED_DELTA_NET: 54 expected, 36 ran and passed",)
    assert result.summary == "FAILED on CUDA0: GATED_DELTA_NET 36/54 passed; 1 problem"
    assert result.count("expected") == 54


def test_more_cases_than_the_pin_expects() -> None:
    result = from_log("h200-cuda0.console.txt", expected=30)
    assert result.problems == (
        "GATED_DELTA_NET: 30 expected, 36 ran and passed (more than the pin expects: if the fork gained cases, raise expect.backend_ops.GATED_DELTA_NET in pins.yaml)",
    )


def test_unsupported_cases_are_skipped_and_do_not_count() -> None:
    result = from_log("h200-cuda0-unsupported.console.txt")
    assert result.problems == ("GATED_DELTA_NET: 36 expected, 34 ran and passed, 2 not supported on CUDA0",)
    assert (result.count("passed"), result.count("skipped")) == (34, 2)
    assert {c.message for c in result.cases if c.status is Status.SKIPPED} == {"not supported [CUDA0]"}
    assert from_log("h200-cuda0-unsupported.console.txt", expected=34).ok


def test_an_op_with_no_case_at_all() -> None:
    result = judge_log(DATA / "h200-cuda0.console.txt", "CUDA0", {OP: 36, "MUL_MAT": 5})
    assert result.problems == ("MUL_MAT: 5 expected, 0 ran and passed (no MUL_MAT case at all: is the op name right, and does this build have it?)",)


def test_an_op_that_was_not_run() -> None:
    result = judge(GateSpec.make("CUDA0", {OP: 36, "MUL_MAT": 5}, None, False), [ran("h200-cuda0.console.txt")], None)
    assert "MUL_MAT: test-backend-ops was not run for it" in result.problems


# -- failed cases -------------------------------------------------------------------------------------------


def test_failed_cases_are_named_with_their_message() -> None:
    result = from_log("h200-cuda0-fail.console.txt")
    assert result.problems == (
        "GATED_DELTA_NET: 36 expected, 36 ran, 33 passed",
        "GATED_DELTA_NET(type=f32,head_count=16,head_size=64,n_seq_tokens=1,n_seqs=2,v_repeat=1,permuted=0,kda=0,K=1) FAILED: [GATED_DELTA_NET] ERR = 0.012300000 > 0.000500000",
        "GATED_DELTA_NET(type=f32,head_count=4,head_size=64,n_seq_tokens=1,n_seqs=2,v_repeat=1,permuted=0,kda=1,K=1) FAILED: [GATED_DELTA_NET] NaN at index 17 (CUDA0=nan CPU=0.318254)",
        "GATED_DELTA_NET(type=f32,head_count=4,head_size=64,n_seq_tokens=127,n_seqs=1,v_repeat=1,permuted=0,kda=0,K=1) FAILED: [GATED_DELTA_NET] inf mismatch: CUDA0=inf CPU=1.250000",
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
    assert result.problems[0].endswith("FAILED: [GATED_DELTA_NET] ERR = 0.000203100 > 0.000000100")


def test_an_allocation_failure_named_only_in_the_failing_list() -> None:
    result = from_log("h200-cuda0-alloc.console.txt")
    assert result.problems[0] == "GATED_DELTA_NET: 36 expected, 36 ran, 35 passed"
    assert result.problems[1].startswith("GATED_DELTA_NET(type=f32,head_count=32,head_size=16,n_seq_tokens=1,n_seqs=1,v_repeat=1,permuted=1,kda=1,K=1) FAILED: listed under 'Failing tests:'")
    assert result.problems[1].endswith('printed before a later case: "failed to allocate tensors [CUDA0]"')
    assert result.count("failed") == 1


def test_many_failures_are_listed_up_to_ten() -> None:
    lines = text("h200-cuda0.console.txt").split("\n")
    body = "\n".join(line.replace("\x1b[1;32mOK", "\x1b[1;31mFAIL") if line.startswith(f"  {OP}(") else line for line in lines)
    body = body.replace("36/36 tests passed", "0/36 tests passed")
    result = judge(spec(patched=False), [ConsoleRun(parse_console(body), Outcome(1), OP)], None)
    assert result.count("failed") == 36
    listed = [p for p in result.problems if " FAILED: " in p]
    assert len(listed) == 10
    assert "... and 26 more failed cases (all of them are in the JUnit XML)" in result.problems
    # the backend line and the final verdict still say OK: the log contradicts itself, and that is said too
    assert "test-backend-ops -o GATED_DELTA_NET -b CUDA0: 'Backend CUDA0: OK' although cases failed: the report contradicts itself" in result.problems
    assert "test-backend-ops -o GATED_DELTA_NET -b CUDA0: exited with status 1 although it printed OK" in result.problems


# -- cut short ------------------------------------------------------------------------------------------------


def test_a_saved_log_of_an_aborted_run() -> None:
    result = from_log("h200-cuda0-abort.console.txt")
    assert result.problems == (
        "the log " + str(DATA / "h200-cuda0-abort.console.txt") + ": the output stopped before test-backend-ops' final verdict "
        "(no 'N/M backends passed', no OK/FAIL) after 13 case lines on CUDA0 (12 OK, 0 FAIL, 1 without a status: "
        "GATED_DELTA_NET(type=f32,head_count=4,head_size=16,n_seq_tokens=1,n_seqs=2,v_repeat=1,permuted=0,kda=1,K=1)); "
        'the rest count as not run (GATED_DELTA_NET: 24 of the 36 expected); its last output: "ggml/src/ggml-cuda/ggml-cuda.cu:98: CUDA error"',
    )
    assert (result.count("passed"), result.count("error")) == (12, 1)
    [cut] = [c for c in result.cases if c.status is Status.ERROR]
    assert cut.message.startswith("no status: the run was cut short after this case line")


@pytest.mark.parametrize(("returncode", "name"), [(-6, "SIGABRT"), (-8, "SIGFPE"), (-11, "SIGSEGV")])
def test_a_run_killed_by_a_signal_names_it(returncode: int, name: str) -> None:
    result = judge(spec(expected=54), [ran("h200-cuda0-abort.console.txt", returncode)], None, sql_not_made="not made: a console run did not finish")
    [problem] = result.problems
    assert problem.startswith(f"test-backend-ops -o GATED_DELTA_NET -b CUDA0: it was killed by {name} (signal {-returncode}) after 13 case lines on CUDA0")
    assert "GATED_DELTA_NET: 42 of the 54 expected" in problem
    assert props(result)["exit.GATED_DELTA_NET"] == f"{name} (killed by signal {-returncode})"
    assert props(result)["sql_cross_check"] == "not made: a console run did not finish"


def test_a_killed_run_fails_even_if_its_output_looks_complete() -> None:
    result = judge(spec(), [ran("h200-cuda0.console.txt", -6)], None)
    assert result.problems[0].startswith("test-backend-ops -o GATED_DELTA_NET -b CUDA0: it was killed by SIGABRT (signal 6) after 36 case lines")


def test_a_timeout() -> None:
    result = judge(spec(), [ran("h200-cuda0-cut.console.txt", -9, timed_out=True, timeout=600.0)], None)
    [problem] = result.problems
    assert problem.startswith("test-backend-ops -o GATED_DELTA_NET -b CUDA0: it timed out after 600 s and was killed (SIGKILL) after 21 case lines on CUDA0")
    assert "GATED_DELTA_NET: 16 of the 36 expected" in problem
    assert props(result)["exit.GATED_DELTA_NET"] == "timed out, SIGKILL (killed by signal 9)"


# -- the report disagrees with itself or with the exit status -------------------------------------------------


def test_a_summary_that_disagrees_with_the_case_lines() -> None:
    lines = text("h200-cuda0.console.txt").split("\n")
    dropped = "\n".join(line for i, line in enumerate(lines) if i != 9)  # one case line lost
    result = judge(spec(expected=35, pinned=None), [ConsoleRun(parse_console(dropped), Outcome(0), OP)], None)
    assert result.problems == (
        "test-backend-ops -o GATED_DELTA_NET -b CUDA0: test-backend-ops says 36/36 tests passed on CUDA0 but the log has 35 OK "
        "of 35 cases that ran: the log is not complete, or not in the format this gate reads",
    )


def test_exit_status_against_the_verdict() -> None:
    result = judge(spec(pinned=None), [ran("h200-cuda0.console.txt", 1)], None)
    assert result.problems == ("test-backend-ops -o GATED_DELTA_NET -b CUDA0: exited with status 1 although it printed OK",)
    result = judge(spec(pinned=None), [ran("h200-cuda0-fail.console.txt", 0)], None)
    assert "test-backend-ops -o GATED_DELTA_NET -b CUDA0: exited with status 0 although it printed FAIL" in result.problems


def test_a_perf_log_is_not_judged_as_a_test_log() -> None:
    result = from_log("h200-cuda0.perf.txt")
    [problem] = result.problems
    assert problem.endswith("this is test-backend-ops perf output, not test output: the gate judges `test-backend-ops test` runs")
    assert result.cases == ()


# -- the sql cross-check --------------------------------------------------------------------------------------


def test_build_commit_of_another_commit() -> None:
    result = judge(spec(pinned=ENGINE_PIN), [ran("h200-cuda0.console.txt")], sql_run(text(FORK_SQL)))
    assert result.problems == (
        f"build_commit c14872f-dirty is not the pinned commit 8abd563 ({ENGINE_PIN}): these binaries were built from another commit; rebuild them",
    )
    assert props(result)["build_commit_check"] == "failed"


def test_dirty_without_patches() -> None:
    result = judge(spec(patched=False), [ran("h200-cuda0.console.txt")], sql_run(text(FORK_SQL)))
    assert result.problems == (
        "build_commit c14872f-dirty has a -dirty suffix but the dirty rule is 'clean' (no patches applied): the checkout had local changes "
        "when it was built (if it is known to differ, e.g. omitted files, say so with --dirty dirty)",
    )
    # the fork's checkout lacked files: said explicitly, the same build passes
    assert judge(spec(patched=False, dirty=DirtyRule.DIRTY), [ran("h200-cuda0.console.txt")], sql_run(text(FORK_SQL))).ok


def test_clean_although_patches_are_applied() -> None:
    clean = text(FORK_SQL).replace("'c14872f-dirty'", "'c14872f'")
    result = judge(spec(patched=True), [ran("h200-cuda0.console.txt")], sql_run(clean))
    assert result.problems == (
        "build_commit c14872f has no -dirty suffix but the dirty rule is 'dirty' (patches applied): these binaries were built without the patches",
    )
    assert judge(spec(patched=False), [ran("h200-cuda0.console.txt")], sql_run(clean)).ok


@pytest.mark.parametrize(("short", "ok"), [("c14872f8", True), ("c14872f8407f5b0642f3c395439b929021df753a", True), ("c14872", False), ("c14872e", False)])
def test_the_short_sha_as_git_abbreviates_it(short: str, ok: bool) -> None:
    body = text(FORK_SQL).replace("'c14872f-dirty'", f"'{short}-dirty'")
    assert judge(spec(), [ran("h200-cuda0.console.txt")], sql_run(body)).ok is ok


def test_build_commit_unknown() -> None:
    cpu = ConsoleRun(parse_console(text("cpu.console.txt")), Outcome(0), OP)
    result = judge(spec(device="CPU", pinned=ENGINE_PIN, patched=False), [cpu], sql_run(text("cpu.sql.txt")))
    assert result.problems == ('build_commit is "unknown": the binary was built outside a git checkout, so it cannot be shown to be the pin 8abd563',)
    unpinned = judge(spec(device="CPU", pinned=None, patched=False), [cpu], sql_run(text("cpu.sql.txt")))
    assert unpinned.ok
    assert props(unpinned)["build_commit_check"] == "not made: no pinned commit given"
    assert unpinned.summary.endswith("build_commit check not made: no pinned commit given")


def test_the_sql_run_disagrees_with_the_console_run() -> None:
    body = text(FORK_SQL).replace("'test', '1', '1', ''", "'test', '1', '0', 'test failed'", 1)
    result = judge(spec(), [ran("h200-cuda0.console.txt")], sql_run(body, returncode=1))
    assert result.problems == (
        "the --output sql cross-check: GATED_DELTA_NET(type=f32,head_count=32,head_size=128,n_seq_tokens=1,n_seqs=1,v_repeat=1,permuted=0,kda=0,K=1) failed in the sql run (test failed)",
        "the --output sql cross-check: GATED_DELTA_NET passed 35 of 36 in the sql run but 36 of 36 on the console: the two runs disagree",
    )


def test_the_sql_run_has_no_rows_for_the_device() -> None:
    result = judge(spec(pinned=None, patched=False), [ran("h200-cuda0.console.txt")], sql_run(text("cpu.sql.txt")))
    assert "the --output sql cross-check: no rows for CUDA0: the device did not run in the sql run" in result.problems
    assert "the --output sql cross-check: GATED_DELTA_NET passed 0 of 0 in the sql run but 36 of 36 on the console: the two runs disagree" in result.problems


def test_the_sql_run_was_killed_or_cut() -> None:
    lines = text(FORK_SQL).splitlines()
    cut = "\n".join([*lines[:-1], lines[-1][:100]])
    result = judge(spec(), [ran("h200-cuda0.console.txt")], sql_run(cut, returncode=-6))
    assert result.problems[0] == "the --output sql cross-check was killed by SIGABRT (killed by signal 6)"
    assert result.problems[1] == f"the --output sql cross-check: 1 INSERT line could not be read (line {len(lines)})"
    timed = judge(spec(), [ran("h200-cuda0.console.txt")], sql_run(text(FORK_SQL), returncode=-9, timed_out=True))
    assert timed.problems == ("the --output sql cross-check timed out after 600 s",)


def test_output_that_is_not_sql() -> None:
    result = judge(spec(), [ran("h200-cuda0.console.txt")], sql_run(text("h200-cuda0.console.txt")))
    assert "the --output sql cross-check: no CREATE TABLE statement: that is not test-backend-ops --output sql" in result.problems
    assert f"the --output sql cross-check: no row carries a build_commit, so the binary cannot be shown to be the pin {CAPTURE_COMMIT[:7]}" in result.problems


def test_judge_log_with_the_fork_sql() -> None:
    result = judge_log(DATA / "h200-cuda0.console.txt", "CUDA0", {OP: 36}, CAPTURE_COMMIT, True, "rocm-gfx1151-abc", sql_path=DATA / FORK_SQL)
    assert result.ok
    assert props(result)["build_key"] == "rocm-gfx1151-abc"
    assert props(result)["sql_cross_check"] == "made"


def test_a_missing_log_is_one_line_naming_it(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as exc:
        judge_log(tmp_path / "nope.log", "ROCm0", {OP: 54})
    assert exc.value.message == f"--from-log {tmp_path / 'nope.log'}: not found; give a saved test-backend-ops output"


def test_failing_cases_have_no_sql_row_and_that_is_agreement() -> None:
    """With a kernel fault the --output sql run prints rows for the passing cases only and exits 1 (measured on the
    H200); the judge keeps the real problems (the failing cases) and adds no false disagreement."""
    console = parse_console(text("h200-cuda0-fail.console.txt"))
    failing = {c.params for d in console.devices for c in d.cases if c.status is CaseMark.FAIL}
    assert len(failing) == 3
    body = "\n".join(ln for ln in text(FORK_SQL).splitlines() if not any(f"'{p}'" in ln for p in failing)) + "\n"
    result = judge(spec(), [ran("h200-cuda0-fail.console.txt", 1)], sql_run(body, returncode=1))
    assert result.status is Status.FAILED
    assert not any("although every row passed" in p for p in result.problems), result.problems
    assert not any("the two runs disagree" in p for p in result.problems), result.problems
    assert any("FAIL" in p or "failed" in p for p in result.problems)
