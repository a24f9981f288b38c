"""The results ledger: one JSON line per gate run, append-only, hash-chained, its tip anchored.

Each record names the build it judged (key, pin, patch series, profile); ``nox -s ship`` counts only records
for the build being shipped. A record's ``prev`` is the sha256 of the line before it, so a line edited or
removed afterwards breaks the chain; the head file beside it (``ledger.jsonl.head``: the count and the last
line's sha256, written atomically with each append) anchors the tip, so the last record cannot be edited,
removed or added to unseen either. Reading reports any of it: a damaged ledger is never silently skipped.
With ``ONEBIT_LEDGER_KEY`` set (a runner others share), each record carries an HMAC-SHA256 of itself and every
reader checks it, so only a holder of the key can write a record that counts.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import hmac
import json
import os
import platform
import sys
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ci.compile.manifest import Manifest
from ci.errors import ConfigError
from ci.files import write_atomic
from ci.gates.results import GateResult
from ci.schema import parse_json

LEDGER = "ledger.jsonl"
HEAD_SUFFIX = ".head"  # ledger.jsonl.head: the count and the last line's sha256
GENESIS = "0" * 64
KEY_VAR = "ONEBIT_LEDGER_KEY"


@dataclass(frozen=True)
class BuildContext:
    """What a gate judged: the build's identity, or empty fields for binaries outside a build."""

    build_key: str = ""
    pin: str = ""
    patches: str = ""
    profile: str = ""
    device: str = ""

    @classmethod
    def of(cls, manifest: Manifest) -> BuildContext:
        """The identity of the build ``manifest`` describes."""
        return cls(manifest.key, manifest.pin_commit, manifest.series_digest, manifest.profile, manifest.device)

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


def head_path(path: Path) -> Path:
    return path.with_name(path.name + HEAD_SUFFIX)


@dataclass(frozen=True)
class Head:
    """The chain's tip: how many records, and the sha256 of the last line. Written with every append."""

    count: int
    sha256: str

    @classmethod
    def read(cls, path: Path) -> Head | None:
        hp = head_path(path)
        if not hp.is_file():
            return None
        try:
            data = parse_json(hp.read_bytes())
            return cls(int(data["count"]), str(data["sha256"]))
        except (ValueError, KeyError, TypeError) as exc:
            raise ConfigError(f"{hp}: not a ledger head ({exc}); restore it with the ledger from a backup, or move both away") from None

    def write(self, path: Path) -> None:
        write_atomic(head_path(path), json.dumps({"count": self.count, "sha256": self.sha256}) + "\n")


def signing_key(env: Mapping[str, str] | None = None) -> bytes | None:
    """ONEBIT_LEDGER_KEY, for runners that others share: each record is signed with it, and checked against it."""
    value = (os.environ if env is None else env).get(KEY_VAR, "")
    return value.encode() if value else None


def _signature(key: bytes, data: Mapping[str, Any]) -> str:
    body = json.dumps({k: v for k, v in data.items() if k != "sig"}, sort_keys=True).encode()
    return hmac.new(key, body, hashlib.sha256).hexdigest()


def read(path: Path, key: bytes | None = None) -> Ledger:
    """Every record, checked: each line JSON with the record's fields, the chain unbroken, the tip equal to the
    head file, and, with ``key``, every record's signature. Any problem is a ConfigError naming the line."""
    if not path.is_file():
        if Head.read(path) not in (None, Head(0, GENESIS)):
            raise ConfigError(f"{path}: missing, but its head {head_path(path).name} names records (removed?); restore it from a backup")
        return Ledger(path)
    raw_bytes = path.read_bytes()
    if raw_bytes and not raw_bytes.endswith(b"\n"):
        raise ConfigError(f"{path}: the last line is incomplete (a damaged ledger); restore it from a backup or move it away")
    records: list[Record] = []
    prev = GENESIS
    for n, raw in enumerate(raw_bytes.splitlines(), 1):
        try:
            data = parse_json(raw)
        except (ValueError, RecursionError):
            raise ConfigError(f"{path}:{n}: not a JSON record (a damaged ledger); restore it from a backup or move it away") from None
        if not isinstance(data, dict) or not {"gate", "verdict", "prev", "time"} <= data.keys():
            raise ConfigError(f"{path}:{n}: not a ledger record (needs gate, verdict, prev, time)")
        if data["prev"] != prev:
            where = f"{path}:{n - 1}: the record was edited, or one after it removed" if n > 1 else f"{path}:1: the first record was edited"
            raise ConfigError(f"{where} (line {n} chains to {str(data['prev'])[:12]}, not {prev[:12]})")
        if key is not None and data.get("sig") != _signature(key, data):
            raise ConfigError(f"{path}:{n}: the record's signature does not match {KEY_VAR} ({'unsigned' if 'sig' not in data else 'forged, or signed with another key'})")
        digest = hashlib.sha256(raw).hexdigest()
        records.append(Record(n, data, digest))
        prev = digest
    head = Head.read(path)
    if head is None:
        if records:
            raise ConfigError(f"{path}: has no head ({head_path(path).name}): its last record cannot be checked; move the ledger away to start a new one")
    elif head != Head(len(records), prev):
        raise ConfigError(f"{path}: the last record does not match the ledger's head (edited or removed?)")
    return Ledger(path, tuple(records))


def append(path: Path, result: GateResult, context: BuildContext, artefacts: Mapping[str, str] | None = None, key: bytes | None = None) -> Record:
    """Add one record at the end (an O_APPEND write, fsync'd), then move the head to it, under a lock; signed
    with ``key`` (default: ONEBIT_LEDGER_KEY) when there is one."""
    key = key if key is not None else signing_key()
    with _locked(path):
        ledger = read(path, key)
        prev = ledger.records[-1].sha256 if ledger.records else GENESIS
        data: dict[str, Any] = {
            "gate": result.gate,
            "verdict": result.status.value,
            "summary": result.summary,
            "counts": dict(result.counts),
            "problems": list(result.problems),
            "properties": dict(result.properties),  # what the gate judged by content (models, binaries, prompts)
            "metrics": dict(result.metrics),
            **context.to_json(),
            "versions": versions(),
            "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "host": platform.node(),
            "artefacts": dict(artefacts or {}),
            "prev": prev,
        }
        if key is not None:
            data["sig"] = _signature(key, data)
        line = json.dumps(data, sort_keys=True).encode()
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, line + b"\n")
            os.fsync(fd)
        finally:
            os.close(fd)
        digest = hashlib.sha256(line).hexdigest()
        Head(len(ledger.records) + 1, digest).write(path)
        return Record(len(ledger.records) + 1, data, digest)


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
