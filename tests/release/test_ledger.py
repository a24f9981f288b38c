from __future__ import annotations

import hashlib
import json
import multiprocessing
import re
from pathlib import Path
from typing import Any

import pytest

from ci.errors import ConfigError
from ci.gates.results import GateResult, Status
from ci.release import ledger
from tests.support.messages import pattern
from tests.support.project import Project

CONTEXT = ledger.BuildContext("k" * 64, "p" * 40, "s" * 64, "cpu", "CPU")


def result(gate: str = "route", status: Status = Status.PASSED) -> GateResult:
    return GateResult(gate, status, f"{gate} {status.value}", counts=(("passed", 3), ("failed", 0)))


def test_records_are_appended_and_chained(tmp_path: Path) -> None:
    path = tmp_path / "ledger.jsonl"
    first = ledger.append(path, result("route"), CONTEXT, {"junit": "build/results/x/route.junit.xml"})
    second = ledger.append(path, result("backend_ops", Status.FAILED), CONTEXT)
    read = ledger.read(path)
    assert [r.gate for r in read.records] == ["route", "backend_ops"]
    assert read.records[0].sha256 == first.sha256
    assert read.records[1].data["prev"] == first.sha256
    assert read.records[1].sha256 == second.sha256
    data = read.records[0].data
    assert data["build_key"] == "k" * 64
    assert data["pin"] == "p" * 40
    assert data["patches"] == "s" * 64
    assert data["profile"] == "cpu"
    assert data["counts"] == {"passed": 3, "failed": 0}
    assert data["artefacts"] == {"junit": "build/results/x/route.junit.xml"}
    assert {"python", "platform"} <= data["versions"].keys()
    assert data["time"].endswith("Z")


def test_latest_record_per_gate_and_key(tmp_path: Path) -> None:
    path = tmp_path / "ledger.jsonl"
    ledger.append(path, result("route", Status.PASSED), CONTEXT)
    ledger.append(path, result("route", Status.FAILED), CONTEXT)
    ledger.append(path, result("route", Status.PASSED), ledger.BuildContext("other"))
    latest = ledger.latest(ledger.read(path), "route", CONTEXT.build_key)
    assert latest is not None
    assert latest.verdict == "failed"
    assert ledger.latest(ledger.read(path), "equivalence", CONTEXT.build_key) is None


def test_a_line_that_is_not_json_is_reported_with_its_number(tmp_path: Path) -> None:
    path = tmp_path / "ledger.jsonl"
    ledger.append(path, result(), CONTEXT)
    with path.open("a") as fh:
        fh.write("{not json\n")
    with pytest.raises(ConfigError, match=re.escape(ledger.NOT_JSON.format(path=path, line=2))):
        ledger.read(path)
    with pytest.raises(ConfigError, match=re.escape(ledger.NOT_JSON.format(path=path, line=2))):
        ledger.append(path, result(), CONTEXT)


def test_an_edited_record_breaks_the_chain(tmp_path: Path) -> None:
    path = tmp_path / "ledger.jsonl"
    ledger.append(path, result("route", Status.FAILED), CONTEXT)
    ledger.append(path, result("backend_ops"), CONTEXT)
    lines = path.read_text().splitlines()
    edited = json.loads(lines[0])
    edited["verdict"] = "passed"
    path.write_text(json.dumps(edited, sort_keys=True) + "\n" + lines[1] + "\n")
    chain = ledger.BROKEN_CHAIN.format(
        where=ledger.EDITED_OR_REMOVED.format(path=path, line=1),
        line=2,
        got=hashlib.sha256(lines[0].encode()).hexdigest()[:12],
        expected=hashlib.sha256(json.dumps(edited, sort_keys=True).encode()).hexdigest()[:12],
    )
    with pytest.raises(ConfigError, match=re.escape(chain)):
        ledger.read(path)


def test_a_removed_record_breaks_the_chain(tmp_path: Path) -> None:
    path = tmp_path / "ledger.jsonl"
    for gate in ("route", "backend_ops", "equivalence"):
        ledger.append(path, result(gate), CONTEXT)
    lines = path.read_text().splitlines()
    path.write_text(lines[0] + "\n" + lines[2] + "\n")
    with pytest.raises(ConfigError, match=pattern(ledger.BROKEN_CHAIN, where=ledger.EDITED_OR_REMOVED.format(path=path, line=1), line=2)):
        ledger.read(path)


def test_an_incomplete_last_line_is_not_appended_to(tmp_path: Path) -> None:
    path = tmp_path / "ledger.jsonl"
    ledger.append(path, result(), CONTEXT)
    path.write_bytes(path.read_bytes()[:-10])  # part of its line gone (a whole record without its newline is one: tests/hostile/test_cut_record.py)
    before = path.read_bytes()
    with pytest.raises(ConfigError, match=re.escape(ledger.INCOMPLETE_LAST.format(path=path, line=1, size=len(before)))):
        ledger.append(path, result(), CONTEXT)
    assert path.read_bytes() == before


def _append_many(path: str, gate: str) -> None:
    for _ in range(10):
        ledger.append(Path(path), result(gate), CONTEXT)


def test_concurrent_appenders_lose_nothing(tmp_path: Path) -> None:
    path = tmp_path / "ledger.jsonl"
    ctx = multiprocessing.get_context("fork")
    procs = [ctx.Process(target=_append_many, args=(str(path), gate)) for gate in ("route", "backend_ops", "equivalence")]
    for p in procs:
        p.start()
    for p in procs:
        p.join(timeout=60)
        assert p.exitcode == 0
    records = ledger.read(path).records
    assert len(records) == 30
    assert {g: sum(r.gate == g for r in records) for g in ("route", "backend_ops", "equivalence")} == {"route": 10, "backend_ops": 10, "equivalence": 10}


