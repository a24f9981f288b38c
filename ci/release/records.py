"""A gate's record, in one place: its JSON, its JUnit and a ledger line naming the build it judged
(:func:`record`); and how a run of gates is reported: the table, the CI job's summary, each problem.

The ledger is what ``nox -s ship`` counts.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from ci.errors import GateFailed, ServerFailed
from ci.files import shown
from ci.gates import results
from ci.gates.results import GateResult, Status
from ci.release import ledger

COUNTS = tuple(s.value for s in Status)  # the summary table's count columns

# Messages, shared with the tests that match on them (tests/support/messages.py)
GATES_FAILED = "gpu_tests: {failed} of {total} gates did not pass: {gates}"
ALL_PASSED = "gpu_tests: all {total} gates passed"
TABLE_COLUMNS = ("gate", "verdict", *COUNTS, "seconds", "summary")  # the console table's header (summary_table)
SUMMARY_HEADING = "### {title}"
SUMMARY_HEADER = "| " + " | ".join(TABLE_COLUMNS) + " |"  # and the markdown table's
SUMMARY_ROW = "| {gate} | {verdict} | {counts} | {seconds:.1f} | {summary} |"
SUMMARY_FAILED = "**{verdict}**"  # SUMMARY_ROW's verdict of a gate that did not pass
SUMMARY_PROBLEM = "- {gate}: {problem}"
GATE_SUMMARY = "{gate}: {summary}"  # one gate run on its own (one_gate), then each problem and where it wrote
GATE_PROBLEM = "  - {problem}"
WROTE = "{gate}: wrote {json} and {junit}"


def record(
    result: GateResult,
    out: Path,
    properties: Mapping[str, str] | None = None,
    *,
    ledger_path: Path | None = None,
    build: ledger.BuildContext | None = None,
    root: Path | None = None,
) -> ledger.Record | None:
    """A gate's record: ``out/<gate>.json``, ``out/<gate>.junit.xml``, and, given a ledger, its line there."""
    json_path, junit_path = out / f"{result.gate}.json", out / f"{result.gate}.junit.xml"
    results.write_json(json_path, result)
    results.write_junit(junit_path, [result], properties)
    if ledger_path is None:
        return None
    artefacts = {"json": shown(json_path, root), "junit": shown(junit_path, root)} if root else {}
    return ledger.append(ledger_path, result, build or ledger.BuildContext(), artefacts)


def report(done: Sequence[GateResult], title: str, say: Callable[[str], None]) -> None:
    """The table, the job summary, each problem; GateFailed when a gate did not pass."""
    say(summary_table(done))
    step_summary(summary_markdown(done, title))
    failed = [r for r in done if not r.ok]
    for r in failed:
        for problem in r.problems:
            say(f"  {r.gate}: {problem}")
    if failed:
        raise GateFailed(GATES_FAILED.format(failed=len(failed), total=len(done), gates=", ".join(r.gate for r in failed)))
    say(ALL_PASSED.format(total=len(done)))


def step_summary(markdown: str) -> None:
    """Append to the CI job's summary page when there is one (GitHub Actions sets GITHUB_STEP_SUMMARY)."""
    path = os.environ.get("GITHUB_STEP_SUMMARY")
    if path:
        with open(path, "a", encoding="utf-8") as fh:
            fh.write(markdown + "\n")


def summary_table(gate_results: Sequence[GateResult]) -> str:
    rows: list[tuple[str, ...]] = [TABLE_COLUMNS]
    for r in gate_results:
        rows.append(
            (
                r.gate,
                r.status.value.upper() if not r.ok else r.status.value,
                *(str(r.count(k)) for k in COUNTS),
                f"{r.seconds:.1f}",
                r.summary,
            )
        )
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]) - 1)]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(row[:-1], widths, strict=True)) + "  " + row[-1] for row in rows)


def summary_markdown(gate_results: Sequence[GateResult], title: str) -> str:
    """The summary table as GitHub markdown, for a CI job's summary page (``$GITHUB_STEP_SUMMARY``)."""
    lines = [SUMMARY_HEADING.format(title=title), "", SUMMARY_HEADER, "|" + " --- |" * len(TABLE_COLUMNS)]
    for r in gate_results:
        counts = " | ".join(str(r.count(k)) for k in COUNTS)
        verdict = r.status.value if r.ok else SUMMARY_FAILED.format(verdict=r.status.value.upper())
        lines.append(SUMMARY_ROW.format(gate=r.gate, verdict=verdict, counts=counts, seconds=r.seconds, summary=_cell(r.summary)))
    for r in gate_results:
        lines += [SUMMARY_PROBLEM.format(gate=r.gate, problem=_cell(p.splitlines()[0] if p else p)) for p in r.problems[:10]]
    return "\n".join(lines) + "\n"


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")



def one_gate(result: GateResult, out: Path, say: Callable[[str], None]) -> int:
    """One gate run on its own, outside a build: its JSON and JUnit (no ledger), the verdict, the exit status."""
    record(result, out)
    say(GATE_SUMMARY.format(gate=result.gate, summary=result.summary))
    for problem in result.problems:
        say(GATE_PROBLEM.format(problem=problem))
    say(WROTE.format(gate=result.gate, json=out / f"{result.gate}.json", junit=out / f"{result.gate}.junit.xml"))
    if result.ok:
        return 0
    return GateFailed.exit_code if result.status is Status.FAILED else ServerFailed.exit_code
