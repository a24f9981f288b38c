"""TOP_K of ciru-ai/ROCmFPX c14872f, from real captures of its cpu build: a program that lists some cases twice,
and an ``--output sql`` run whose rows a stderr line split where stdout's 4096-byte blocks end (as on an H100).

The fork's ``make_test_cases_eval()`` makes ``TOP_K(ne=[16384,1,1,1], k)`` for k in 1, 2, 3, 7, 15 in two loops
(``1<<i`` for i = 14, and the list of shapes after it), so one run prints those five case lines twice: 445 lines,
440 names, ``445/445 tests passed``. Each listing is a case of its own, keyed by where it is printed.
"""

from __future__ import annotations

from collections import Counter
from itertools import accumulate
from pathlib import Path

from ci.gates.backend_ops import judge as judging
from ci.gates.backend_ops.judge import judge
from ci.gates.backend_ops.output import BLOCK_UNIT, ROW_START, parse_console, parse_sql
from ci.gates.backend_ops.run import judge_log
from ci.gates.backend_ops.spec import ConsoleRun, GateSpec, Outcome, SqlRun
from ci.gates.results import Status
from tests.support.backend_ops import CAPTURE_COMMIT, DATA, text
from tests.support.derive import GREEN_OK, RED_FAIL
from tests.support.messages import said

TOP_K = "TOP_K"
CASES = 445  # what the fork's program lists, and pins.yaml expects
CONSOLE = "cpu-top-k.console.txt"
SQL = "cpu-top-k.sql.txt"
SPLICED = "cpu-top-k-spliced.sql.txt"
WARMUP = "ggml_backend_cuda_graph_compute: CUDA graph warmup complete"  # the stderr line in SPLICED
TWICE = [f"{TOP_K}(type=f32,ne=[16384,1,1,1],k={k},ties=0)" for k in (1, 2, 3, 7, 15)]
FIRST_TWICE = (245, 412)  # the lines of TWICE[0] in the console capture
LOG = judging.LABEL_LOG


def spec() -> GateSpec:
    return GateSpec.make("CPU", {TOP_K: CASES}, CAPTURE_COMMIT, False)


def console_run(body: str, returncode: int | None = 0) -> ConsoleRun:
    return ConsoleRun(parse_console(body), Outcome(returncode, seconds=6.3), TOP_K, f"logs/{CONSOLE}")


def sql_run(body: str, returncode: int | None = 0) -> SqlRun:
    return SqlRun(parse_sql(body), Outcome(returncode), "logs/sql")


def lines_of(name: str) -> list[str]:
    return text(name).split("\n")


MESSAGE = "[TOP_K] ERR = 1.000000000 > 0.000000000 "  # upstream's format ("[%s] ERR = %.9f > %.9f "), made-up figures


def console_with_second_listing_failed() -> str:
    """The console capture with the second listing of TWICE[0] failed, the report around it as upstream prints it."""
    lines = lines_of(CONSOLE)
    at = FIRST_TWICE[1] - 1
    lines[at] = MESSAGE + lines[at].replace(GREEN_OK, RED_FAIL)
    summary = lines.index(f"  {CASES}/{CASES} tests passed")
    lines[summary : summary + 2] = [
        f"  {CASES - 1}/{CASES} tests passed",
        "",
        "Failing tests:",
        f"  {TWICE[0]}",
        f"  Backend CPU: {RED_FAIL}",
    ]
    end = lines.index("1/1 backends passed")
    lines[end : end + 2] = ["0/1 backends passed", RED_FAIL]
    return "\n".join(lines)


def sql_with_listing_failed(listing: int) -> str:
    """The sql capture with the row of that listing of TWICE[0] failed, after the comparison's message."""
    lines = lines_of(SQL)
    at = [i for i, ln in enumerate(lines) if f"'{TWICE[0][len(TOP_K) + 1 : -1]}'" in ln][listing - 1]
    lines[at] = MESSAGE + lines[at].replace("'test', '1', '1', ''", "'test', '1', '0', 'test failed'")
    return "\n".join(lines)


def failed_second_listing_problems() -> tuple[str, ...]:
    count = judging.COUNT.format(op=TOP_K, expected=CASES, source=spec().expectation_source(TOP_K), ran=CASES, passed=CASES - 1)
    return (count, judging.FAILED_CASE.format(case=TWICE[0], why=MESSAGE.strip()))


