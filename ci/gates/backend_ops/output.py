"""What test-backend-ops prints, parsed: the console output and the ``--output sql`` rows, as upstream's
``tests/test-backend-ops.cpp`` prints them (docs/gates.md, "Formats it reads").

A case line is printed after its case ran, so what the comparison found precedes it on the same line; stdout is
flushed only after each ``  OP(params): ``, so through a pipe a stderr line can split a case from its status. A
figure that is NaN or inf is read wherever it shows (a NaN error prints no figure and says OK), so the judge can
fail it whatever the status says.
"""

from __future__ import annotations

import re
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import Enum

OP_RE = re.compile(r"^[A-Z][A-Z0-9_]*$")

_ANSI_RE = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
# the device lines a backend prints when it starts: "ggml_vulkan: 0 = NVIDIA H200 (NVIDIA) | uma: 0 | ..." and
# "  Device 0: NVIDIA H200, compute capability 9.0, VMM: yes" (CUDA, HIP)
_BACKEND_INFO_RE = re.compile(r"^(?:ggml_vulkan: \d+ = .*|  Device \d+: .*)$", re.MULTILINE)
_TESTING_RE = re.compile(r"^Testing (\d+) devices?$")
_HEADER_RE = re.compile(r"^Backend (\d+)/(\d+): (\S.*)$")
_SKIP_RE = re.compile(r"^  (Skipping.*)$")
_DESCRIPTION_RE = re.compile(r"^  Device description: (.*)$")
_MEMORY_RE = re.compile(r"^  Device memory: ")
_TESTS_PASSED_RE = re.compile(r"^  (\d+)/(\d+) tests passed$")
_FAILING_RE = re.compile(r"^Failing tests:$")
_BACKEND_STATUS_RE = re.compile(r"^  Backend (\S+): (OK|FAIL)$")
_BACKENDS_PASSED_RE = re.compile(r"^(\d+)/(\d+) backends passed$")
_VERDICT_RE = re.compile(r"^(OK|FAIL)$")
# the first "  OP(" on the line starts the case; anything before it is what the comparison printed
_CASE_RE = re.compile(r"^(?P<pre>.*?)  (?P<op>[A-Z][A-Z0-9_]*)\((?P<params>.*?)\):(?: (?P<rest>.*))?$")
_NOT_SUPPORTED_RE = re.compile(r"^not supported \[(?P<reason>[^\]]*)\]$")
_OTHER_MODES = {"perf": re.compile(r"^\d+ runs - "), "support": re.compile(r"^(?:NOT )?SUPPORTED$")}
_INSERT_RE = re.compile(r"^INSERT INTO test_backend_ops \((?P<columns>[^)]*)\) VALUES \('(?P<values>.*)'\);$")
_CREATE_RE = re.compile(r"^CREATE TABLE IF NOT EXISTS test_backend_ops \($")
# a named figure that is no finite number, as printf prints one: "ERR = nan", "NMSE = -nan", "CUDA0=inf"
_NON_FINITE_RE = re.compile(r"\b[A-Za-z_][A-Za-z0-9_.]*\s*=\s*[-+]?(?:nan|inf(?:inity)?)(?![A-Za-z0-9_.])", re.IGNORECASE)


def strip_ansi(text: str) -> str:
    return _ANSI_RE.sub("", text)


def non_finite_figure(text: str) -> str:
    """The first figure in ``text`` that is NaN or inf, as printed (``ERR = nan``); "" when there is none."""
    m = _NON_FINITE_RE.search(text)
    return m.group(0) if m else ""


# -- the console output -------------------------------------------------------------------------------------


class CaseMark(Enum):
    OK = "OK"
    FAIL = "FAIL"
    NOT_SUPPORTED = "not supported"
    NO_STATUS = "no status"  # the case line was printed, its OK/FAIL never came (the run was cut short)


