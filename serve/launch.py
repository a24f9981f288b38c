"""Running llama-server: start it, forward SIGINT/SIGTERM/SIGHUP to it, reap it, return its exit status.

The child gets its own process group, so a Ctrl-C in the terminal reaches serve alone and serve passes it on
once: llama-server takes a second SIGINT as "stop now, without a clean shutdown". On Linux the child also gets
SIGTERM should serve itself die (SIGKILL included), so no llama-server is left running on its own.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import subprocess
import sys
from collections.abc import Callable, Mapping, Sequence
from types import FrameType

from serve.errors import NoServer, ServeError

FORWARDED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
_PR_SET_PDEATHSIG = 1


def _child_setup() -> Callable[[], None]:
    """What the child runs between fork and exec (libc is loaded here, before the fork)."""
    parent = os.getpid()
    libc = ctypes.CDLL(None, use_errno=True) if sys.platform.startswith("linux") else None

    def setup() -> None:
        os.setpgid(0, 0)
        if libc is not None:
            libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)
            if os.getppid() != parent:  # serve died before prctl took hold
                os._exit(127)

    return setup


def exit_status(returncode: int) -> int:
    """A shell's view of the child's status: a death by signal N is 128 + N."""
    return 128 - returncode if returncode < 0 else returncode


def run(argv: Sequence[str], env: Mapping[str, str], on_start: Callable[[int], None] | None = None) -> int:
    """Run ``argv`` with exactly ``env``; return its exit status once it has been reaped."""
    child: subprocess.Popen[bytes] | None = None
    pending: list[int] = []

    def forward(signum: int, _frame: FrameType | None) -> None:
        if child is None:
            pending.append(signum)
        elif child.returncode is None:
            with contextlib.suppress(ProcessLookupError):  # it exited just now; wait() reaps it
                child.send_signal(signum)

    previous = {s: signal.signal(s, forward) for s in FORWARDED}
    try:
        try:
            # preexec_fn is unsafe only with threads, and serve has none. stdin is /dev/null: in a process group of
            # its own, a child that read the terminal would be stopped (SIGTTIN) instead of served.
            child = subprocess.Popen(list(argv), env=dict(env), stdin=subprocess.DEVNULL, preexec_fn=_child_setup())
        except FileNotFoundError:
            raise NoServer("no such file or not on PATH", argv[0]) from None
        except PermissionError:
            raise NoServer("not executable", argv[0]) from None
        except OSError as exc:
            raise ServeError(f"cannot start: {exc.strerror or exc}", argv[0]) from None
        for signum in pending:
            child.send_signal(signum)
        if on_start is not None:
            on_start(child.pid)
        return exit_status(child.wait())
    finally:
        if child is not None and child.returncode is None:  # serve itself failed after the start: take it down
            child.terminate()
            try:
                child.wait(timeout=10)
            except subprocess.TimeoutExpired:
                child.kill()
                child.wait()
        for signum, handler in previous.items():
            signal.signal(signum, handler)
