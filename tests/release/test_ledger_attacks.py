"""The ledger under attack and after a crash, as issue 24's campaign found it: a signed ledger with its failed last
record dropped and its head rewritten, an old signed head put back, a signed ledger read without the key, a full disk
during an append, and a crash between the line and the head."""

from __future__ import annotations

import hashlib
import json
import re
import shutil
from pathlib import Path

import pytest

from ci.errors import ConfigError
from ci.gates.results import GateResult, Status
from ci.release import ledger
from ci.release import witness as witness_mod

CONTEXT = ledger.BuildContext("k" * 64, "p" * 40, "s" * 64, "cpu", "CPU")
KEY = b"runner secret"


def result(gate: str, status: Status = Status.PASSED) -> GateResult:
    return GateResult(gate, status, f"{gate} {status.value}")


def signed_ledger(path: Path) -> None:
    ledger.append(path, result("route"), CONTEXT, key=KEY)
    ledger.append(path, result("equivalence"), CONTEXT, key=KEY)
    ledger.append(path, result("backend_ops", Status.FAILED), CONTEXT, key=KEY)


def test_dropping_the_failed_signed_record_and_rewriting_the_head_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "ledger.jsonl"
    signed_ledger(path)
    lines = path.read_bytes().splitlines(keepends=True)
    path.write_bytes(b"".join(lines[:-1]))
    ledger.Head(2, hashlib.sha256(lines[1].rstrip(b"\n")).hexdigest()).write(path)  # the attacker has no key
    with pytest.raises(ConfigError) as exc:
        ledger.read(path, KEY)
    assert exc.value.message == ledger.HEAD_SIGNATURE_WRONG.format(path=ledger.head_path(path), var="ONEBIT_LEDGER_KEY", why=ledger.UNSIGNED)


def test_an_old_signed_head_put_back_is_caught_by_the_witness(tmp_path: Path) -> None:
    path, witness = tmp_path / "ledger.jsonl", tmp_path / "outside-build" / "ledger.witness"
    ledger.append(path, result("route"), CONTEXT, key=KEY, witness=witness)
    ledger.append(path, result("equivalence"), CONTEXT, key=KEY, witness=witness)
    old_head = ledger.head_path(path).read_bytes()
    two_lines = path.read_bytes()
    ledger.append(path, result("backend_ops", Status.FAILED), CONTEXT, key=KEY, witness=witness)
    assert json.loads(witness.read_text())["ledgers"][str(path.resolve())]["count"] == 3  # this ledger's entry
    path.write_bytes(two_lines)  # the replay: every file is one the key holder wrote
    ledger.head_path(path).write_bytes(old_head)
    assert len(ledger.read(path, KEY, witness=tmp_path / "no-witness").records) == 2  # what a head alone cannot tell
    with pytest.raises(ConfigError) as exc:
        ledger.read(path, KEY, witness=witness)
    assert exc.value.message == witness_mod.REWOUND.format(path=path, held=2, witness=witness, var="ONEBIT_LEDGER_WITNESS", seen=3)


def test_the_witness_comes_from_the_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path, witness = tmp_path / "ledger.jsonl", tmp_path / "state" / "witness"
    monkeypatch.setenv("ONEBIT_LEDGER_WITNESS", str(witness))
    ledger.append(path, result("route"), CONTEXT)
    ledger.append(path, result("route"), CONTEXT)
    snapshot = {p: p.read_bytes() for p in (path, ledger.head_path(path))}
    ledger.append(path, result("route", Status.FAILED), CONTEXT)
    for p, data in snapshot.items():
        p.write_bytes(data)
    with pytest.raises(ConfigError, match=re.escape(witness_mod.REWOUND.format(path=path, held=2, witness=witness, var="ONEBIT_LEDGER_WITNESS", seen=3))):
        ledger.read(path)