def _forge_last(path: Path, **changes: Any) -> None:
    lines = path.read_text().splitlines()
    last = json.loads(lines[-1])
    last.update(changes)
    path.write_text("\n".join([*lines[:-1], json.dumps(last, sort_keys=True)]) + "\n")


def test_a_forged_last_record_is_caught_by_the_head(tmp_path: Path) -> None:
    path = tmp_path / "ledger.jsonl"
    ledger.append(path, result("route"), CONTEXT)
    ledger.append(path, result("backend_ops", Status.FAILED), CONTEXT)
    _forge_last(path, verdict="passed")
    with pytest.raises(ConfigError) as exc:
        ledger.read(path)
    assert exc.value.message == ledger.HEAD_MISMATCH.format(path=path)


def test_a_deleted_last_record_is_caught_by_the_head(tmp_path: Path) -> None:
    path = tmp_path / "ledger.jsonl"
    ledger.append(path, result("route"), CONTEXT)
    ledger.append(path, result("backend_ops", Status.FAILED), CONTEXT)
    path.write_text(path.read_text().splitlines()[0] + "\n")  # sed -i '$d'
    with pytest.raises(ConfigError, match=re.escape(ledger.HEAD_MISMATCH.format(path=path))):
        ledger.read(path)
    path.unlink()
    with pytest.raises(ConfigError, match=re.escape(ledger.LEDGER_GONE.format(path=path, head="ledger.jsonl.head"))):
        ledger.read(path)


def test_a_record_appended_by_hand_is_caught_by_the_head(tmp_path: Path) -> None:
    path = tmp_path / "ledger.jsonl"
    first = ledger.append(path, result("route"), CONTEXT)
    forged = dict(first.data, gate="backend_ops", prev=first.sha256, seq=2)
    with path.open("a") as fh:
        fh.write(json.dumps(forged, sort_keys=True) + "\n")
    with pytest.raises(ConfigError, match=re.escape(ledger.HEAD_MISMATCH.format(path=path))):
        ledger.read(path)


def test_an_append_writes_one_line_and_the_head_never_the_whole_file(tmp_path: Path) -> None:
    path = tmp_path / "ledger.jsonl"
    ledger.append(path, result("route"), CONTEXT)
    inode = path.stat().st_ino
    ledger.append(path, result("backend_ops"), CONTEXT)
    assert path.stat().st_ino == inode  # appended in place, not rewritten through a rename
    head = json.loads((tmp_path / "ledger.jsonl.head").read_text())
    assert head == {"count": 2, "sha256": ledger.read(path).records[-1].sha256}


def test_with_a_key_every_record_is_signed_and_checked(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "ledger.jsonl"
    monkeypatch.setenv("ONEBIT_LEDGER_KEY", "runner secret")
    ledger.append(path, result("route"), CONTEXT)
    ledger.append(path, result("backend_ops", Status.FAILED), CONTEXT)
    key = ledger.signing_key()
    assert key is not None
    assert all("sig" in r.data for r in ledger.read(path, key).records)
    # someone without the key rewrites the last record and its head consistently: the chain and head hold, the signature does not
    _forge_last(path, verdict="passed")
    records = path.read_bytes().splitlines()
    ledger.Head(len(records), hashlib.sha256(records[-1]).hexdigest()).write(path)
    with pytest.raises(ConfigError, match=re.escape(ledger.SIGNED_WITHOUT_KEY.format(where=f"{path}:1", var="ONEBIT_LEDGER_KEY"))):
        ledger.read(path)  # a signed ledger is never read unchecked
    ledger.Head(len(records), hashlib.sha256(records[-1]).hexdigest()).write(path, key)  # as if the key had leaked for the head
    forged = ledger.RECORD_SIGNATURE_WRONG.format(path=path, line=2, var="ONEBIT_LEDGER_KEY", why=ledger.FORGED)
    with pytest.raises(ConfigError, match=re.escape(forged)):
        ledger.read(path, key)
    forged_head = ledger.HEAD_SIGNATURE_WRONG.format(path=ledger.head_path(path), var="ONEBIT_LEDGER_KEY", why=ledger.FORGED)
    with pytest.raises(ConfigError, match=re.escape(forged_head)):
        ledger.read(path, b"another key")


def test_the_self_test_reads_a_signed_ledger_with_the_key(build_project: Project, monkeypatch: pytest.MonkeyPatch) -> None:
    """gate_selftest reads the ledger to skip gates the unplanted build fails: on a signed ledger it said the key was
    not set although it was (a hostile pass), so a self-test could never run where the docs say to sign."""
    from ci.commands import gate_selftest
    from ci.compile.manifest import Manifest
    from ci.pin import pins as pins_mod
    from tests.release.test_ship import GATES, built, record

    m = built(build_project)
    path = build_project.root / "build" / "results" / "ledger.jsonl"
    monkeypatch.setenv("ONEBIT_LEDGER_KEY", "runner secret")
    record(build_project, m, GATES.backend_ops_failed)
    assert "sig" in ledger.read(path, b"runner secret").records[0].data
    found = gate_selftest.unplanted_failures(path, Manifest.from_json(m), pins_mod.load(build_project.pins), build_project.root)
    assert list(found) == ["backend_ops"]