# -- the program lists a case twice ------------------------------------------------------------------------------


def test_the_capture_prints_five_cases_twice() -> None:
    cpu = parse_console(text(CONSOLE)).device("CPU")
    assert cpu is not None
    assert cpu.summary == (CASES, CASES)
    assert len(cpu.cases) == CASES
    names = Counter(c.name for c in cpu.cases)
    assert len(names) == CASES - 5
    assert sorted(n for n, times in names.items() if times > 1) == sorted(TWICE)
    assert [c.line for c in cpu.cases if c.name == TWICE[0]] == list(FIRST_TWICE)


def test_the_real_cpu_top_k_run_passes_with_its_sql_run() -> None:
    result = judge(spec(), [console_run(text(CONSOLE))], sql_run(text(SQL)))
    assert result.problems == ()
    assert result.status is Status.PASSED
    tallies = judging.TALLY.format(op=TOP_K, passed=CASES, expected=CASES)
    assert result.summary == judging.PASSED_AS_PINNED.format(device="CPU", tallies=tallies, build_commit="c14872f", pin="c14872f")
    assert (result.count("passed"), result.count("expected")) == (CASES, CASES)


def test_each_listing_of_a_case_is_a_case_of_its_own() -> None:
    result = judge(spec(), [console_run(text(CONSOLE))], sql_run(text(SQL)))
    assert len(result.cases) == CASES
    twice = [c for c in result.cases if c.name == TWICE[0]]
    assert [c.status for c in twice] == [Status.PASSED, Status.PASSED]
    assert [c.detail for c in twice] == [judging.CASE_LINE_OF.format(line=n, log=f"logs/{CONSOLE}") for n in FIRST_TWICE]


def test_the_saved_log_alone_passes() -> None:
    result = judge_log(DATA / CONSOLE, "CPU", {TOP_K: CASES})
    assert result.problems == ()
    assert result.count("passed") == CASES


def test_a_second_listing_that_failed_is_that_listing(tmp_path: Path) -> None:
    """The second listing of a case fails, the first passes: one failure, at the second's line, and the name under
    ``Failing tests:`` is that failure, not an allocation failure without a case line."""
    log = tmp_path / "second-failed.log"
    log.write_text(console_with_second_listing_failed())
    result = judge_log(log, "CPU", {TOP_K: CASES})
    failed = [(c.name, c.message, c.detail) for c in result.cases if c.status is Status.FAILED]
    assert failed == [(TWICE[0], MESSAGE.strip(), judging.CASE_LINE_OF.format(line=FIRST_TWICE[1], log=log))]
    assert result.count("passed") == CASES - 1
    assert result.problems == failed_second_listing_problems()


# -- a log that is not one run's is still refused --------------------------------------------------------------


def test_a_case_line_printed_right_after_itself_is_refused(tmp_path: Path) -> None:
    """No case of the program follows itself (none of the 445 TOP_K; in ``support`` mode none of the fork's 18,194
    nor upstream b11434's 21,427): a copy of the line before it, in place of a case, is a log edited together."""
    lines = lines_of(CONSOLE)
    at = FIRST_TWICE[0]  # 0-based: the line after the first listing
    lines[at] = lines[at - 1]
    log = tmp_path / "copied.log"
    log.write_text("\n".join(lines))
    result = judge_log(log, "CPU", {TOP_K: CASES})
    assert result.status is Status.FAILED
    label = LOG.format(log=log)
    assert result.problems[0] == judging.CASE_REPEATED.format(
        label=label, case=TWICE[0], times=2, lines=f"{FIRST_TWICE[0]}, {FIRST_TWICE[0] + 1}"
    )
    assert any(
        said(judging.SUMMARY_DISAGREES, p, label=label, passed=CASES, total=CASES, ok=CASES - 1, ran=CASES - 1) for p in result.problems
    )


def test_two_runs_in_one_log_are_refused(tmp_path: Path) -> None:
    for first, second in [
        ("h200-cuda0-cut.console.txt", "h200-cuda0.console.txt"),
        ("h200-cuda0-interleaved.console.txt", "h200-cuda0-interleaved.console.txt"),
    ]:
        log = tmp_path / "two-runs.log"
        log.write_text(text(first) + text(second))
        result = judge_log(log, "CUDA0", {"GATED_DELTA_NET": 36})
        assert result.status is Status.FAILED
        assert judging.REPORTED_TWICE.format(label=LOG.format(log=log), device="CUDA0") in result.problems, (first, result.problems)


