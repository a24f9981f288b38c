"""The test-backend-ops gate's judge, pure: the evidence (console runs, the sql run) against what the pin expects.

test-backend-ops exits 0 and prints ``OK`` when it tested nothing (an unknown ``-b`` name, a CPU-only build run
without ``-b``), so the judge trusts neither: the device must have run, the passed cases must be the pin's count,
none may fail, the report must be complete and agree with itself, and the ``--output sql`` run must agree and name
the pinned commit. An OK beside a NaN or inf figure fails: NaN is never above a bound.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from typing import NamedTuple, Protocol

from ci.errors import describe_returncode
from ci.gates.backend_ops import NAME
from ci.gates.backend_ops.output import CaseMark, ConsoleCase
from ci.gates.backend_ops.spec import ConsoleRun, DirtyRule, GateSpec, SqlRun, same_commit
from ci.gates.results import CaseResult, GateResult, Status, case_counts
from ci.words import count, listed

GATE = NAME
FAILURES_LISTED = 10  # in the problems; every failed case is in the cases (JUnit) regardless

# Messages, shared with the tests that match on them (tests/support/messages.py)
# who said it: a console run of one op, or a saved log
LABEL_RUN = "test-backend-ops -o {op} -b {device}"
LABEL_LOG = "the log {log}"
# a console run
NOT_TEST_OUTPUT = "{label}: this is test-backend-ops {mode} output, not test output: the gate judges `test-backend-ops test` runs"
CASE_REPEATED = (
    "{label}: the case {case} is printed {times} times in a row (lines {lines}); test-backend-ops never lists a case right "
    "after itself, so this log is not one run's"
)
CASE_LINE_OF = "line {line} of {log}"
NOT_SUPPORTED_CASE = "not supported [{reason}]"
FAILED_CASE = "{case} FAILED: {why}"
NON_FINITE_OK = "marked OK, but {figure} is not a finite number (printed before it: {printed})"
CUT_AFTER_CASE = "no status: the run was cut short after this case line"
NO_CASE_STATUS = "no OK/FAIL was printed for this case"
LISTED_ONLY = "listed under 'Failing tests:' with no FAIL case line (an allocation failure prints none)"
PRINTED_BEFORE = "; printed before a later case: {printed}"
# a run cut short: CUT_SHORT, its subject and how and what it saw each a piece, LAST_OUTPUT after it when there was any
CUT_SHORT = "{label}: {subject} {how} {seen}; the rest count as not run ({rest})"
CUT_SUBJECT_RUN = "it"
CUT_SUBJECT_LOG = "the output"
HOW_TIMED_OUT = "timed out after {timeout:g} s and was killed"
HOW_TIMED_OUT_UNTIMED = "timed out and was killed"
HOW_SIGNAL = " ({signal})"
HOW_KILLED = "was killed by {signal} (signal {number})"
HOW_STOPPED = "stopped before test-backend-ops' final verdict (no 'N/M backends passed', no OK/FAIL)"
HOW_EXITED = " and exited with {status}"
SEEN_NOTHING = "before device {device} reported a case"
SEEN_CASES = "after {lines} on {device} ({tally})"
SEEN_OK = "{count} OK"
SEEN_FAIL = "{count} FAIL"
SEEN_UNSUPPORTED = "{count} not supported"
SEEN_NO_STATUS = "{count} without a status: {case}"
REST_NOT_RUN = "{op}: {left} of the {expected} expected"
LAST_OUTPUT = "; its last output: {last}"
# the device did not run
NO_REPORT = "device {device} did not run: {label} printed no test-backend-ops report (no 'Testing N devices'); is it test-backend-ops?"
NO_SUCH_DEVICE = "device {device} did not run: the build has no device named {device} (it listed {listed}); test-backend-ops skipped every device and still said {verdict}"
LISTED_SKIPPED = "{device} (skipped)"
NOT_LISTED = "device {device} did not run: the output has no device named {device} (it listed {listed}); it tested {tested} instead"
REPORTED_TWICE = "{label}: {device} is reported more than once: two runs in one output? Judge one run's output"
DEVICE_SKIPPED = "device {device} did not run: test-backend-ops printed {skipped} for it ({hint})"
HINT_CPU_WITHOUT_B = "without -b it never tests the CPU, so a CPU-only build tests nothing and exits 0; run it with -b CPU"
HINT_OTHER_B = "it was given another -b than {device}"
# the report against itself and the exit status
NO_TESTS_PASSED_LINE = "{label}: {device} printed no 'N/M tests passed' line after its {cases}"
SUMMARY_DISAGREES = (
    "{label}: test-backend-ops says {passed}/{total} tests passed on {device} but the log has {ok} OK of {ran} cases that ran: "
    "the log is not complete, or not in the format this gate reads"
)
NO_BACKEND_STATUS = "{label}: no 'Backend {device}: OK|FAIL' line"
OK_ALTHOUGH_FAILED = "{label}: 'Backend {device}: OK' although cases failed: the report contradicts itself"
FAIL_ALTHOUGH_NONE_FAILED = "{label}: 'Backend {device}: FAIL' although no case line failed (an error outside the cases; see the log)"
VERDICT_FAIL = "{label}: test-backend-ops' verdict is FAIL{where}"
EXITED_ALTHOUGH_OK = "{label}: exited with {status} although it printed OK"
EXITED_0_ALTHOUGH_FAIL = "{label}: exited with status 0 although it printed FAIL"
# counts: COUNT, its source where the count was set (spec.EXPECTED_IN_PINS or EXPECTED_BY_FLAG), then the pieces that apply
COUNT = "{op}: {expected} expected ({source}), {ran} ran, {passed} passed"
COUNT_UNSUPPORTED = ", {unsupported} not supported on {device}"
COUNT_NO_CASE = " (no {op} case at all: is the op name right, and does this build have it?)"
COUNT_CHANGED = "; if the fork's count changed, set it there"
NOT_RUN_FOR = "{op}: test-backend-ops was not run for it"
MORE_FAILED = "... and {more} more failed cases (all of them are in the JUnit XML)"
# the sql cross-check
SQL_LABEL = "the --output sql cross-check"
SQL_TIMED_OUT = "{label} timed out after {timeout:g} s"
SQL_TIMED_OUT_UNTIMED = "{label} timed out"
SQL_KILLED = "{label} was killed by {status}"
SQL_EXITED_ALTHOUGH_PASSED = "{label} exited with {status} although every row passed"
SQL_NO_HEADER = "{label}: no CREATE TABLE statement: that is not test-backend-ops --output sql"
SQL_MALFORMED = "{label}: {lines} could not be read (line {numbers})"
SQL_NO_ROWS = "{label}: no rows for {device}: the device did not run in the sql run"
SQL_COMMITS_DISAGREE = "{label}: the rows disagree on build_commit: {commits}"
SQL_NO_COMMIT = "{label}: no row carries a build_commit, so the binary cannot be shown to be the pin {pin}"
SQL_ROW_FAILED = "{label}: {case} failed in the sql run ({error})"
SQL_ROW_NON_FINITE = "{label}: {case} passed in the sql run, but {figure} is not a finite number ({error})"
SQL_PRINTED_BEFORE = "; printed before it: {printed}"
SQL_MORE_ROWS_FAILED = "{label}: ... and {more} more {op} rows failed"
SQL_DISAGREES = "{label}: {op} passed {sql_passed} of {sql_ran} in the sql run but {passed} of {ran} on the console: the two runs disagree"
COMMIT_UNKNOWN = 'build_commit is "{build_commit}": the binary was built outside a git checkout, so it cannot be shown to be the pin {pin}'
OTHER_COMMIT = "build_commit {build_commit} is not the pinned commit {pin} ({pinned}): these binaries were built from another commit; rebuild them"
CLEAN_ALTHOUGH_PATCHED = (
    "build_commit {build_commit} has no -dirty suffix but the dirty rule is 'dirty' (patches applied): these binaries were built without the patches"
)
DIRTY_ALTHOUGH_CLEAN = (
    "build_commit {build_commit} has a -dirty suffix but the dirty rule is 'clean' (no patches applied): the checkout had "
    "local changes when it was built (if it is known to differ, e.g. omitted files, say so with --dirty dirty)"
)
# the properties' values
BUILD_COMMIT_NOT_SEEN = "not seen"
NO_PIN_GIVEN = "not made: no pinned commit given"
NO_SQL_OUTPUT = "not made: no --output sql output"
SOURCE_SAVED_LOG = "a saved console log"
# the summary: one of these three, TALLY per op joined by ", "
TALLY = "{op} {passed}/{expected}"
PASSED_AS_PINNED = "PASSED on {device}: {tallies} passed; build_commit {build_commit} is the pin {pin}"
PASSED_UNCHECKED = "PASSED on {device}: {tallies} passed; build_commit check {check}"
FAILED_SUMMARY = "FAILED on {device}: {tallies} passed; {problems}"


def _quote(text: str, limit: int = 160) -> str:
    return f'"{text if len(text) <= limit else text[: limit - 3] + "..."}"'


class _Judgement:
    def __init__(self, spec: GateSpec) -> None:
        self.spec = spec
        self.problems: list[str] = []
        self.cases: list[CaseResult] = []
        self.failed_names: list[str] = []
        self.properties: dict[str, str] = {}
        self.seen_ok: dict[str, int] = {}  # OK case lines per op, counted even when the run was cut short
        self.failed_listings: set[tuple[str, int]] = set()  # (case, which listing of it): the console runs' failures

    def problem(self, text: str) -> None:
        self.problems.append(text)


class _Tally(NamedTuple):
    """One op's cases in a console run."""

    passed: int  # OK, with no NaN or inf figure
    ran: int
    unsupported: int
    printed_ok: int  # OK as printed: what the sql run, from the same binary, is compared with


