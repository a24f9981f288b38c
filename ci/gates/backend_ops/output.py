"""What test-backend-ops prints, parsed: the console output and the ``--output sql`` rows.

Formats, as upstream's ``tests/test-backend-ops.cpp`` prints them (console printer):

- ``Testing N devices``, then per device ``Backend i/N: NAME`` and either ``  Skipping`` / ``  Skipping CPU
  backend`` or the cases, ``  N/M tests passed``, an optional ``Failing tests:`` list and ``  Backend NAME: OK|FAIL``;
  at the end ``N/M backends passed`` and ``OK`` or ``FAIL``. ``OK``/``FAIL`` are ANSI-coloured.
- A case is ``  OP(params): OK|FAIL|not supported [DEVICE]``. The case line is printed after the case has run, and
  what the comparison found (``[OP] ERR = ... > ...``, ``[OP] NaN at index ...``, ``[OP] inf mismatch: ...``) was
  printed before it, so a failure's message precedes the case on the same line.
- The comparison prints a figure only when it fails (``ERR = X > MAX``), and NaN > MAX is false: a case whose error
  is NaN prints no figure and says OK. A figure that is NaN or inf (``ERR = nan``, ``CUDA0=inf``) is read wherever it
  shows, before a case or in a sql row's ``error_message``, so that the judge fails it whatever the status says.
- stdout is flushed after each ``  OP(params): `` and nothing else; stderr is not buffered. Through a pipe, a
  backend's stderr line can land between a case's ``: `` and its status, which then stands alone on a later line;
  and a process that aborts loses the status of the last case it printed (still in stdout's buffer).
"""

from __future__ import annotations

import re
from collections import deque
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
_INSERT_RE = re.compile(r"^INSERT INTO test_backend_ops \((?P<columns>[^)]*)\) VALUES \((?P<values>.*)\);$")
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

    def cases_of(self, op: str) -> tuple[ConsoleCase, ...]:
        return tuple(c for c in self.cases if c.op == op)


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

    @property
    def name(self) -> str:
        return f"{self.op_name}({self.op_params})"

    @property
    def non_finite(self) -> str:
        """A NaN or inf figure in the row's ``error_message`` (``ERR = nan``), or ""."""
        return non_finite_figure(self.error_message)


@dataclass(frozen=True)
class SqlReport:
    rows: tuple[SqlRow, ...]
    has_header: bool  # the CREATE TABLE statement was there
    malformed: tuple[int, ...] = ()  # line numbers of INSERT lines that could not be read

    def commits(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(r.build_commit for r in self.rows))


_SQL_NEEDED = ("build_commit", "backend_name", "op_name", "op_params", "test_mode", "supported", "passed")


def parse_sql(text: str) -> SqlReport:
    """Read ``--output sql``: every INSERT row; other lines (a backend's stderr) are ignored.

    Values are single-quoted and not escaped by test-backend-ops, so a row whose value holds ``', '`` cannot be
    split reliably: it is reported as malformed rather than guessed.
    """
    rows: list[SqlRow] = []
    malformed: list[int] = []
    has_header = False
    for number, raw in enumerate(strip_ansi(text).splitlines(), 1):
        line = raw.strip()
        if _CREATE_RE.match(line):
            has_header = True
            continue
        if not line.startswith("INSERT INTO test_backend_ops"):
            continue
        m = _INSERT_RE.match(line)
        if m is None:
            malformed.append(number)
            continue
        columns = [c.strip() for c in m.group("columns").split(",")]
        values_text = m.group("values")
        if not (values_text.startswith("'") and values_text.endswith("'")):
            malformed.append(number)
            continue
        values = values_text[1:-1].split("', '")
        if len(values) != len(columns) or any(c not in columns for c in _SQL_NEEDED):
            malformed.append(number)
            continue
        v = dict(zip(columns, values, strict=True))
        if v["supported"] not in ("0", "1") or v["passed"] not in ("0", "1"):
            malformed.append(number)
            continue
        rows.append(
            SqlRow(
                build_commit=v["build_commit"],
                backend_name=v["backend_name"],
                op_name=v["op_name"],
                op_params=v["op_params"],
                test_mode=v["test_mode"],
                supported=v["supported"] == "1",
                passed=v["passed"] == "1",
                error_message=v.get("error_message", ""),
            )
        )
    return SqlReport(rows=tuple(rows), has_header=has_header, malformed=tuple(malformed))
