"""The entry point: parse the arguments (:mod:`ci.parser`), dispatch to the command's module under ``ci/commands/``,
and print one line per error.

``python -m ci <command>``; the nox sessions call these, so every flag documented in docs/ works with
``nox -s <session> -- <flags>`` too.
"""

from __future__ import annotations

import argparse
import contextlib
import errno
import importlib
import logging
import os
import select
import shutil
import sys
import tempfile
import time
import traceback
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

from ci.errors import CommandFailed, OnebitError, ToolchainError

PROG = "onebit-ci"
INTERNAL_ERROR = 70  # EX_SOFTWARE: a bug here, not a problem the user can fix
IO_ERROR = 74  # EX_IOERR
CRASH_LOG = "onebit-ci-crash.log"

# Messages, shared with the tests that match on them (tests/support/messages.py)
ERROR = PROG + ": error: {message}"  # each line of an error's message
INTERRUPTED = PROG + ": interrupted"
INTERRUPTED_BY = PROG + ": interrupted by {signal}"
AT_FILE = "{path}: {reason}"  # an OSError that names its file (ERROR's message): a full disk, a read-only directory
OUTPUT_CLOSED = "stdout was closed while this ran (what read it ended: | head?); stopped"


# each command's module under ci/commands/ and its function there: imported when dispatched, so --help stays quick
COMMANDS: dict[str, tuple[str, str]] = {
    "verify-pin": ("verify_pin", "main"),
    "bump-pin": ("bump_pin", "main"),
    "patches": ("patches", "main"),
    "export-patches": ("export_patches", "main"),
    "build": ("build", "main"),
    "gpu-tests": ("gpu_tests", "main"),
    "ship": ("ship", "main"),
    "main-job": ("main_job", "main"),
    "gate-selftest": ("gate_selftest", "main"),
    "selftest-fault": ("gate_selftest", "selftest_fault"),
    "bisect": ("bisect", "main"),
    "matrix": ("build", "matrix"),
    "backend-ops": ("backend_ops", "main"),
    "tiny-models": ("equivalence", "tiny_models"),
    "shape-models": ("shapes", "main"),
    "kernelforge": ("kernelforge", "main"),
    "equivalence": ("equivalence", "main"),
    "bench": ("bench", "main"),
    "try": ("try_fork", "main"),
    "try-inner": ("try_fork", "inner"),
    "report": ("report", "main"),
}


# the commands that write gate records: ci/'s digest is taken as they start (binding.judging_now compares it)
RECORDING = frozenset(("gpu-tests", "main-job", "try-inner"))  # a try records in its inner process only


def dispatch(name: str) -> Callable[[argparse.Namespace], int]:
    module, function = COMMANDS[name]

    def command(args: argparse.Namespace) -> int:
        handler: Callable[[argparse.Namespace], int] = getattr(importlib.import_module(f"ci.commands.{module}"), function)
        return handler(args)

    return command


# -- the entry point -------------------------------------------------------------------------------------------


def main(argv: Sequence[str] | None = None) -> int:
    shown_whatever_the_locale()
    with fresh_imports():  # the judges and the commands are imported from their sources, never the tree's bytecode
        from ci.environment import hide_secrets

        hide_secrets()  # the ledger's key in this process's environment: not readable through /proc by the code under test
        return _main(argv)


def shown_whatever_the_locale() -> None:
    """What this process prints goes out whatever the locale's encoding can hold: a character it cannot is written as
    an escape (``gr\\xf6\\xdfe.patch`` under ``PYTHONIOENCODING=ascii``), never a UnicodeEncodeError mid-command."""
    for stream in (sys.stdout, sys.stderr):
        reconfigure = getattr(stream, "reconfigure", None)
        if reconfigure is not None:
            with contextlib.suppress(ValueError, OSError):
                reconfigure(errors="backslashreplace")


@contextlib.contextmanager
def fresh_imports() -> Iterator[None]:
    """What this process imports from here on is compiled from its source, into a fresh folder removed afterwards:
    the tree's __pycache__ is not read (a .pyc whose header carries its source's mtime and size is taken for that
    source, and a weakened judge planted so ran under an unchanged digest). Here, not beside the launcher's bytecode
    folders, so that as little as can be is imported before: ci/__init__.py, this module and ci/errors.py, which only
    the fresh PYTHONPYCACHEPREFIX nox's sessions start ``python -m ci`` with protects."""
    before = sys.pycache_prefix
    folder = tempfile.mkdtemp(prefix=f"onebit-bytecode-{os.getpid()}-")  # ci.scratch's name: a later command sweeps it
    sys.pycache_prefix = folder
    try:
        yield
    finally:
        sys.pycache_prefix = before
        shutil.rmtree(folder, ignore_errors=True)