class _Named(Protocol):
    @property
    def name(self) -> str: ...


def _listings(items: Sequence[_Named]) -> list[int]:
    """Which listing of its case each item is (1 for a case's first line or row, 2 for its second, ...)."""
    seen: Counter[str] = Counter()
    out = []
    for item in items:
        seen[item.name] += 1
        out.append(seen[item.name])
    return out


def _label(run: ConsoleRun, device: str) -> str:
    if run.op is not None:
        return LABEL_RUN.format(op=run.op, device=device)
    return LABEL_LOG.format(log=run.log) if run.log else "the log"


def _ops_of(run: ConsoleRun, spec: GateSpec) -> list[tuple[str, int]]:
    return [(op, n) for op, n in spec.expected if run.op is None or run.op == op]


def _judge_console(j: _Judgement, run: ConsoleRun) -> dict[str, _Tally]:
    """Problems and cases of one console run; returns each op's tally when its cases can be counted."""
    spec, device, report, outcome = j.spec, j.spec.device, run.report, run.outcome
    label = _label(run, device)
    section = report.device(device)
    cases = section.cases if section is not None else ()
    if section is not None and section.description:
        j.properties["device_description"] = section.description  # which GPU and driver ran: the records name it
    if report.backend_lines:
        j.properties["backend_info"] = "; ".join(report.backend_lines[:4])
    cut = outcome.killed or not report.complete
    counted: dict[str, _Tally] = {}
    if report.mode != "test":
        j.problem(NOT_TEST_OUTPUT.format(label=label, mode=report.mode))
        return counted

    # Each case line is a case, keyed by where it is printed: the program's list may hold a case twice (two loops making
    # the same parameters: ciru-ai c14872f lists 5 TOP_K cases twice, upstream b11434 38 of its 98 ARGSORT), and each
    # listing runs. But no listing follows itself (in support mode's listing of the whole list, none of the fork's
    # 18,194 cases nor upstream's 21,427): a case line right after itself is a log edited together, not evidence.
    kept: list[ConsoleCase] = []
    in_a_row: dict[int, list[int]] = {}  # a kept case's line: the lines of it and of its copies right after it
    for c in cases:
        if kept and kept[-1].name == c.name:
            in_a_row.setdefault(kept[-1].line, [kept[-1].line]).append(c.line)
        else:
            kept.append(c)
    for c in kept:
        if c.line in in_a_row:
            lines = listed([str(n) for n in in_a_row[c.line]], 5)
            j.problem(CASE_REPEATED.format(label=label, case=c.name, times=len(in_a_row[c.line]), lines=lines))
    cases = tuple(kept)
    for c, listing in zip(cases, _listings(cases), strict=True):
        if c.status is CaseMark.FAIL or (c.status is CaseMark.OK and c.non_finite):
            j.failed_listings.add((c.name, listing))
    for c in cases:
        if c.passed:
            j.seen_ok[c.op] = j.seen_ok.get(c.op, 0) + 1
        classname = f"{GATE}.{device}.{c.op}"
        detail = CASE_LINE_OF.format(line=c.line, log=run.log) if run.log else f"line {c.line}"
        if c.interleaved:
            detail += f"; printed in between: {c.interleaved}"
        if c.status is CaseMark.OK and c.non_finite:
            why = NON_FINITE_OK.format(figure=c.non_finite, printed=_quote(c.message))
            j.cases.append(CaseResult(c.name, Status.FAILED, why, classname, detail))
            j.failed_names.append(FAILED_CASE.format(case=c.name, why=why))
        elif c.status is CaseMark.OK:
            j.cases.append(CaseResult(c.name, Status.PASSED, "", classname, detail))
        elif c.status is CaseMark.NOT_SUPPORTED:
            j.cases.append(CaseResult(c.name, Status.SKIPPED, NOT_SUPPORTED_CASE.format(reason=c.reason), classname, detail))
        elif c.status is CaseMark.FAIL:
            why = c.message or "no message was printed before it"
            j.cases.append(CaseResult(c.name, Status.FAILED, why, classname, detail))
            j.failed_names.append(FAILED_CASE.format(case=c.name, why=why))
        else:
            why = CUT_AFTER_CASE if cut else NO_CASE_STATUS
            if c.interleaved:
                why += f" (it printed {_quote(c.interleaved)})"
            j.cases.append(CaseResult(c.name, Status.ERROR, why, classname, detail))
            if not cut:
                j.failed_names.append(FAILED_CASE.format(case=c.name, why=why))
    listed_only: list[str] = []  # failed cases test-backend-ops printed no case line for (an allocation failure)
    if section is not None:
        # as many names under 'Failing tests:' as FAIL lines of that case: a name beyond them had no case line
        seen = Counter(c.name for c in cases if c.status is CaseMark.FAIL)
        stray = "; ".join(c.message for c in cases if c.status is CaseMark.OK and c.message)
        for name in section.failing:
            if seen[name]:
                seen[name] -= 1
            else:
                listed_only.append(name)
                op = name.split("(", 1)[0]
                why = LISTED_ONLY
                if stray:
                    why += PRINTED_BEFORE.format(printed=_quote(stray))
                j.cases.append(CaseResult(name, Status.FAILED, why, f"{GATE}.{device}.{op}"))
                j.failed_names.append(FAILED_CASE.format(case=name, why=why))

    if cut:
        ok = sum(c.status is CaseMark.OK for c in cases)
        fail = sum(c.status is CaseMark.FAIL for c in cases)
        unsupported = sum(c.status is CaseMark.NOT_SUPPORTED for c in cases)
        no_status = [c for c in cases if c.status is CaseMark.NO_STATUS]
        if outcome.timed_out:
            how = HOW_TIMED_OUT.format(timeout=outcome.timeout) if outcome.timeout else HOW_TIMED_OUT_UNTIMED
            if outcome.signal_name:
                how += HOW_SIGNAL.format(signal=outcome.signal_name)
        elif outcome.killed:
            how = HOW_KILLED.format(signal=outcome.signal_name, number=-(outcome.returncode or 0))
        else:
            how = HOW_STOPPED
            if outcome.returncode is not None:
                how += HOW_EXITED.format(status=describe_returncode(outcome.returncode))
        if section is None or not section.ran:
            seen_text = SEEN_NOTHING.format(device=device)
        else:
            parts = [SEEN_OK.format(count=ok), SEEN_FAIL.format(count=fail)]
            if unsupported:
                parts.append(SEEN_UNSUPPORTED.format(count=unsupported))
            if no_status:
                parts.append(SEEN_NO_STATUS.format(count=len(no_status), case=no_status[-1].name))
            seen_text = SEEN_CASES.format(lines=count(len(cases), "case line"), device=device, tally=", ".join(parts))
        rest = []
        for op, n in _ops_of(run, spec):
            done = sum(1 for c in cases if c.op == op and c.passed)
            rest.append(REST_NOT_RUN.format(op=op, left=max(n - done, 0), expected=n))
        subject = CUT_SUBJECT_LOG if run.op is None else CUT_SUBJECT_RUN
        text = CUT_SHORT.format(label=label, subject=subject, how=how, seen=seen_text, rest="; ".join(rest))
        if report.last_words:
            text += LAST_OUTPUT.format(last=_quote(report.last_words))
        j.problem(text)
        return counted

    if section is None:
        names = ", ".join(LISTED_SKIPPED.format(device=d.name) if d.skipped else d.name for d in report.devices)
        if report.device_count is None and not report.devices:
            j.problem(NO_REPORT.format(device=device, label=label))
        elif all(not d.ran for d in report.devices):
            j.problem(NO_SUCH_DEVICE.format(device=device, listed=names or "no device", verdict=report.verdict))
        else:
            tested = ", ".join(d.name for d in report.devices if d.ran)
            j.problem(NOT_LISTED.format(device=device, listed=names, tested=tested))
        return counted
    if sum(d.name == device for d in report.devices) > 1:
        j.problem(REPORTED_TWICE.format(label=label, device=device))
        return counted
    if not section.ran:
        hint = HINT_CPU_WITHOUT_B if section.skipped == "Skipping CPU backend" else HINT_OTHER_B.format(device=device)
        j.problem(DEVICE_SKIPPED.format(device=device, skipped=_quote(section.skipped), hint=hint))
        return counted

    ok = sum(c.status is CaseMark.OK for c in cases)
    ran = sum(c.ran for c in cases) + len(listed_only)
    if section.summary is None:
        j.problem(NO_TESTS_PASSED_LINE.format(label=label, device=device, cases=count(len(cases), "case")))
    elif section.summary != (ok, ran):
        j.problem(SUMMARY_DISAGREES.format(label=label, passed=section.summary[0], total=section.summary[1], device=device, ok=ok, ran=ran))
    failed_here = any(c.status in (CaseMark.FAIL, CaseMark.NO_STATUS) for c in cases) or bool(section.failing)
    if not section.status:
        j.problem(NO_BACKEND_STATUS.format(label=label, device=device))
    elif section.status == "OK" and failed_here:
        j.problem(OK_ALTHOUGH_FAILED.format(label=label, device=device))
    elif section.status == "FAIL" and not failed_here:
        j.problem(FAIL_ALTHOUGH_NONE_FAILED.format(label=label, device=device))
    if report.verdict == "FAIL" and not failed_here and section.status != "FAIL":
        others = [d.name for d in report.devices if d.status == "FAIL"]
        where = f" (failed: {', '.join(others)})" if others else ""
        j.problem(VERDICT_FAIL.format(label=label, where=where))
    rc = outcome.returncode
    if rc is not None:
        if rc != 0 and report.verdict == "OK":
            j.problem(EXITED_ALTHOUGH_OK.format(label=label, status=describe_returncode(rc)))
        elif rc == 0 and report.verdict == "FAIL":
            j.problem(EXITED_0_ALTHOUGH_FAIL.format(label=label))

    for op, _ in _ops_of(run, spec):
        mine = tuple(c for c in cases if c.op == op)
        counted[op] = _Tally(
            passed=sum(c.passed for c in mine),
            ran=sum(c.ran for c in mine) + sum(1 for name in listed_only if name.startswith(f"{op}(")),
            unsupported=sum(c.status is CaseMark.NOT_SUPPORTED for c in mine),
            printed_ok=sum(c.status is CaseMark.OK for c in mine),
        )
    return counted