@dataclass(frozen=True)
class ConsoleCase:
    """One ``  OP(params): STATUS`` line."""

    op: str
    params: str
    status: CaseMark
    message: str = ""  # what was printed before the case on its line: a failure's reason
    reason: str = ""  # the bracket of ``not supported [...]``
    interleaved: str = ""  # other output that landed between the case and its status (stderr of a backend)
    line: int = 0  # 1-based, in the parsed text

    @property
    def name(self) -> str:
        return f"{self.op}({self.params})"

    @property
    def non_finite(self) -> str:
        """A NaN or inf figure printed before the case on its line (``ERR = nan``), or ""."""
        return non_finite_figure(self.message)

    @property
    def passed(self) -> bool:
        """OK, with no NaN or inf figure before it."""
        return self.status is CaseMark.OK and not self.non_finite

    @property
    def ran(self) -> bool:
        return self.status is not CaseMark.NOT_SUPPORTED


@dataclass(frozen=True)
class DeviceReport:
    """What test-backend-ops printed for one device, ``Backend i/N: NAME`` to ``Backend NAME: OK|FAIL``."""

    name: str
    index: int
    total: int
    skipped: str = ""  # "Skipping" (another -b was given) or "Skipping CPU backend" (no -b)
    description: str = ""
    cases: tuple[ConsoleCase, ...] = ()
    summary: tuple[int, int] | None = None  # "N/M tests passed"
    failing: tuple[str, ...] = ()  # the "Failing tests:" list
    status: str = ""  # "OK" or "FAIL" from "Backend NAME: ...", "" when it was never printed

    @property
    def ran(self) -> bool:
        return not self.skipped


@dataclass(frozen=True)
class ConsoleReport:
    """A parsed ``test-backend-ops test`` console output."""

    device_count: int | None  # "Testing N devices"; None when that line never came
    devices: tuple[DeviceReport, ...]
    backends: tuple[int, int] | None  # "N/M backends passed"
    verdict: str  # the last line, "OK" or "FAIL"; "" when the output stops before it
    mode: str = "test"  # "perf" or "support" when the cases say so: not output this gate can judge
    last_words: str = ""  # what was printed after the last line of the report: an assertion, an abort message
    lines: int = 0
    backend_lines: tuple[str, ...] = ()  # what the backends said of their devices: "ggml_vulkan: 0 = NVIDIA H200 (NVIDIA) | ..."

    @property
    def complete(self) -> bool:
        return bool(self.verdict)

    def device(self, name: str) -> DeviceReport | None:
        for d in self.devices:
            if d.name == name:
                return d
        return None


class _Section:
    """A device's report while it is being read."""

    def __init__(self, name: str, index: int, total: int) -> None:
        self.name, self.index, self.total = name, index, total
        self.skipped = ""
        self.description = ""
        self.cases: list[ConsoleCase] = []
        self.summary: tuple[int, int] | None = None
        self.failing: list[str] = []
        self.status = ""

    def freeze(self) -> DeviceReport:
        return DeviceReport(
            name=self.name,
            index=self.index,
            total=self.total,
            skipped=self.skipped,
            description=self.description,
            cases=tuple(self.cases),
            summary=self.summary,
            failing=tuple(self.failing),
            status=self.status,
        )


@dataclass
class _Pending:
    """A case whose ``: `` was printed but whose status has not come yet."""

    op: str
    params: str
    message: str
    line: int
    interleaved: list[str] = field(default_factory=list)

    def close(self, status: CaseMark, reason: str = "") -> ConsoleCase:
        return ConsoleCase(
            op=self.op,
            params=self.params,
            status=status,
            message=self.message,
            reason=reason,
            interleaved=" | ".join(s for s in self.interleaved if s),
            line=self.line,
        )


def _status_of(text: str) -> tuple[CaseMark, str] | None:
    text = text.strip()
    if text == "OK":
        return CaseMark.OK, ""
    if text == "FAIL":
        return CaseMark.FAIL, ""
    m = _NOT_SUPPORTED_RE.match(text)
    if m:
        return CaseMark.NOT_SUPPORTED, m.group("reason")
    return None


