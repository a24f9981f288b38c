"""A complete, validly signed record is never taken for a cut one (issue 43, item 6). With a key and no witness, a
FAILED record whose newline was removed, behind the signed head its append wrote before the line (the count before it,
the line announced as ``pending``), read as "an append cut short (a full disk or a crash)": ship passed on the record
before it, and the next append deleted the FAILED one. A last line that is a whole record is read as a record: counted
when the head announced it (as a crash between the line and the head's move is), refused otherwise.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from ci.errors import ConfigError
from ci.gates.results import GateResult, Status
from ci.release import ledger

CONTEXT = ledger.BuildContext("k" * 64, "p" * 40, "s" * 64, "cpu", "CPU")
KEY = b"runner secret"


def two_records(path: Path) -> tuple[str, str]:
    first = ledger.append(path, GateResult("backend_ops", Status.PASSED, "36/36"), CONTEXT, key=KEY)
    failed = ledger.append(path, GateResult("backend_ops", Status.FAILED, "35/36"), CONTEXT, key=KEY)
    return first.sha256, failed.sha256


def test_a_whole_signed_record_without_its_newline_counts_and_the_next_append_keeps_it(tmp_path: Path) -> None:
    path = tmp_path / "ledger.jsonl"
    first, failed = two_records(path)
    ledger.Head(1, first, pending=failed).write(path, KEY)  # the head as the append wrote it before the line: validly signed
    path.write_bytes(path.read_bytes().removesuffix(b"\n"))
    read = ledger.read(path, KEY)
    assert [r.verdict for r in read.records] == ["passed", "failed"]  # it stands against the pass before it
    assert read.notes == (ledger.NEWLINE_MISSING.format(file=path.name, line=2), ledger.HEAD_NOT_MOVED.format(file=path.name, line=2))
    ledger.append(path, GateResult("route", Status.PASSED, "3/3"), CONTEXT, key=KEY)
    assert [r.gate for r in ledger.read(path, KEY).records] == ["backend_ops", "backend_ops", "route"]


def test_a_whole_record_without_its_newline_that_no_head_announced_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "ledger.jsonl"
    first, _ = two_records(path)
    ledger.Head(1, first).write(path, KEY)  # an older head, announcing nothing
    path.write_bytes(path.read_bytes().removesuffix(b"\n"))
    with pytest.raises(ConfigError) as refused:
        ledger.read(path, KEY)
    assert refused.value.message == ledger.HEAD_MISMATCH.format(path=path)


def test_a_line_cut_short_by_a_crash_is_still_set_aside(tmp_path: Path) -> None:
    path = tmp_path / "ledger.jsonl"
    first, failed = two_records(path)
    ledger.Head(1, first, pending=failed).write(path, KEY)
    path.write_bytes(path.read_bytes()[:-40])  # the disk took part of the line
    read = ledger.read(path, KEY)
    assert [r.verdict for r in read.records] == ["passed"]
    assert read.notes[0].startswith(f"{path.name}:2: an append cut short")