def _judge_counts(j: _Judgement, counted: Mapping[str, _Tally]) -> None:
    for op, n in j.spec.expected:
        if op not in counted:
            continue
        t = counted[op]
        if t.passed == n:
            continue
        text = COUNT.format(op=op, expected=n, source=j.spec.expectation_source(op), ran=t.ran, passed=t.passed)
        if t.unsupported:
            text += COUNT_UNSUPPORTED.format(unsupported=t.unsupported, device=j.spec.device)
        if t.ran == 0 and t.unsupported == 0:
            text += COUNT_NO_CASE.format(op=op)
        elif t.ran + t.unsupported != n:  # not failures or refusals: the fork prints another number of cases
            text += COUNT_CHANGED
        j.problem(text)


def _judge_sql(j: _Judgement, sql: SqlRun, console_passed: Mapping[str, _Tally]) -> None:
    spec, device, report = j.spec, j.spec.device, sql.report
    label = SQL_LABEL
    if sql.outcome.timed_out:
        j.problem(SQL_TIMED_OUT.format(label=label, timeout=sql.outcome.timeout) if sql.outcome.timeout else SQL_TIMED_OUT_UNTIMED.format(label=label))
    elif sql.outcome.killed:
        j.problem(SQL_KILLED.format(label=label, status=describe_returncode(sql.outcome.returncode or 0)))
    elif sql.outcome.returncode not in (None, 0) and all(r.passed for r in report.rows if r.supported) and all(t.printed_ok == t.ran for t in console_passed.values()):
        # a failing case has no row in --output sql (it exits 1 then): only a run whose console passed too is odd
        j.problem(SQL_EXITED_ALTHOUGH_PASSED.format(label=label, status=describe_returncode(sql.outcome.returncode or 0)))
    if not report.has_header:
        j.problem(SQL_NO_HEADER.format(label=label))
    if report.malformed:
        shown = ", ".join(str(n) for n in report.malformed[:5])
        j.problem(SQL_MALFORMED.format(label=label, lines=count(len(report.malformed), "INSERT line"), numbers=shown))
    rows = [r for r in report.rows if r.backend_name == device and r.test_mode == "test"]
    commits = report.commits()
    j.properties["build_commit"] = ", ".join(commits) if commits else BUILD_COMMIT_NOT_SEEN
    if not rows:
        j.problem(SQL_NO_ROWS.format(label=label, device=device))
    if len(commits) > 1:
        j.problem(SQL_COMMITS_DISAGREE.format(label=label, commits=", ".join(commits)))
    if spec.pinned_commit is None:
        j.properties["build_commit_check"] = NO_PIN_GIVEN
    elif not commits:
        j.properties["build_commit_check"] = "failed"
        j.problem(SQL_NO_COMMIT.format(label=label, pin=spec.pin))
    else:
        value = commits[0]
        short, dirty = (value[: -len("-dirty")], True) if value.endswith("-dirty") else (value, False)
        before = len(j.problems)
        if short == "unknown":
            j.problem(COMMIT_UNKNOWN.format(build_commit=value, pin=spec.pin))
        elif not same_commit(short, spec.pinned_commit):
            j.problem(OTHER_COMMIT.format(build_commit=value, pin=spec.pin, pinned=spec.pinned_commit))
        elif spec.dirty is DirtyRule.DIRTY and not dirty:
            j.problem(CLEAN_ALTHOUGH_PATCHED.format(build_commit=value))
        elif spec.dirty is DirtyRule.CLEAN and dirty:
            j.problem(DIRTY_ALTHOUGH_CLEAN.format(build_commit=value))
        j.properties["build_commit_check"] = "passed" if len(j.problems) == before else "failed"
    for op, _ in spec.expected:
        mine = [r for r in rows if r.op_name == op]
        # a row of a case the console failed too (the same listing of it) agrees with the console: its failure is
        # already a problem; a failed row the console passed is a disagreement
        failed = [
            r
            for r, listing in zip(mine, _listings(mine), strict=True)
            if r.supported and (not r.passed or r.non_finite) and (r.name, listing) not in j.failed_listings
        ]
        for r in failed[:FAILURES_LISTED]:
            error = r.error_message or "no error_message"
            if r.printed:
                error += SQL_PRINTED_BEFORE.format(printed=_quote(r.printed))
            if r.passed:
                j.problem(SQL_ROW_NON_FINITE.format(label=label, case=r.name, figure=r.non_finite, error=error))
            else:
                j.problem(SQL_ROW_FAILED.format(label=label, case=r.name, error=error))
        if len(failed) > FAILURES_LISTED:
            j.problem(SQL_MORE_ROWS_FAILED.format(label=label, more=len(failed) - FAILURES_LISTED, op=op))
        if op in console_passed:
            ok, ran = console_passed[op].printed_ok, console_passed[op].ran
            sql_ok, sql_ran = sum(r.passed for r in mine), sum(r.supported for r in mine)
            # the sql run prints no row for a failing case: its rows are the console's passes, or every case
            if sql_ok != ok or sql_ran not in (ran, ok):
                j.problem(SQL_DISAGREES.format(label=label, op=op, sql_passed=sql_ok, sql_ran=sql_ran, passed=ok, ran=ran))