LAST_WORDS = 40  # lines of trailing noise a report keeps
# Messages, shared with the tests that match on them (tests/support/messages.py)
TAIL_CUT = "({before} lines before) ... | {shown}"
# the first characters of every line the report's own regexes match, but a case's (which has "):"); ANSI stripped
_STRUCTURE_STARTS = frozenset(" TBFO0123456789")


class _Tail:
    """The last lines of trailing noise, at most LAST_WORDS of them, and how many there were."""

    def __init__(self, first: list[str] | None = None) -> None:
        self.lines: deque[str] = deque(first or (), maxlen=LAST_WORDS)
        self.count = len(self.lines)

    def add(self, line: str) -> None:
        self.lines.append(line)
        self.count += 1

    def text(self) -> str:
        shown = " | ".join(self.lines)
        return shown if self.count <= LAST_WORDS else TAIL_CUT.format(before=self.count - LAST_WORDS, shown=shown)


def parse_console(text: str) -> ConsoleReport:
    """Read a ``test-backend-ops test`` console output (ANSI codes and interleaved stderr included).

    Never raises: what it cannot place is kept as ``last_words``, and a report that stops early is incomplete.
    """
    lines = strip_ansi(text).splitlines()
    device_count: int | None = None
    sections: list[_Section] = []
    section: _Section | None = None
    pending: _Pending | None = None
    in_failing = False
    backends: tuple[int, int] | None = None
    verdict = ""
    mode = "test"
    # what came after the last recognised line, kept only for noise: a bounded tail, never one growing string (joining
    # each unrecognised line onto it made judging quadratic: 10 MB of noise took 92 s)
    last_words: _Tail | None = None

    def settle() -> None:
        nonlocal pending
        if pending is not None and section is not None:
            section.cases.append(pending.close(CaseMark.NO_STATUS))
        pending = None

    for number, raw in enumerate(lines, 1):
        line = raw.rstrip()
        if not line.strip():
            continue
        words, last_words = last_words, None
        if pending is not None:
            found = _status_of(line)
            if found is not None and section is not None:
                section.cases.append(pending.close(*found))
                pending = None
                continue
        if in_failing and section is not None:
            m = _BACKEND_STATUS_RE.match(line)
            if m:
                section.status = m.group(2)
                in_failing = False
                continue
            if line.startswith("  "):
                section.failing.append(line.strip())
                continue
            in_failing = False
        if line[0] not in _STRUCTURE_STARTS and "):" not in line:  # noise: no line of the report starts so (a fast path)
            if pending is not None:
                pending.interleaved.append(line.strip())
            last_words = words if words is not None else _Tail()
            last_words.add(line.strip())
            continue
        m = _TESTING_RE.match(line)
        if m:
            device_count = int(m.group(1))
            continue
        m = _HEADER_RE.match(line)
        if m:
            settle()
            section = _Section(m.group(3).strip(), int(m.group(1)), int(m.group(2)))
            sections.append(section)
            continue
        m = _BACKENDS_PASSED_RE.match(line)
        if m:
            settle()
            backends = (int(m.group(1)), int(m.group(2)))
            continue
        if backends is not None:
            m = _VERDICT_RE.match(line)
            if m:
                verdict = m.group(1)
                continue
        if section is not None:
            m = _TESTS_PASSED_RE.match(line)
            if m:
                settle()
                section.summary = (int(m.group(1)), int(m.group(2)))
                continue
            if _FAILING_RE.match(line):
                settle()
                in_failing = True
                continue
            m = _BACKEND_STATUS_RE.match(line)
            if m:
                settle()
                section.status = m.group(2)
                continue
            if not section.cases and pending is None:
                m = _SKIP_RE.match(line)
                if m:
                    section.skipped = m.group(1).strip()
                    continue
                m = _DESCRIPTION_RE.match(line)
                if m:
                    section.description = m.group(1).strip()
                    continue
                if _MEMORY_RE.match(line):
                    continue
            m = _CASE_RE.match(line)
            if m:
                settle()
                rest = (m.group("rest") or "").strip()
                found = _status_of(rest)
                pre = m.group("pre").strip()
                other = next((name for name, mode_re in _OTHER_MODES.items() if mode_re.match(rest)), None)
                if found is not None:
                    status, reason = found
                    section.cases.append(ConsoleCase(m.group("op"), m.group("params"), status, pre, reason, "", number))
                elif other is not None:
                    mode = other
                    section.cases.append(ConsoleCase(m.group("op"), m.group("params"), CaseMark.NO_STATUS, pre, "", rest, number))
                else:
                    pending = _Pending(m.group("op"), m.group("params"), pre, number, [rest])
                    if rest:
                        last_words = _Tail([rest])
                continue
        if pending is not None:
            pending.interleaved.append(line.strip())
        last_words = words if words is not None else _Tail()
        last_words.add(line.strip())
    settle()
    return ConsoleReport(
        device_count=device_count,
        devices=tuple(s.freeze() for s in sections),
        backends=backends,
        verdict=verdict,
        mode=mode,
        last_words=last_words.text() if last_words is not None else "",
        lines=len(lines),
        backend_lines=tuple(m.group(0).strip() for m in _BACKEND_INFO_RE.finditer("\n".join(lines))),
    )


