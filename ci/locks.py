"""File locks (fcntl) that say who holds them: one build at a time per profile build directory, one sync at a time
per checkout, one bench at a time per ``--lock FILE``.

Two builds at once on one checkout once left a build.json whose flags did not describe its binaries. The lock file
holds one line, ``pid N on HOST since TIME: WHAT``, written once the lock is taken; a second comer reads it and waits
(``wait=True``) or refuses in one line naming the holder. The kernel drops a flock with its process, so a lock
left by a killed run holds nothing. A path that exists and is not a lock file is refused, never truncated.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import platform
import re
import stat
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from ci.errors import ConfigError, Refused

HOLDER_RE = re.compile(rb"\A(?:pid \d+ on [^\n]* since [^\n]*\n?)?\Z")
LOCK_NAME = ".onebit.lock"


def _holder(fd: int) -> str:
    text = os.pread(fd, 300, 0).decode(errors="replace").strip()
    return text or "another process"


@contextlib.contextmanager
def held_lock(
    path: Path, who: str, what: str, *, wait: bool = False, say: Callable[[str], None] | None = None, purpose: str = ""
) -> Iterator[None]:
    """An exclusive flock on ``path`` for the block. ``who`` names the command in messages, ``what`` the lock
    (``--lock``, ``the build directory build/cpu``). A second holder waits when ``wait``, else :class:`Refused`."""
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, 0o644)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise ConfigError(f"{what} {path}: a symbolic link; give a lock file of its own") from None
        raise ConfigError(f"{what} {path}: cannot be opened as a lock file: {exc.strerror}") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise ConfigError(f"{what} {path}: not a regular file; give a lock file of its own")
        if st.st_size > 300 or not HOLDER_RE.match(os.pread(fd, 301, 0)):
            raise ConfigError(
                f"{what} {path}: exists and is not a lock file ({st.st_size} bytes); it is left as it is: give a path of its own"
            )
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _holder(fd)
            if not wait:
                raise Refused(f"{who}: {what} is held by {holder}; wait for it to finish, one at a time (lock file {path})") from None
            if say is not None:
                say(f"{who}: waiting for the lock {path} (held by {holder})")
            t0 = time.monotonic()
            fcntl.flock(fd, fcntl.LOCK_EX)
            if say is not None:
                say(f"{who}: got the lock {path} after {time.monotonic() - t0:.1f} s")
        stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        line = f"pid {os.getpid()} on {platform.node()} since {stamp}{': ' + purpose if purpose else ''}"
        line = line.replace("\n", " ")[:250] + "\n"
        os.ftruncate(fd, 0)  # ours now: the previous holder's line goes
        os.pwrite(fd, line.encode(), 0)
        try:
            yield
        finally:
            os.ftruncate(fd, 0)
    finally:
        os.close(fd)  # closing the descriptor releases the flock


def command_line() -> str:
    """This process's command, for the holder line."""
    return " ".join(os.path.basename(a) if i == 0 else a for i, a in enumerate(sys.argv))[:120]