def test_a_second_run_pasted_into_the_first_runs_report_is_refused(tmp_path: Path) -> None:
    """The cut run's case lines, without their header, before the whole run's: the cases outnumber the report's own
    ``N/M tests passed``."""
    cut, whole = lines_of("h200-cuda0-cut.console.txt"), lines_of("h200-cuda0.console.txt")
    case_lines = [ln for ln in cut if ln.startswith("  GATED_DELTA_NET(") and ln.endswith(GREEN_OK)]
    first = next(i for i, ln in enumerate(whole) if ln.startswith("  GATED_DELTA_NET("))
    log = tmp_path / "pasted.log"
    log.write_text("\n".join([*whole[:first], *case_lines, *whole[first:]]))
    result = judge_log(log, "CUDA0", {"GATED_DELTA_NET": 36})
    assert result.status is Status.FAILED
    n = 36 + len(case_lines)
    assert judging.SUMMARY_DISAGREES.format(label=LOG.format(log=log), passed=36, total=36, device="CUDA0", ok=n, ran=n) in result.problems


# -- every row the program writes is read ----------------------------------------------------------------------


def test_rows_split_by_a_stderr_line_are_read() -> None:
    assert sum(ROW_START in ln and WARMUP in ln for ln in lines_of(SPLICED)) == 6  # the capture's split rows
    clean, spliced = parse_sql(text(SQL)), parse_sql(text(SPLICED))
    assert (clean.malformed, spliced.malformed) == ((), ())
    assert len(spliced.rows) == CASES

    def content(r: object) -> tuple[object, ...]:
        return tuple(
            getattr(r, f)
            for f in ("build_commit", "backend_name", "op_name", "op_params", "test_mode", "supported", "passed", "error_message")
        )

    assert [content(r) for r in spliced.rows] == [content(r) for r in clean.rows]


def test_a_row_split_where_no_block_ended_is_not_joined() -> None:
    """Only a split where a block of stdout can end is the pipe's doing: a row split elsewhere is reported, not
    joined by guessing where the other line begins."""
    lines = lines_of(SQL)
    offsets = list(accumulate((len(ln.encode()) + 1 for ln in lines), initial=0))
    at = next(
        i
        for i, ln in enumerate(lines)
        if ln.startswith(ROW_START) and offsets[i] // BLOCK_UNIT == (offsets[i + 1] + len(WARMUP)) // BLOCK_UNIT
    )
    middle = len(lines[at]) // 2
    lines[at : at + 1] = [lines[at][:middle] + WARMUP, lines[at][middle:]]
    report = parse_sql("\n".join(lines))
    assert (len(report.rows), report.malformed) == (CASES - 1, (at + 1,))


def test_the_real_cpu_top_k_run_passes_with_the_spliced_sql_run() -> None:
    result = judge(spec(), [console_run(text(CONSOLE))], sql_run(text(SPLICED)))
    assert result.problems == ()


def test_a_row_printed_after_its_failure_message_is_read() -> None:
    """A failing case's row follows, on its line, what the comparison printed (stdout, ``[OP] ERR = ... > ... ``)."""
    report = parse_sql(sql_with_listing_failed(1))
    assert (len(report.rows), report.malformed) == (CASES, ())
    [failed] = [r for r in report.rows if not r.passed]
    assert (failed.name, failed.error_message, failed.printed) == (TWICE[0], "test failed", MESSAGE.strip())


def test_a_failed_row_of_a_case_the_console_failed_too_is_agreement() -> None:
    """Both runs failed the second listing: the console's failure is the problem; the sql run agrees with it. Had
    the sql run failed the first listing instead, which the console passed, the runs would disagree."""
    console = console_run(console_with_second_listing_failed(), 1)
    result = judge(spec(), [console], sql_run(sql_with_listing_failed(2), 1))
    assert result.problems == failed_second_listing_problems()
    other = judge(spec(), [console], sql_run(sql_with_listing_failed(1), 1))
    error = "test failed" + judging.SQL_PRINTED_BEFORE.format(printed=f'"{MESSAGE.strip()}"')
    assert judging.SQL_ROW_FAILED.format(label=judging.SQL_LABEL, case=TWICE[0], error=error) in other.problems, other.problems
