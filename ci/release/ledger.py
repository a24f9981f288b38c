"""The results ledger: one JSON line per gate run, append-only, hash-chained, its tip anchored.

Each record names the build it judged and chains to the line before it (``prev``); the head beside it
(``ledger.jsonl.head``: the count and the last line's sha256) anchors the tip, so no record is edited, removed or
added unseen. With ``ONEBIT_LEDGER_KEY`` every record and the head are signed and checked, and a witness
(:mod:`ci.release.witness`) catches a rewind. A full disk or a crash is told from an edit (the head announces each
line before it is written).
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import hmac
import json
import os
import platform
import secrets
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ci.errors import ConfigError
from ci.files import LEDGER_KEY_VAR, write_atomic
from ci.gates.results import GateResult
from ci.release import witness as witness_mod
from ci.release.witness import WITNESS_VAR
from ci.schema import parse_json
from serve.bounded import CONFIG_LIMIT, LEDGER_LIMIT, read_regular

LEDGER = "ledger.jsonl"
HEAD_SUFFIX = ".head"  # ledger.jsonl.head: the count and the last line's sha256
GENESIS = "0" * 64
KEY_VAR = LEDGER_KEY_VAR  # ONEBIT_LEDGER_KEY

# Messages, shared with the tests that match on them (tests/support/messages.py)
MISSHAPEN = "{path}:{line}: the record's {field} is not of its shape (a text, a number, a mapping or a list of texts): this is no record a gate wrote; move the ledger away or restore it"
INCONSISTENT = "{where} says passed, but its counts say {why}: no gate writes a record so; move the ledger away or restore it"
AT_LINE = "{path}:{line}"  # INCONSISTENT's where, on reading
APPENDED = "the {gate} record"  # INCONSISTENT's where, on appending (a gate's own bug)
NOT_JSON = "{path}:{line}: not a JSON record (a damaged ledger); restore it from a backup or move it away"
BROKEN_CHAIN = "{where} (line {line} chains to {got}, not {expected})"
EDITED_OR_REMOVED = "{path}:{line}: the record was edited, or one after it removed"  # BROKEN_CHAIN's where
FIRST_EDITED = "{path}:1: the first record was edited"  # BROKEN_CHAIN's where at line 1
SIGNED_WITHOUT_KEY = "{where}: signed with {var}, which is not set here; set it to read this ledger (a signed ledger is never read unchecked)"
RECORD_SIGNATURE_WRONG = "{path}:{line}: the record's signature does not match {var} ({why})"
HEAD_SIGNATURE_WRONG = "{path}: the head's signature does not match {var} ({why})"
UNSIGNED = "unsigned"  # a SIGNATURE_WRONG's why
FORGED = "forged, or signed with another key"
INCOMPLETE_LAST = (
    "{path}:{line}: the last line is incomplete ({size} bytes, no newline) and the head does not match the records before it; "
    "restore the ledger from a backup or move it away"
)
NEWLINE_MISSING = "{file}:{line}: a whole record whose newline is missing (a crash?) is read as a record; the next append writes the newline"
CUT_SHORT = "{file}:{line}: an append cut short (a full disk or a crash: {size} bytes, no newline) is set aside; the next append removes it"
HEAD_NOT_MOVED = (
    "{file}:{line}: appended, but the head was not moved to it (a crash between the two); the head announced it, so it counts, "
    "and the next append moves the head"
)
HEAD_MISMATCH = "{path}: the last record does not match the ledger's head (edited or removed?)"
LEDGER_GONE = "{path}: missing, but its head {head} names records (removed?); restore it from a backup"
# an append the disk did not take (a full disk: a short write, or fsync with no room); an OSError's strerror, its filename the ledger
APPEND_FAILED = "the {gate} record ({verdict}) was not appended: {error}; the ledger keeps its {count} records, readable"
APPEND_NOT_TAKEN_BACK = (
    "the {gate} record ({verdict}) was not appended: {error}, and its line could not be taken back ({why}); the head "
    "announced it, so readers take it as a crash (a partial line set aside, a whole one counted)"
)
HEAD_NOT_WRITTEN = (
    "the {gate} record ({verdict}) was appended as record {seq}, but the head was not moved to it: {error}; "
    "it counts (the head announced it), and the next append moves the head"
)
WITNESS_NOT_WRITTEN = "the {gate} record ({verdict}) was appended as record {seq}, but {witness} ({var}) was not moved to it: {error}"


@dataclass(frozen=True)
class BuildContext:
    """What a gate judged: the build's identity, or empty fields for binaries outside a build."""

    build_key: str = ""
    pin: str = ""
    patches: str = ""
    profile: str = ""
    device: str = ""
    manifest_sha256: str = ""  # Manifest.digest: the binaries' and libraries' sha256 the gates ran on
    judged: Callable[[GateResult], Mapping[str, Any]] | None = None  # what a gate's result judged against (binding.py)

    def to_json(self) -> dict[str, str]:
        return {
            "build_key": self.build_key, "pin": self.pin, "patches": self.patches, "profile": self.profile, "device": self.device,
            "manifest_sha256": self.manifest_sha256,
        }  # fmt: skip


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
    notes: tuple[str, ...] = ()  # what a reader set aside or accepted after a crash, each one line
    size: int = 0  # bytes of complete lines
    open_end: bool = False  # its last record lacks its newline (a crash took it): the next append writes it first