# -- the --output sql output ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class SqlRow:
    """One ``INSERT INTO test_backend_ops`` row."""

    build_commit: str
    backend_name: str
    op_name: str
    op_params: str
    test_mode: str
    supported: bool
    passed: bool
    error_message: str = ""
    printed: str = ""  # what was printed before the row on its line: a failing case's comparison (``[OP] ERR = ...``)

    @property
    def name(self) -> str:
        return f"{self.op_name}({self.op_params})"

    @property
    def non_finite(self) -> str:
        """A NaN or inf figure in the row's ``error_message`` or printed before it (``ERR = nan``), or ""."""
        return non_finite_figure(self.error_message) or non_finite_figure(self.printed)


@dataclass(frozen=True)
class SqlReport:
    rows: tuple[SqlRow, ...]
    has_header: bool  # the CREATE TABLE statement was there
    malformed: tuple[int, ...] = ()  # line numbers of INSERT lines that could not be read

    def commits(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(r.build_commit for r in self.rows))


_SQL_NEEDED = ("build_commit", "backend_name", "op_name", "op_params", "test_mode", "supported", "passed")
ROW_START = "INSERT INTO test_backend_ops ("
_ROW_BYTES = ROW_START.encode()
# stdio buffers a pipe's or a file's stdout in st_blksize bytes, and the sql printer never flushes: rows leave in blocks
# (the fork's TOP_K sql run through a pipe: 43 writes of 4096 bytes and one of 1,704), of a multiple of this size
BLOCK_UNIT = 512
SPLIT_SPAN = 64  # how many of a backend's lines may stand between the two halves of a row one of them split
SPLIT_LONGEST = 65536  # bytes of a line a row's first half starts: a row and a backend's line are far shorter


def _row(line: str) -> SqlRow | None:
    """The row on ``line``, after whatever was printed before it; None when there is none that can be read."""
    start = line.find(ROW_START)
    m = _INSERT_RE.match(line[start:].strip()) if start >= 0 and line.count(ROW_START) == 1 else None
    if m is None:
        return None
    columns = [c.strip() for c in m.group("columns").split(",")]
    values = m.group("values").split("', '")
    if len(values) != len(columns) or any(c not in columns for c in _SQL_NEEDED):
        return None
    v = dict(zip(columns, values, strict=True))
    if v["supported"] not in ("0", "1") or v["passed"] not in ("0", "1"):
        return None
    return SqlRow(
        build_commit=v["build_commit"],
        backend_name=v["backend_name"],
        op_name=v["op_name"],
        op_params=v["op_params"],
        test_mode=v["test_mode"],
        supported=v["supported"] == "1",
        passed=v["passed"] == "1",
        error_message=v.get("error_message", ""),
        printed=line[:start].strip(),
    )


