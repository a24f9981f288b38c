"""The witness of a signed ledger (``ONEBIT_LEDGER_WITNESS``): a file outside build/ holding the last head each ledger
had, by its place and by its chain, so that an old signed head put back with the records after it removed (a rewind)
is refused. docs/release.md says who keeps it.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from ci.errors import ConfigError
from ci.files import write_atomic
from ci.schema import parse_json
from serve.bounded import CONFIG_LIMIT, read_regular

WITNESS_VAR = "ONEBIT_LEDGER_WITNESS"

# Messages, shared with the tests that match on them (tests/support/messages.py)
NOT_A_WITNESS = "{witness} ({var}): not a ledger witness (an entry per ledger: count, sha256); restore it or remove it to start a new ledger"
REWOUND = "{path}: rewound: it holds {held} records, but {witness} ({var}) saw {seen}; restore the ledger from a backup (records were removed)"


def witness_path(env: Mapping[str, str] | None = None) -> Path | None:
    """ONEBIT_LEDGER_WITNESS: the file a ledger rewound below is refused by, or None when it is not set."""
    value = (os.environ if env is None else env).get(WITNESS_VAR, "")
    return Path(value) if value else None


def _witness_key(path: Path) -> str:
    """A ledger's entry in a witness by place: its resolved path, so ledgers on one runner share a witness file."""
    return os.path.realpath(path)


CHAIN_KEY = "chain:{sha256}"  # a ledger's entry in a witness by identity: the sha256 of its first record's line


def _chain_key(first: str) -> str:
    """A ledger's entry by what it is, wherever it lies: an old copy read from another results directory (or through
    a link) has the same first record, and is held to the count the witness saw of that chain."""
    return CHAIN_KEY.format(sha256=first)


def _read_witness(witness: Path) -> tuple[dict[str, tuple[int, str]], tuple[int, str] | None]:
    """The witness's entries by ledger, and a witness of one unnamed ledger as written before entries (which any
    ledger reading it is held to, as it was then)."""
    try:
        data = parse_json(read_regular(witness, CONFIG_LIMIT))
    except OSError as exc:
        raise ConfigError(f"{witness} ({WITNESS_VAR}): cannot be read: {exc.strerror}") from None
    except (ValueError, RecursionError):
        raise ConfigError(NOT_A_WITNESS.format(witness=witness, var=WITNESS_VAR)) from None

    def entry(value: object) -> tuple[int, str]:
        if not isinstance(value, dict):
            raise ValueError
        count, sha = value["count"], value["sha256"]
        if isinstance(count, bool) or not isinstance(count, int) or count < 0 or not isinstance(sha, str) or len(sha) != 64:
            raise ValueError
        return count, sha

    try:
        if isinstance(data, dict) and "ledgers" in data and isinstance(data["ledgers"], dict):
            return {str(k): entry(v) for k, v in data["ledgers"].items()}, None
        return {}, entry(data)
    except (ValueError, KeyError, TypeError):
        raise ConfigError(NOT_A_WITNESS.format(witness=witness, var=WITNESS_VAR)) from None


def check(path: Path, records: Sequence[str], witness: Path | None) -> None:
    """Refuse a ledger (its records' sha256, in order) shorter than the witness saw, or another at its count."""
    if witness is None or not os.path.lexists(witness):
        return
    entries, unnamed = _read_witness(witness)
    by_place = entries.get(_witness_key(path), unnamed)
    by_chain = entries.get(_chain_key(records[0])) if records else None
    for seen in (by_place, by_chain):
        if seen is None:
            continue
        count, sha = seen
        if count > len(records):
            raise ConfigError(REWOUND.format(path=path, held=len(records), witness=witness, var=WITNESS_VAR, seen=count))
        if count and records[count - 1] != sha:
            raise ConfigError(f"{path}:{count}: not the record {witness} ({WITNESS_VAR}) saw there (sha256 {sha[:12]}); the ledger was rewritten")


def advance(
    witness: Path | None, path: Path, count: int, sha: str, first: str, locked: Callable[[Path], contextlib.AbstractContextManager[None]]
) -> None:
    """This ledger's entries (by its place and by its chain, whose first record's sha256 is ``first``) moved to
    (count, sha), the other ledgers' kept; under the witness's own lock, since ledgers with locks of their own share
    it. A witness of one unnamed ledger becomes this ledger's entry: the append read and checked this ledger against
    it."""
    if witness is None:
        return
    with locked(witness):
        entries = _read_witness(witness)[0] if os.path.lexists(witness) else {}
        entries[_witness_key(path)] = (count, sha)
        entries[_chain_key(first)] = (count, sha)
        doc = {"ledgers": {k: {"count": c, "sha256": s} for k, (c, s) in sorted(entries.items())}}
        write_atomic(witness, json.dumps(doc, indent=1) + "\n")