def ledger_path(results_dir: Path) -> Path:
    return results_dir / LEDGER


_HELD = threading.local()  # the locks this thread holds (their files' real paths): taken again, they are not waited for


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    """The file's lock (``<name>.lock`` beside it), exclusive between processes and threads (flock on a descriptor of
    its own); re-entrant within a thread, so that ship, holding the ledger's, appends its own record."""
    path.parent.mkdir(parents=True, exist_ok=True)
    lock = os.path.realpath(path.with_name(path.name + ".lock"))
    held: set[str] = getattr(_HELD, "paths", set())
    _HELD.paths = held
    if lock in held:
        yield
        return
    with open(lock, "w") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        held.add(lock)
        try:
            yield
        finally:
            held.discard(lock)
            fcntl.flock(fh, fcntl.LOCK_UN)


def hold(path: Path) -> contextlib.AbstractContextManager[None]:
    """The ledger at ``path`` held: no record is appended by anyone else until the block ends. Ship holds it from its
    read to its own record, so that a record appended while it decides (a slow step summary) lands after the release,
    never between the check and the wheel."""
    return _locked(path)


def head_path(path: Path) -> Path:
    return path.with_name(path.name + HEAD_SUFFIX)


def _head_body(count: int, sha256: str, pending: str) -> bytes:
    return f"head\0{count}\0{sha256}\0{pending}".encode()


@dataclass(frozen=True)
class Head:
    """The chain's tip: how many records, and the sha256 of the last line; signed under the key. ``pending`` is the
    sha256 of the line an append is about to write: written before the line, so a crash between the line and the
    head's move reads as that (the line is the one the head announced), not as tampering."""

    count: int
    sha256: str
    pending: str = ""
    sig: str = ""

    @classmethod
    def read(cls, path: Path, key: bytes | None = None) -> Head | None:
        hp = head_path(path)
        if not os.path.lexists(hp):
            return None
        try:
            data = parse_json(read_regular(hp, CONFIG_LIMIT))
            head = cls(int(data["count"]), str(data["sha256"]), str(data.get("pending", "")), str(data.get("sig", "")))
        except OSError as exc:
            raise ConfigError(f"{hp}: cannot be read as a ledger head: {exc.strerror}") from None
        except (ValueError, KeyError, TypeError, RecursionError) as exc:
            why = "nested too deeply" if isinstance(exc, RecursionError) else str(exc)[:120]
            raise ConfigError(f"{hp}: not a ledger head ({why}); restore it with the ledger from a backup, or move both away") from None
        if key is None and head.sig:
            raise ConfigError(SIGNED_WITHOUT_KEY.format(where=hp, var=KEY_VAR))
        if key is not None and not hmac.compare_digest(head.sig.encode("utf-8", "surrogateescape"), head.signature(key).encode()):
            raise ConfigError(HEAD_SIGNATURE_WRONG.format(path=hp, var=KEY_VAR, why=UNSIGNED if not head.sig else FORGED))
        return head

    def signature(self, key: bytes) -> str:
        return hmac.new(key, _head_body(self.count, self.sha256, self.pending), hashlib.sha256).hexdigest()

    def signed(self, key: bytes | None) -> Head:
        return Head(self.count, self.sha256, self.pending, self.signature(key) if key is not None else "")

    def write(self, path: Path, key: bytes | None = None) -> None:
        head = self.signed(key)
        data: dict[str, Any] = {"count": head.count, "sha256": head.sha256}
        if head.pending:
            data["pending"] = head.pending
        if head.sig:
            data["sig"] = head.sig
        write_atomic(head_path(path), json.dumps(data) + "\n")