def _main(argv: Sequence[str] | None) -> int:
    from ci import digests, scratch
    from ci.environment import environment
    from ci.parser import parser

    args = parser({name: dispatch(name) for name in COMMANDS}).parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s", stream=sys.stderr)
    from ci.processes import Terminated, signals_as_interrupt

    try:
        # what would run unread by the digests of ci/ and serve/ (bytecode without its source, a link) is refused first
        digests.refuse_strays(digests.package_dir("ci"), digests.package_dir("serve"))
        environment()  # what would load other code into every program (a library path, start-up code) is refused before any starts
        scratch.sweep()  # the temporary folders of a ci that was killed (SIGKILL runs no clean-up)
        if args.command in RECORDING:  # before any judge is imported (binding.judging_now)
            digests.remember_start(digests.package_dir("ci"))
            digests.remember_start(digests.package_dir("serve"))
        handler: Callable[[argparse.Namespace], int] = args.func
        with signals_as_interrupt():  # SIGTERM and SIGHUP end what Ctrl-C ends
            return handler(args)
    except OnebitError as exc:
        if args.debug:
            traceback.print_exc()
        if isinstance(exc, CommandFailed) and exc.tail.strip():
            sys.stderr.write(exc.tail if exc.tail.endswith("\n") else exc.tail + "\n")
        for line in exc.message.splitlines() or [""]:
            print(ERROR.format(message=line), file=sys.stderr)
        return exc.exit_code
    except Terminated as exc:
        print(INTERRUPTED_BY.format(signal=exc), file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print(INTERRUPTED, file=sys.stderr)
        return 130
    except ModuleNotFoundError as exc:  # run outside nox's environment, by a Python without the project's packages
        if args.debug:
            raise
        missing = f"the Python package {exc.name} is not installed for {sys.executable}"
        print(ERROR.format(message=f"{missing}; run through nox (nox -s <session>) or pip install -e ."), file=sys.stderr)
        return ToolchainError.exit_code
    except OSError as exc:  # the disk, not the code: a full disk, a read-only or vanished directory
        if args.debug:
            raise
        if exc.errno == errno.EPIPE and _stdout_gone():  # nox -s build | head -1: whoever raised it, that is the cause
            print(ERROR.format(message=OUTPUT_CLOSED), file=sys.stderr)
            return IO_ERROR
        reason = exc.strerror or exc
        print(ERROR.format(message=AT_FILE.format(path=exc.filename, reason=reason) if exc.filename else reason), file=sys.stderr)
        return IO_ERROR
    except Exception as exc:  # a bug: one line, the traceback in a file (or on the terminal with --debug)
        if args.debug:
            raise
        where = _crash_log(args, argv)
        print(f"{PROG}: internal error: {type(exc).__name__}: {str(exc)[:200]}; details in {where}", file=sys.stderr)
        return INTERNAL_ERROR


def _stdout_gone() -> bool:
    """Whether this process's stdout is a pipe that nothing reads any more; if so it is pointed at /dev/null, so that
    the interpreter's last flush at exit does not print "Exception ignored ... BrokenPipeError" after our line."""
    try:
        fd = sys.stdout.fileno()
        poll = select.poll()
        poll.register(fd, select.POLLOUT)
        gone = any(events & select.POLLERR for _, events in poll.poll(0))  # a pipe's write end with no reader left
    except (OSError, ValueError, AttributeError):  # not a file (a test's StringIO), or closed
        return False
    if gone:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, fd)
        os.close(devnull)
    return gone


def _crash_log(args: argparse.Namespace, argv: Sequence[str] | None) -> str:
    text = f"{time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime())} {PROG} {' '.join(argv if argv is not None else sys.argv[1:])}\n"
    text += traceback.format_exc()
    for base in (getattr(getattr(args, "_job", None), "root", None), Path(args.root) if args.root else None, Path.cwd()):
        if base is None:
            continue
        path = Path(base) / "build" / CRASH_LOG
        try:
            from ci.command import open_log

            with open_log(path, append=True) as fh:  # never through a link planted at its name
                fh.write(text + "\n")
            return os.path.relpath(path) if not os.path.relpath(path).startswith("..") else str(path)
        except OSError:
            continue
    return "(no writable place; run again with --debug)"