def _mend(lines: Sequence[str], i: int, stdout: int) -> tuple[SqlRow, int, int] | None:
    """The row another writer's line split at line ``i``: (the row, the line its rest is on, its stdout bytes).

    A backend's line written to the pipe while a block of stdout was pending lands where the block ends, inside the
    row that straddles it: the row is ``lines[i]`` up to a byte where stdout reaches a multiple of BLOCK_UNIT, then the
    next line that completes it. Joined only where exactly one cut gives a row: else None, reported, never guessed.
    """
    raw, first = lines[i].encode("utf-8"), -stdout % BLOCK_UNIT or BLOCK_UNIT
    if not first <= len(raw) <= SPLIT_LONGEST:
        return None  # no block ended on this line
    begins = raw.find(_ROW_BYTES)
    # the block ended inside the row: after ROW_START, or inside it (then it starts the line)
    cuts = range(first, len(raw) + 1, BLOCK_UNIT)
    found: list[tuple[SqlRow, int, int]] = []
    for cut in (c for c in cuts if (c >= begins + len(_ROW_BYTES) if begins >= 0 else _ROW_BYTES.startswith(raw[:c]))):
        try:
            head = raw[:cut].decode("utf-8")
        except UnicodeDecodeError:
            continue
        for j in range(i + 1, min(i + 1 + SPLIT_SPAN, len(lines))):
            if lines[j].rstrip().endswith(");") or ROW_START in lines[j]:  # the row's rest, or the next row: no further
                if (row := _row(head + lines[j])) is not None:
                    found.append((row, j, cut + len(lines[j].encode("utf-8")) + 1))
                break
    return found[0] if len(found) == 1 else None


def parse_sql(text: str) -> SqlReport:
    """Read ``--output sql``: every INSERT row, after what a failing case's comparison printed on its line, and rejoined
    where a backend's stderr line split it (:func:`_mend`); other lines (a backend's stderr) are ignored. Values are
    single-quoted and not escaped by test-backend-ops, so a row whose value holds ``', '`` is reported, not guessed.
    """
    rows: list[SqlRow] = []
    malformed: list[int] = []
    has_header = False
    lines = strip_ansi(text).split("\n")
    stdout = 0  # bytes test-backend-ops wrote to stdout before the line at hand: where its blocks end
    i = 0
    while i < len(lines):
        line, number = lines[i], i + 1
        if not line.startswith("I") and "INSERT" not in line and "CREATE" not in line:
            i += 1  # a backend's line: no row, nor the start of one
            continue
        if _CREATE_RE.match(line.strip()):  # the header, to its ");" and the blank line after it: stdout too
            has_header = True
            end = next((k for k in range(i, min(i + SPLIT_SPAN, len(lines))) if lines[k].strip() == ");"), i)
            end += end + 1 < len(lines) and not lines[end + 1]
            stdout = sum(len(ln.encode("utf-8")) + 1 for ln in lines[i : end + 1])  # a run's stdout starts with it
            i = end + 1
            continue
        row, written = _row(line), len(line.encode("utf-8")) + 1
        if row is None and line and (mended := _mend(lines, i, stdout)) is not None:
            row, i, written = mended
        if row is not None:
            rows.append(row)
        elif ROW_START in line:
            malformed.append(number)
        else:
            written = 0  # a backend's stderr line
        stdout += written
        i += 1
    return SqlReport(rows=tuple(rows), has_header=has_header, malformed=tuple(malformed))