def signing_key(env: Mapping[str, str] | None = None) -> bytes | None:
    """ONEBIT_LEDGER_KEY, for runners that others share: each record is signed with it, and checked against it."""
    value = (os.environ if env is None else env).get(KEY_VAR, "")
    return value.encode() if value else None


def _signature(key: bytes, data: Mapping[str, Any]) -> str:
    body = json.dumps({k: v for k, v in data.items() if k != "sig"}, sort_keys=True).encode()
    return hmac.new(key, body, hashlib.sha256).hexdigest()


# the shape each field a reader uses must have: a record of another shape is refused, named, before anything reads it
SHAPES: dict[str, tuple[type, ...]] = {
    "gate": (str,), "verdict": (str,), "prev": (str,), "time": (str,), "seq": (int,), "build_key": (str,), "summary": (str,),
    "properties": (dict,), "criteria": (dict,), "counts": (dict,), "metrics": (dict,), "problems": (list,),
}  # fmt: skip


def _misshapen(data: Mapping[str, Any]) -> str | None:
    """The first field of a record that is not of the shape its readers take (a hostile pass: ``properties: "x"`` or
    ``problems: 5`` ended ship in an internal error, ``seq: true`` was taken as 1), or None."""
    for name, kinds in SHAPES.items():
        value = data.get(name)
        if value is None and name not in ("gate", "verdict", "prev", "time"):
            continue
        if isinstance(value, bool) or not isinstance(value, kinds):
            return name
    if not all(isinstance(p, str) for p in data.get("problems") or []):
        return "problems"
    return None


def _is_record(raw: bytes) -> bool:
    """Whether ``raw`` parses as a whole record (a line cut short never does: its closing brace is what is cut)."""
    try:
        data = parse_json(raw)
    except (ValueError, RecursionError):
        return False
    return isinstance(data, dict) and {"gate", "verdict", "prev", "time"} <= data.keys()


def inconsistency(verdict: object, counts: Mapping[str, Any]) -> str | None:
    """Why a record's verdict and its own counts disagree, or None: a ``passed`` record with a failed or erring case,
    or fewer passed than the record says were expected (a weakened judge's pass over a failed case)."""
    if verdict != "passed":
        return None
    number = {k: v for k, v in counts.items() if isinstance(v, int) and not isinstance(v, bool)}
    for name in ("failed", "error"):
        if number.get(name, 0) > 0:
            return f"{name} {number[name]}"
    if "expected" in number and number.get("passed", 0) < number["expected"]:
        return f"passed {number.get('passed', 0)} of {number['expected']} expected"
    return None


def _inconsistent(data: Mapping[str, Any]) -> str | None:
    return inconsistency(data.get("verdict"), data.get("counts") or {})


