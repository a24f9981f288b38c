"""Reading a file the way every reader here must: a regular file (never a FIFO, a device or a directory), up to a
size limit, in one pass. ``--from-log /dev/zero`` grew to 22.9 GB before this, and a FIFO hung the reader.

Problems are :class:`OSError` carrying the file's name, so every entry point's existing one-line report of a file
it cannot read (``onebit-ci: error: FILE: ...``, ``1bit serve: error: FILE: ...``) covers them too.
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

from serve.errors import NO_SUCH_FILE, NOT_A_FILE

MiB = 1 << 20
CONFIG_LIMIT = 16 * MiB  # pins.yaml, .gitmodules, recipes, faults, build.json, a ledger head, a server answer
LOG_LIMIT = 1024 * MiB  # a test-backend-ops console or sql log (the 100 MB benchmark is a tenth of it)
LEDGER_LIMIT = 256 * MiB  # about 100 000 records

# Messages, shared with the tests that match on them (tests/support/messages.py)
SYMBOLIC_LINK = "a symbolic link, where a file of its own is expected"
NOT_REGULAR = "{kind}, where a regular file is expected"
# NOT_REGULAR's kinds
A_DIRECTORY = "a directory"
A_FIFO = "a FIFO"
A_CHARACTER_DEVICE = "a character device"
A_BLOCK_DEVICE = "a block device"
A_SOCKET = "a socket"
NOT_A_REGULAR_FILE = "not a regular file"
TOO_LARGE = "{size} bytes, more than the {limit} this reader takes"


class NotARegularFile(OSError):
    """A path that is a FIFO, a device, a directory or a socket where a file was expected."""


class TooLarge(OSError):
    """A file over the limit its reader allows."""


def kind(mode: int) -> str:
    """What a non-regular file's mode says it is (NOT_REGULAR's kinds)."""
    for test, name in (
        (stat.S_ISDIR, A_DIRECTORY),
        (stat.S_ISFIFO, A_FIFO),
        (stat.S_ISCHR, A_CHARACTER_DEVICE),
        (stat.S_ISBLK, A_BLOCK_DEVICE),
        (stat.S_ISSOCK, A_SOCKET),
    ):
        if test(mode):
            return name
    return NOT_A_REGULAR_FILE


def _limit_text(limit: int) -> str:
    return f"{limit / MiB:g} MiB" if limit >= MiB else f"{limit} bytes"


def read_regular(path: str | os.PathLike[str], limit: int, *, follow: bool = True) -> bytes:
    """The bytes of ``path``, which must be a regular file of at most ``limit`` bytes (``follow=False``: and not a
    symbolic link). Opened without blocking, so a FIFO is named, not waited on."""
    name = os.fspath(path)
    flags = os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0) | (0 if follow else os.O_NOFOLLOW)
    try:
        fd = os.open(name, flags)
    except OSError as exc:
        if exc.errno == errno.ELOOP and not follow:
            raise NotARegularFile(errno.ELOOP, SYMBOLIC_LINK, name) from None
        raise
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise NotARegularFile(errno.EINVAL, NOT_REGULAR.format(kind=kind(st.st_mode)), name)
        if st.st_size > limit:
            raise TooLarge(errno.EFBIG, TOO_LARGE.format(size=st.st_size, limit=_limit_text(limit)), name)
        chunks: list[bytes] = []
        total = 0
        while True:
            chunk = os.read(fd, min(MiB, limit + 1 - total))
            if not chunk:
                break
            chunks.append(chunk)
            total += len(chunk)
            if total > limit:  # grew while being read
                raise TooLarge(errno.EFBIG, f"more than the {_limit_text(limit)} this reader takes", name)
        return b"".join(chunks)
    finally:
        os.close(fd)


def not_a_file(path: str, what: str) -> str | None:
    """Why ``path`` names no file to read as ``what`` (serve.errors' NO_SUCH_FILE or NOT_A_FILE), looked at without
    opening it (a FIFO would be waited on); None for a regular file, or for one whose reader will name the problem."""
    try:
        mode = os.stat(path).st_mode
    except (FileNotFoundError, NotADirectoryError):
        return NO_SUCH_FILE
    except OSError:  # a permission or a link loop: the reader's own line says which
        return None
    return None if stat.S_ISREG(mode) else NOT_A_FILE.format(kind=kind(mode), what=what)


def read_text(path: str | os.PathLike[str], limit: int, *, follow: bool = True, errors: str = "strict") -> str:
    """:func:`read_regular` decoded as UTF-8 (a UnicodeDecodeError under ``errors="strict"``)."""
    return read_regular(path, limit, follow=follow).decode("utf-8", errors=errors)


def is_regular(path: Path) -> bool:
    """Whether ``path`` itself (not what a symbolic link points at) is a regular file."""
    try:
        return stat.S_ISREG(os.lstat(path).st_mode)
    except OSError:
        return False
