"""Results are objects: a gate returns a :class:`GateResult`; JUnit XML, JSON and the ledger only serialise it.

Parsing, judging and reporting are tested apart (nox's ``Result.serialize``).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from typing import Any

from ci.files import write_atomic

# Messages, shared with the tests that match on them (tests/support/messages.py)
VERDICT_CASE = "gate verdict"  # the JUnit test case that carries a failed verdict whose every case passed


class Status(Enum):
    PASSED = "passed"
    FAILED = "failed"
    SKIPPED = "skipped"
    ERROR = "error"  # the gate could not judge (a binary missing, a server that never came up)

    @property
    def ok(self) -> bool:
        return self is Status.PASSED


@dataclass(frozen=True)
class CaseResult:
    """One judged case: a test-backend-ops case, a route test, a prompt of the equivalence gate."""

    name: str
    status: Status
    message: str = ""
    classname: str = ""
    detail: str = ""
    seconds: float = 0.0
    inconclusive: bool = False  # failed for want of evidence (a perf interval straddling its floor): more may settle it

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"name": self.name, "status": self.status.value}
        if self.inconclusive:
            out["inconclusive"] = True
        if self.message:
            out["message"] = self.message
        if self.detail:
            out["detail"] = self.detail
        if self.seconds:
            out["seconds"] = round(self.seconds, 3)
        return out


@dataclass(frozen=True)
class GateResult:
    """A gate's verdict with the evidence behind it."""

    gate: str
    status: Status
    summary: str  # one line a person reads first
    cases: tuple[CaseResult, ...] = ()
    problems: tuple[str, ...] = ()  # why it did not pass, each one line naming what was seen
    counts: tuple[tuple[str, int], ...] = ()
    properties: tuple[tuple[str, str], ...] = ()
    metrics: tuple[tuple[str, float], ...] = field(default=())
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        return self.status.ok

    def count(self, name: str) -> int:
        return dict(self.counts).get(name, 0)

    def to_json(self) -> dict[str, Any]:
        return {
            "gate": self.gate,
            "status": self.status.value,
            "summary": self.summary,
            "problems": list(self.problems),
            "counts": dict(self.counts),
            "properties": dict(self.properties),
            "metrics": dict(self.metrics),
            "seconds": round(self.seconds, 3),
            "cases": [c.to_json() for c in self.cases],
        }


def case_counts(cases: Iterable[CaseResult]) -> tuple[tuple[str, int], ...]:
    tally = {s.value: 0 for s in Status}
    for c in cases:
        tally[c.status.value] += 1
    return tuple(tally.items())


def write_json(path: Path, result: GateResult) -> None:
    write_atomic(path, json.dumps(result.to_json(), indent=2) + "\n")


_NOT_XML = re.compile("[^\x09\x0a\x0d\x20-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")


def xml_safe(text: str) -> str:
    """``text`` with every character XML 1.0 cannot hold (control codes, a cut ANSI escape) shown as ``\\xNN``."""
    return _NOT_XML.sub(lambda m: f"\\x{ord(m.group(0)):02x}", text)


def write_junit(path: Path, results: Iterable[GateResult], extra_properties: Mapping[str, str] | None = None) -> None:
    """One JUnit test suite per gate, one test case per judged case; unsupported/not-run cases are skipped."""
    from junitparser import Error, Failure, JUnitXml, Skipped, TestCase, TestSuite

    xml = JUnitXml()
    for result in results:
        suite = TestSuite(xml_safe(result.gate))
        for k, v in [*(extra_properties or {}).items(), *result.properties]:
            suite.add_property(xml_safe(k), xml_safe(str(v)))
        for k, n in result.counts:
            suite.add_property(f"count.{k}", str(n))
        for k, x in result.metrics:
            suite.add_property(f"metric.{k}", f"{x:g}")
        suite.add_property("verdict", result.status.value)
        for c in result.cases:
            tc = TestCase(xml_safe(c.name), classname=xml_safe(c.classname or result.gate), time=c.seconds)
            if c.status is Status.FAILED:
                tc.result = [Failure(xml_safe(c.message or "failed"))]
            elif c.status is Status.ERROR:
                tc.result = [Error(xml_safe(c.message or "error"))]
            elif c.status is Status.SKIPPED:
                tc.result = [Skipped(xml_safe(c.message or "skipped"))]
            if c.detail:
                tc.system_out = xml_safe(c.detail)
            suite.add_testcase(tc)
        if not result.ok and not any(c.status in (Status.FAILED, Status.ERROR) for c in result.cases):
            # a gate can fail with every case passing (too few cases ran): the verdict must show in JUnit too
            tc = TestCase(VERDICT_CASE, classname=result.gate)
            tc.result = [Failure(xml_safe("; ".join(result.problems) or result.summary))]
            suite.add_testcase(tc)
        suite.update_statistics()
        xml.add_testsuite(suite)
    xml.update_statistics()
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    xml.write(str(tmp), pretty=True)
    tmp.replace(path)