def judge(spec: GateSpec, runs: Sequence[ConsoleRun], sql: SqlRun | None, *, sql_not_made: str = "") -> GateResult:
    """The verdict on the evidence. Every failure is one line in ``problems`` that says what was seen."""
    j = _Judgement(spec)
    counted: dict[str, _Tally] = {}
    for op, _ in spec.expected:
        if not any(r.op is None or r.op == op for r in runs):
            j.problem(NOT_RUN_FOR.format(op=op))
    for run in runs:
        counted.update(_judge_console(j, run))
    _judge_counts(j, counted)
    for name in j.failed_names[:FAILURES_LISTED]:
        j.problem(name)
    if len(j.failed_names) > FAILURES_LISTED:
        j.problem(MORE_FAILED.format(more=len(j.failed_names) - FAILURES_LISTED))
    for run in runs:
        if run.op is not None:
            j.properties[f"exit.{run.op}"] = run.outcome.described()
    if sql is not None:
        _judge_sql(j, sql, counted)
        j.properties["sql_cross_check"] = "made"
        j.properties["exit.sql"] = sql.outcome.described()
    else:
        j.properties["sql_cross_check"] = sql_not_made or "not made"
        j.properties["build_commit"] = BUILD_COMMIT_NOT_SEEN
        j.properties["build_commit_check"] = NO_SQL_OUTPUT

    status = Status.FAILED if j.problems else Status.PASSED
    tallies = ", ".join(TALLY.format(op=op, passed=j.seen_ok.get(op, 0), expected=n) for op, n in spec.expected)
    if status is Status.PASSED:
        check = j.properties["build_commit_check"]
        if check == "passed":
            head = PASSED_AS_PINNED.format(device=spec.device, tallies=tallies, build_commit=j.properties["build_commit"], pin=spec.pin)
        else:
            head = PASSED_UNCHECKED.format(device=spec.device, tallies=tallies, check=check)
    else:
        head = FAILED_SUMMARY.format(device=spec.device, tallies=tallies, problems=count(len(j.problems), "problem"))
    properties = {
        "device": spec.device,
        "op": ",".join(op for op, _ in spec.expected),
        "expected": ",".join(f"{op}={n}" for op, n in spec.expected),
        "build_key": spec.build_key,
        "pin": spec.pinned_commit or "none",
        "patched": "yes" if spec.patched else "no",
        "dirty_rule": spec.dirty.value,
        **j.properties,
        "source": SOURCE_SAVED_LOG if any(r.op is None for r in runs) else "run",
    }
    counts = (*case_counts(j.cases), ("expected", sum(n for _, n in spec.expected)))
    return GateResult(
        gate=GATE,
        status=status,
        summary=head,
        cases=tuple(j.cases),
        problems=tuple(j.problems),
        counts=counts,
        properties=tuple(properties.items()),
        metrics=tuple((f"seconds.{r.op}", r.outcome.seconds) for r in runs if r.op is not None),
        seconds=sum(r.outcome.seconds for r in runs) + (sql.outcome.seconds if sql is not None else 0.0),
    )