def test_a_signed_ledger_read_without_the_key_is_refused_in_one_line(tmp_path: Path) -> None:
    path = tmp_path / "ledger.jsonl"
    signed_ledger(path)
    with pytest.raises(ConfigError) as exc:
        ledger.read(path)
    assert exc.value.message == ledger.SIGNED_WITHOUT_KEY.format(where=ledger.head_path(path), var="ONEBIT_LEDGER_KEY")


def test_a_record_with_a_wrong_signature_never_counts_without_the_key(tmp_path: Path) -> None:
    path = tmp_path / "ledger.jsonl"
    ledger.append(path, result("route"), CONTEXT)
    lines = path.read_bytes().splitlines()
    data = json.loads(lines[0])
    forged = dict(data, sig="0" * 64)
    line = json.dumps(forged, sort_keys=True).encode()
    path.write_bytes(line + b"\n")
    ledger.Head(1, hashlib.sha256(line).hexdigest()).write(path)
    with pytest.raises(ConfigError, match=re.escape(ledger.SIGNED_WITHOUT_KEY.format(where=f"{path}:1", var="ONEBIT_LEDGER_KEY"))):
        ledger.read(path)


def test_records_carry_their_signed_sequence_number(tmp_path: Path) -> None:
    path = tmp_path / "ledger.jsonl"
    signed_ledger(path)
    assert [r.data["seq"] for r in ledger.read(path, KEY).records] == [1, 2, 3]


def test_a_full_disk_mid_append_is_set_aside_and_repaired_not_called_tampering(tmp_path: Path) -> None:
    path = tmp_path / "ledger.jsonl"
    signed_ledger(path)
    intact = path.read_bytes()
    line = json.dumps({"gate": "route", "verdict": "passed"}).encode()
    ledger.Head(3, ledger.read(path, KEY).records[-1].sha256, pending=hashlib.sha256(line).hexdigest()).write(path, KEY)
    with path.open("ab") as fh:
        fh.write(line[:37])  # ENOSPC after 37 bytes: no newline
    read = ledger.read(path, KEY)
    assert len(read.records) == 3
    assert read.notes == (ledger.CUT_SHORT.format(file="ledger.jsonl", line=4, size=37),)
    ledger.append(path, result("route"), CONTEXT, key=KEY)
    assert path.read_bytes().startswith(intact)
    assert [r.gate for r in ledger.read(path, KEY).records] == ["route", "equivalence", "backend_ops", "route"]
    assert ledger.read(path, KEY).notes == ()


def test_a_partial_line_behind_a_head_that_does_not_match_is_named_precisely(tmp_path: Path) -> None:
    path = tmp_path / "ledger.jsonl"
    signed_ledger(path)
    ledger.head_path(path).unlink()
    with path.open("ab") as fh:
        fh.write(b'{"gate": "ro')
    with pytest.raises(ConfigError, match=re.escape(ledger.INCOMPLETE_LAST.format(path=path, line=4, size=12))):
        ledger.read(path, KEY)


def test_a_crash_between_the_line_and_the_head_is_told_from_an_edit(tmp_path: Path) -> None:
    path = tmp_path / "ledger.jsonl"
    for key in (KEY, None):
        shutil.rmtree(tmp_path / "l", ignore_errors=True)
        path = tmp_path / "l" / "ledger.jsonl"
        ledger.append(path, result("route"), CONTEXT, key=key)
        first = ledger.read(path, key).records[-1]
        last = ledger.append(path, result("equivalence"), CONTEXT, key=key)
        ledger.Head(1, first.sha256, pending=last.sha256).write(path, key)  # the process died before the head moved
        read = ledger.read(path, key)
        assert [r.gate for r in read.records] == ["route", "equivalence"]
        assert read.notes == (ledger.HEAD_NOT_MOVED.format(file="ledger.jsonl", line=2),)
        ledger.append(path, result("backend_ops"), CONTEXT, key=key)
        assert ledger.read(path, key).notes == ()
