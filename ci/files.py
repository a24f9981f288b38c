"""Atomic writes, and snapshots that put a set of files back exactly as they were."""

from __future__ import annotations

import contextlib
import errno
import json
import os
import stat
import tempfile
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from serve import bounded


def kind_of(path: Path) -> str | None:
    """Why ``path`` cannot be written over, in serve.bounded's words (a symbolic link, a directory, a device...), or
    None when nothing is there or a regular file is."""
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        return None
    if stat.S_ISREG(mode):
        return None
    return bounded.SYMBOLIC_LINK if stat.S_ISLNK(mode) else bounded.NOT_REGULAR.format(kind=bounded.kind(mode))


def write_atomic(path: Path, data: bytes | str, *, mode: int | None = None) -> None:
    """Write ``data`` to ``path`` through a temporary file in the same directory and a rename. A path that is a
    link, a folder, a device or a pipe is refused (an OSError naming it): the rename would have replaced it, and
    once replaced /dev/full with a regular file."""
    payload = data.encode() if isinstance(data, str) else data
    why = kind_of(path)
    if why is not None:
        raise OSError(errno.EEXIST, why, str(path))
    path.parent.mkdir(parents=True, exist_ok=True)
    if mode is None:
        try:
            mode = path.stat().st_mode & 0o777
        except FileNotFoundError:
            mode = 0o644
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(payload)
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException as exc:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        if isinstance(exc, OSError) and exc.filename is None:  # a full disk: the file it was for, named
            raise OSError(exc.errno, exc.strerror, str(path)) from None
        raise


def write_json(path: Path, value: Any) -> None:
    write_atomic(path, json.dumps(value, indent=2, sort_keys=False) + "\n")


class Snapshot:
    """The bytes of some files (or their absence), to restore after a failed multi-file change."""

    def __init__(self, paths: Sequence[Path]) -> None:
        self._saved: dict[Path, bytes | None] = {}
        for p in paths:
            try:
                self._saved[p] = p.read_bytes()
            except FileNotFoundError:
                self._saved[p] = None

    def restore(self) -> None:
        for p, data in self._saved.items():
            if data is None:
                with contextlib.suppress(FileNotFoundError):
                    p.unlink()
            else:
                try:
                    if p.read_bytes() == data:
                        continue
                except FileNotFoundError:
                    pass
                write_atomic(p, data)


@contextlib.contextmanager
def all_or_nothing(paths: Sequence[Path]) -> Iterator[Snapshot]:
    """Restore ``paths`` byte for byte if the block raises (Ctrl-C included)."""
    snap = Snapshot(paths)
    try:
        yield snap
    except BaseException:
        snap.restore()
        raise


def shown(path: Path, root: Path | None) -> str:
    """``path`` as a message shows it: relative to ``root`` when it lies inside, else as it is."""
    if root is not None:
        try:
            return str(path.resolve().relative_to(root.resolve()))
        except ValueError:
            pass
    return str(path)


def cache_dir() -> Path:
    """Where onebit-ci keeps what it can compute again: ``$XDG_CACHE_HOME/onebit-ci`` (``~/.cache/onebit-ci``)."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "onebit-ci"


# The ledger's signing key (ci/release/ledger.py's KEY_VAR): with it set, the sha256 cache's entries are signed too
LEDGER_KEY_VAR = "ONEBIT_LEDGER_KEY"


def sha256_cached(path: Path) -> str:
    """The sha256 of ``path``, remembered by (real path, size, mtime_ns, inode, ctime_ns) as git's index does: a model
    of many GB is hashed once, not on every gate run. The ctime is in the stamp because an edit in place can put size,
    mtime and inode back, and not the ctime. With the ledger's key set (:data:`LEDGER_KEY_VAR`) each entry carries an
    HMAC of its stamp and digest under it: every program a gate starts runs as this user, with this HOME, but never with
    the key, so an entry it writes (a swapped model given its release's digest) is not taken, and the file is hashed."""
    import hashlib
    import hmac

    st = path.stat()
    stamp = f"{path.resolve()}\0{st.st_size}\0{st.st_mtime_ns}\0{st.st_ino}\0{st.st_ctime_ns}"
    entry = cache_dir() / "sha256" / hashlib.sha256(stamp.encode()).hexdigest()
    key = os.environ.get(LEDGER_KEY_VAR, "").encode()

    def signed(digest: str) -> str:
        return hmac.new(key, f"{stamp}\0{digest}".encode(), hashlib.sha256).hexdigest() if key else ""

    try:
        known, _, mac = entry.read_text().strip().partition(" ")
        if len(known) == 64 and hmac.compare_digest(mac, signed(known)):
            return known
    except OSError:
        pass
    digest = sha256_file(path)
    with contextlib.suppress(OSError):  # a cache that cannot be written only costs the next run a hash
        write_atomic(entry, f"{digest} {signed(digest)}".rstrip() + "\n")
    return digest


def sha256_file(path: Path) -> str:
    """The sha256 of ``path``, read in 1 MiB blocks (the one file hash of ci/; serve/ keeps its own, to stay apart)."""
    import hashlib

    h = hashlib.sha256()
    with path.open("rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()
