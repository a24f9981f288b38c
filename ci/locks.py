"""File locks (fcntl) that say who holds them: one build at a time per profile build directory, one sync at a time
per checkout, one bench at a time per ``--lock FILE``, so that a build.json describes the binaries beside it.

The lock file holds one line, ``pid N on HOST since TIME: WHAT``; a second comer reads it and waits (``wait=True``)
or refuses in one line naming the holder. The kernel drops a flock with its process, so a killed run's lock holds
nothing. A path that exists and is not a lock file is refused, never truncated.
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

# Messages, shared with the tests that match on them (tests/support/messages.py)
HOLDER = "pid {pid} on {host} since {since}"  # the lock file's line
WITH_PURPOSE = "{holder}: {purpose}"
UNKNOWN_HOLDER = "another process"  # a lock file with no line
IS_A_LINK = "{what} {path}: a symbolic link; give a lock file of its own"
NOT_A_LOCK_FILE = "{what} {path}: exists and is not a lock file ({size} bytes); it is left as it is: give a path of its own"
HELD = "{who}: {what} is held by {holder}; wait for it to finish, one at a time (lock file {path})"
WAITING = "{who}: waiting for the lock {path} (held by {holder})"
GOT_IT = "{who}: got the lock {path} after {seconds:.1f} s"


def _holder(fd: int) -> str:
    text = os.pread(fd, 300, 0).decode(errors="replace").strip()
    return text or UNKNOWN_HOLDER


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
            raise ConfigError(IS_A_LINK.format(what=what, path=path)) from None
        raise ConfigError(f"{what} {path}: cannot be opened as a lock file: {exc.strerror}") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise ConfigError(f"{what} {path}: not a regular file; give a lock file of its own")
        if st.st_size > 300 or not HOLDER_RE.match(os.pread(fd, 301, 0)):
            raise ConfigError(NOT_A_LOCK_FILE.format(what=what, path=path, size=st.st_size))
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _holder(fd)
            if not wait:
                raise Refused(HELD.format(who=who, what=what, holder=holder, path=path)) from None
            if say is not None:
                say(WAITING.format(who=who, path=path, holder=holder))
            t0 = time.monotonic()
            fcntl.flock(fd, fcntl.LOCK_EX)
            if say is not None:
                say(GOT_IT.format(who=who, path=path, seconds=time.monotonic() - t0))
        stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        line = HOLDER.format(pid=os.getpid(), host=platform.node(), since=stamp)
        if purpose:
            line = WITH_PURPOSE.format(holder=line, purpose=purpose)
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
