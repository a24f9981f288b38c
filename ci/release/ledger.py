"""The results ledger: one JSON line per gate run, append-only, hash-chained, written atomically.

Each record names the build it judged (key, pin, patch series, profile); ``nox -s ship`` counts only records
for the build being shipped. A record's ``prev`` is the sha256 of the line before it, so a line edited or
removed afterwards breaks the chain, and reading reports it: a damaged ledger is never silently skipped.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import platform
import sys
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ci.errors import ConfigError
from ci.files import write_atomic
from ci.gates.results import GateResult

LEDGER = "ledger.jsonl"
GENESIS = "0" * 64


@dataclass(frozen=True)
class BuildContext:
    """What a gate judged: the build's identity, or empty fields for binaries outside a build."""

    build_key: str = ""
    pin: str = ""
    patches: str = ""
    profile: str = ""
    device: str = ""

    def to_json(self) -> dict[str, str]:
        return {"build_key": self.build_key, "pin": self.pin, "patches": self.patches, "profile": self.profile, "device": self.device}


@dataclass(frozen=True)
class Record:
    line: int
    data: Mapping[str, Any]
    sha256: str  # of the line's bytes

    @property
    def gate(self) -> str:
        return str(self.data["gate"])

    @property
    def verdict(self) -> str:
        return str(self.data["verdict"])

    @property
    def build_key(self) -> str:
        return str(self.data.get("build_key", ""))


@dataclass(frozen=True)
class Ledger:
    path: Path
    records: tuple[Record, ...] = field(default=())


def ledger_path(results_dir: Path) -> Path:
    return results_dir / LEDGER


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path.with_name(path.name + ".lock"), "w") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def read(path: Path) -> Ledger:
    """Every record; a line that is not JSON, lacks a field, or breaks the chain is a ConfigError naming it."""
    if not path.is_file():
        return Ledger(path)
    records: list[Record] = []
    prev = GENESIS
    for n, raw in enumerate(path.read_bytes().splitlines(), 1):
        where = f"{path.name}:{n}"
        try:
            data = json.loads(raw)
        except ValueError:
            raise ConfigError(f"{path}: line {n} is not JSON (a damaged ledger); restore it from a backup or move it away") from None
        if not isinstance(data, dict) or not {"gate", "verdict", "prev", "time"} <= data.keys():
            raise ConfigError(f"{path}: line {n} is not a ledger record (needs gate, verdict, prev, time)")
        if data["prev"] != prev:
            raise ConfigError(f"{where}: the chain is broken (prev {str(data['prev'])[:12]}, expected {prev[:12]}): a record was edited or removed")
        digest = hashlib.sha256(raw).hexdigest()
        records.append(Record(n, data, digest))
        prev = digest
    return Ledger(path, tuple(records))


def append(path: Path, result: GateResult, context: BuildContext, artefacts: Mapping[str, str] | None = None) -> Record:
    """Add one record, atomically (the whole file is rewritten through a rename, under a lock)."""
    with _locked(path):
        ledger = read(path)
        prev = ledger.records[-1].sha256 if ledger.records else GENESIS
        data: dict[str, Any] = {
            "gate": result.gate,
            "verdict": result.status.value,
            "summary": result.summary,
            "counts": dict(result.counts),
            "problems": list(result.problems),
            **context.to_json(),
            "versions": versions(),
            "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "host": platform.node(),
            "artefacts": dict(artefacts or {}),
            "prev": prev,
        }
        line = json.dumps(data, sort_keys=True).encode()
        old = path.read_bytes() if path.is_file() else b""
        if old and not old.endswith(b"\n"):
            raise ConfigError(f"{path}: the last line is incomplete (a damaged ledger); restore it or move it away")
        write_atomic(path, old + line + b"\n")
        return Record(len(ledger.records) + 1, data, hashlib.sha256(line).hexdigest())


def versions() -> dict[str, str]:
    from importlib import metadata

    out = {"python": platform.python_version()}
    for dist in ("onebit-ci", "pygit2", "gguf"):
        with contextlib.suppress(metadata.PackageNotFoundError):
            out[dist] = metadata.version(dist)
    out["platform"] = sys.platform
    return out


def latest(ledger: Ledger, gate: str, build_key: str) -> Record | None:
    """The newest record of ``gate`` for ``build_key``: a later failure overrides an earlier pass."""
    for rec in reversed(ledger.records):
        if rec.gate == gate and rec.build_key == build_key:
            return rec
    return None


def default_results_dir(root: Path) -> Path:
    return Path(os.environ.get("ONEBIT_RESULTS_DIR", root / "build" / "results"))
