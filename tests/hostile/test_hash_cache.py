"""The sha256 cache under the home folder is not taken on trust where records are signed (issue 36).

``sha256_cached`` remembers a model's digest by its stat data (a model of many GB is hashed once), in a file under
``~/.cache/onebit-ci``. Every program a gate starts runs as the same user with the same HOME: fork code could write
the entry of the release's model with the release's digest, and a swapped model passed its pin. With
``ONEBIT_LEDGER_KEY`` set, each entry now carries an HMAC of the file's stamp and digest under that key, which no
program a gate starts is given; an entry without it, or with a wrong one, is hashed again."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from ci import files

KEY = "runner secret"


def forged_entry(path: Path, digest: str) -> Path:
    """What fork code can write: the entry sha256_cached reads for ``path``, holding ``digest``."""
    st = path.stat()
    stamp = f"{path.resolve()}\0{st.st_size}\0{st.st_mtime_ns}\0{st.st_ino}\0{st.st_ctime_ns}"
    entry = files.cache_dir() / "sha256" / hashlib.sha256(stamp.encode()).hexdigest()
    entry.parent.mkdir(parents=True, exist_ok=True)
    entry.write_text(digest + "\n")
    return entry


@pytest.fixture
def model(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    f = tmp_path / "swapped.gguf"
    f.write_bytes(b"GGUF" + b"\1" * 60)
    return f


def test_a_forged_entry_is_not_taken_where_records_are_signed(model: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(files.LEDGER_KEY_VAR, KEY)
    forged_entry(model, "a" * 64)  # the release model's digest, written by fork code
    assert files.sha256_cached(model) == hashlib.sha256(model.read_bytes()).hexdigest()


def test_an_entry_written_under_the_key_is_taken_and_another_keys_is_not(model: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(files.LEDGER_KEY_VAR, KEY)
    truth = files.sha256_cached(model)  # hashed, remembered with its HMAC
    calls: list[Path] = []
    hashed = files.sha256_file

    def counted(p: Path) -> str:
        calls.append(p)
        return hashed(p)

    monkeypatch.setattr(files, "sha256_file", counted)
    assert (files.sha256_cached(model), calls) == (truth, [])  # taken: no second hash
    monkeypatch.setenv(files.LEDGER_KEY_VAR, "another runner's")
    assert (files.sha256_cached(model), calls) == (truth, [model])  # not this key's: hashed again


def test_without_a_key_the_cache_is_as_trusted_as_the_unsigned_ledger(model: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Without a key anyone who can run code as the user can rewrite the ledger itself (docs/release.md): the cache
    is then a cache, and its entry is taken."""
    monkeypatch.delenv(files.LEDGER_KEY_VAR, raising=False)
    forged_entry(model, "a" * 64)
    assert files.sha256_cached(model) == "a" * 64