def read(path: Path, key: bytes | None = None, witness: Path | None = None) -> Ledger:
    """Every record, checked: each line JSON with the record's fields, its sequence number its line, the chain
    unbroken, the tip equal to the head file, with ``key`` every record's and the head's signature (without it, a
    signed ledger is refused), and, given a ``witness``, not rewound below the last head it saw. Any problem is a
    ConfigError naming the line. A last line cut short (a full disk, a crash) behind an intact head is set aside
    and named in :attr:`Ledger.notes`, and the next append removes it."""
    witness = witness if witness is not None else witness_mod.witness_path()
    if not os.path.lexists(path):
        head = Head.read(path, key)
        if head is not None and head.count:
            raise ConfigError(LEDGER_GONE.format(path=path, head=head_path(path).name))
        witness_mod.check(path, (), witness)
        return Ledger(path)
    try:
        raw_bytes = read_regular(path, LEDGER_LIMIT)
    except OSError as exc:
        raise ConfigError(f"{path}: cannot be read as a ledger: {exc.strerror}") from None
    complete, _, tail = raw_bytes.rpartition(b"\n")
    complete = complete + b"\n" if complete or raw_bytes.startswith(b"\n") else b""
    notes: list[str] = []
    records: list[Record] = []
    prev = GENESIS
    lines = complete.splitlines()
    head = Head.read(path, key)
    whole_tail = bool(tail) and _is_record(tail)  # a whole record whose newline is gone: a record, never a cut line
    if whole_tail:
        lines.append(tail)
        notes.append(NEWLINE_MISSING.format(file=path.name, line=len(lines)))
    for n, raw in enumerate(lines, 1):
        try:
            data = parse_json(raw)
        except (ValueError, RecursionError):
            raise ConfigError(NOT_JSON.format(path=path, line=n)) from None
        if not isinstance(data, dict) or not {"gate", "verdict", "prev", "time"} <= data.keys():
            raise ConfigError(f"{path}:{n}: not a ledger record (needs gate, verdict, prev, time)")
        if (field := _misshapen(data)) is not None:
            raise ConfigError(MISSHAPEN.format(path=path, line=n, field=field))
        if (why := _inconsistent(data)) is not None:
            raise ConfigError(INCONSISTENT.format(where=AT_LINE.format(path=path, line=n), why=why))
        if key is None and "sig" in data:
            raise ConfigError(SIGNED_WITHOUT_KEY.format(where=f"{path}:{n}", var=KEY_VAR))
        if data["prev"] != prev:
            where = EDITED_OR_REMOVED.format(path=path, line=n - 1) if n > 1 else FIRST_EDITED.format(path=path)
            raise ConfigError(BROKEN_CHAIN.format(where=where, line=n, got=str(data["prev"])[:12], expected=prev[:12]))
        if key is not None and data.get("sig") != _signature(key, data):
            raise ConfigError(RECORD_SIGNATURE_WRONG.format(path=path, line=n, var=KEY_VAR, why=UNSIGNED if "sig" not in data else FORGED))
        if ("seq" in data or key is not None) and data.get("seq") != n:
            raise ConfigError(f"{path}:{n}: the record's sequence number is {data.get('seq')!r}, not {n} (records moved or removed)")
        digest = hashlib.sha256(raw).hexdigest()
        records.append(Record(n, data, digest))
        prev = digest
    if tail and not whole_tail:
        at = len(lines) + 1
        if head is None or head.count != len(records) or head.sha256 != prev:
            raise ConfigError(INCOMPLETE_LAST.format(path=path, line=at, size=len(tail)))
        notes.append(CUT_SHORT.format(file=path.name, line=at, size=len(tail)))
    if head is None:
        if records:
            raise ConfigError(f"{path}: has no head ({head_path(path).name}): its last record cannot be checked; move the ledger away to start a new one")
    elif (head.count, head.sha256) != (len(records), prev):
        before = records[-2].sha256 if len(records) > 1 else GENESIS
        if head.pending and records and head.pending == prev and (head.count, head.sha256) == (len(records) - 1, before):
            notes.append(HEAD_NOT_MOVED.format(file=path.name, line=len(records)))
        else:
            raise ConfigError(HEAD_MISMATCH.format(path=path))
    witness_mod.check(path, [r.sha256 for r in records], witness)
    return Ledger(path, tuple(records), tuple(notes), len(raw_bytes) if whole_tail else len(complete), whole_tail)


def _write_line(path: Path, line: bytes, keep: int) -> None:
    """``line`` at the end of the ledger, fsync'd, or an OSError with nothing of it left where it can be helped: a
    short write is carried on until the disk refuses, and then the file is cut back to ``keep`` bytes."""
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o644)
    try:
        try:
            view = memoryview(line)
            while view:
                written = os.write(fd, view)
                if written <= 0:
                    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
                view = view[written:]
            os.fsync(fd)
        except OSError as exc:
            try:
                os.ftruncate(fd, keep)
            except OSError as undo:
                raise _NotTakenBack(exc, undo) from None
            with contextlib.suppress(OSError):  # a crash before this lands reads as one the head announced
                os.fsync(fd)
            raise
    finally:
        os.close(fd)


