"""A ledger line of another shape than a gate writes is refused, named, before ship reads it (a hostile pass: in an
unsigned ledger whose chain and head were mended, ``properties: "x"`` and ``problems: 5`` ended ship in an internal
error and ``seq: true`` was taken as 1), and a record's text reaches the terminal with its control characters escaped
(a summary holding ESC [2J cleared the screen)."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from types import SimpleNamespace

import pytest

from ci.errors import ConfigError
from ci.gates.results import GateResult, Status
from ci.release import ledger, ship
from ci.release import standings as release_standings

CTX = ledger.BuildContext("k" * 64, "p" * 40, "s" * 64, "cpu", "CPU")


def mended(path: Path, **fields: object) -> None:
    """The ledger's one record with ``fields`` put in, and its head mended to match: what an unsigned ledger's own
    checks (the chain, the head) let through."""
    data = json.loads(path.read_text())
    data.update(fields)
    raw = json.dumps(data, sort_keys=True).encode()
    path.write_bytes(raw + b"\n")
    ledger.Head(1, hashlib.sha256(raw).hexdigest()).write(path)


@pytest.mark.parametrize(("field", "value"), [("properties", "x"), ("problems", 5), ("problems", [1]), ("seq", True), ("metrics", [1]), ("summary", {"a": 1})])
def test_a_field_of_another_shape_is_one_line_naming_it(tmp_path: Path, field: str, value: object) -> None:
    path = tmp_path / "ledger.jsonl"
    ledger.append(path, GateResult("route", Status.FAILED, "FAILED", problems=("p",)), CTX)
    assert ledger.read(path, None).records  # as written: read
    mended(path, **{field: value})
    with pytest.raises(ConfigError) as exc:
        ledger.read(path, None)
    assert exc.value.message == ledger.MISSHAPEN.format(path=path, line=1, field=field)


def test_a_records_text_reaches_the_terminal_escaped(tmp_path: Path) -> None:
    path = tmp_path / "ledger.jsonl"
    ledger.append(path, GateResult("route", Status.PASSED, "PASSED \x1b[2J cleared"), CTX)
    found = release_standings.standings(ledger.read(path, None), "k" * 64, ["route"])
    manifest = SimpleNamespace(profile="cpu", pin_commit="p" * 40, series_digest="s" * 64)
    shown = ship.table(ship.ShipCheck("k" * 64, manifest, found))  # type: ignore[arg-type]
    assert "\x1b" not in shown
    assert "\\x1b[2J cleared" in shown