class _NotTakenBack(Exception):
    def __init__(self, error: OSError, undo: OSError) -> None:
        super().__init__(error)
        self.error, self.undo = error, undo


def _why(exc: OSError) -> str:
    return exc.strerror or str(exc)


def append(
    path: Path, result: GateResult, context: BuildContext, artefacts: Mapping[str, str] | None = None, key: bytes | None = None, witness: Path | None = None
) -> Record:
    """Add one record at the end (an O_APPEND write, fsync'd), then move the head to it, under a lock; signed
    with ``key`` (default: ONEBIT_LEDGER_KEY) when there is one. The head first announces the line (``pending``),
    so a crash between the line and the head is told from an edit; a line cut short by an earlier crash is removed
    first. The witness (default: ONEBIT_LEDGER_WITNESS) moves this ledger's entry with the head. An append the disk
    does not take is one OSError naming the ledger (:data:`APPEND_FAILED`), its line taken back."""
    key = key if key is not None else signing_key()
    witness = witness if witness is not None else witness_mod.witness_path()
    with _locked(path):
        ledger = read(path, key, witness)
        if path.exists() and path.stat().st_size > ledger.size:  # an append cut short: its partial line goes
            os.truncate(path, ledger.size)
        n = len(ledger.records) + 1
        prev = ledger.records[-1].sha256 if ledger.records else GENESIS
        data: dict[str, Any] = {
            "seq": n,
            "gate": result.gate,
            "verdict": result.status.value,
            "summary": result.summary,
            "counts": dict(result.counts),
            "problems": list(result.problems),
            "properties": dict(result.properties),  # what the gate judged by content (models, binaries, prompts)
            "metrics": dict(result.metrics),
            **context.to_json(),
            "criteria": dict(context.judged(result)) if context.judged is not None else {},
            "versions": versions(),
            "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "host": platform.node(),
            "artefacts": dict(artefacts or {}),
            "prev": prev,
        }
        if (why := _inconsistent(data)) is not None:  # a gate's bug, or a judge weakened: never written
            raise ConfigError(INCONSISTENT.format(where=APPENDED.format(gate=result.gate), why=why))
        if n == 1:  # the chain's identity: two ledgers begun alike (one gate, one second, one build) still differ
            data["chain"] = secrets.token_hex(16)
        data["criteria_sha256"] = criteria_digest(data["criteria"])
        if key is not None:
            data["sig"] = _signature(key, data)
        line = json.dumps(data, sort_keys=True).encode()
        digest = hashlib.sha256(line).hexdigest()
        said = {"gate": result.gate, "verdict": result.status.value}
        try:
            Head(n - 1, prev, pending=digest).write(path, key)
            _write_line(path, (b"\n" if ledger.open_end else b"") + line + b"\n", ledger.size)
        except _NotTakenBack as exc:
            raise OSError(exc.error.errno, APPEND_NOT_TAKEN_BACK.format(**said, error=_why(exc.error), why=_why(exc.undo)), str(path)) from None
        except OSError as exc:
            raise OSError(exc.errno, APPEND_FAILED.format(**said, error=_why(exc), count=n - 1), str(path)) from None
        try:
            Head(n, digest).write(path, key)
        except OSError as exc:
            raise OSError(exc.errno, HEAD_NOT_WRITTEN.format(**said, seq=n, error=_why(exc)), str(path)) from None
        try:
            witness_mod.advance(witness, path, n, digest, ledger.records[0].sha256 if ledger.records else digest, _locked)
        except OSError as exc:
            raise OSError(exc.errno, WITNESS_NOT_WRITTEN.format(**said, seq=n, witness=witness, var=WITNESS_VAR, error=_why(exc)), str(path)) from None
        return Record(n, data, digest)


def criteria_digest(criteria: Mapping[str, Any]) -> str:
    """The sha256 of what a gate judged against (expected counts, token count, floors, the fault set)."""
    return hashlib.sha256(json.dumps(criteria, sort_keys=True, default=str).encode()).hexdigest()


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
