"""One way to run an external program (after nox's ``command.run``).

Every program goes through :func:`run`: an argv list, never a string or ``shell=True``; the program is resolved
before it starts; the quoted command line is logged; a failure raises :class:`CommandFailed` with the tail. It runs
with the one environment of :func:`ci.environment.environment`, in a fresh empty folder unless it is given one, and
nothing it starts outlives it (:mod:`ci.processes`: its tree is marked, its orphans come back here and end with it).
"""

from __future__ import annotations

import codecs
import collections
import contextlib
import io
import logging
import os
import shlex
import shutil
import signal
import stat
import subprocess
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from ci import loaded, scratch
from ci.environment import environment as environment  # a program's unless given one; ci.compile.cmake imports it here
from ci.environment import hide_secrets
from ci.errors import CommandFailed, ToolchainError
from ci.processes import TREE_VAR, adopt_orphans, end_orphans, end_tree, end_trees, remember_mark, signals_held, tree_marked
from serve import bounded

log = logging.getLogger("onebit-ci")

TAIL_LINES = 40
# What a program's output may take: in memory, a tail of KEPT_LIMIT (all of it, for a program without a log, or it is
# ended); in its log, LOG_LIMIT (then it is ended); a line longer than LINE_LIMIT is passed on in pieces. A program
# that printed 1.5 GB without a newline had taken 1.5 GB of this process, and under a memory limit the reader died.
KEPT_LIMIT = 64 << 20
LOG_LIMIT = bounded.LOG_LIMIT
LINE_LIMIT = 1 << 20
CHUNK = 1 << 16

# Messages, shared with the tests that match on them (tests/support/messages.py)
NOT_ON_PATH = "{program}: not found on PATH; install it or put it on PATH"
PRINTED_TOO_MUCH = "{program} printed more than {limit} and was ended; what it printed: {where}"
NOT_LOGGED = "its last lines above (it has no log)"


class OutputTooLong(CommandFailed):
    """A program that printed past its limit (:data:`KEPT_LIMIT` without a log, :data:`LOG_LIMIT` with one), ended."""

    def __init__(self, argv: Sequence[str], tail: str, program: str, limit: int, where: str) -> None:
        super().__init__(argv, -signal.SIGTERM, tail, what=program)
        self.message = PRINTED_TOO_MUCH.format(program=program, limit=_size(limit), where=where)
        self.args = (self.message,)


def _size(n: int) -> str:
    return f"{n >> 20} MiB" if n % (1 << 20) == 0 else f"{n} bytes"


@dataclass(frozen=True)
class Completed:
    argv: tuple[str, ...]
    returncode: int
    output: str
    timed_out: bool = False
    seconds: float = 0.0  # from its start until it was seen to end
    size: int = 0  # characters it printed, all of them
    cut: bool = False  # ``output`` is its last KEPT_LIMIT only (the whole is in its log)


def resolve(program: str | os.PathLike[str], path: str | None = None) -> str:
    """Absolute path of ``program``; a :class:`ToolchainError` naming it when it is not there."""
    name = os.fspath(program)
    if os.sep in name:
        if os.access(name, os.X_OK) and Path(name).is_file():
            return os.path.abspath(name)  # not resolve(): a venv's python is a symlink out of the venv
        raise ToolchainError(f"{name}: not an executable file")
    found = shutil.which(name, path=path)
    if found is None:
        raise ToolchainError(NOT_ON_PATH.format(program=name))
    return found


class _Started:
    """A program started by :func:`run` or :func:`run_together`: its output read as it comes, by a thread of its own."""

    def __init__(
        self,
        argv: Sequence[str | os.PathLike[str]],
        *,
        cwd: str | os.PathLike[str] | None = None,
        env: Mapping[str, str] | None = None,
        quiet: bool = False,
        log_file: IO[str] | None = None,
        on_line: Callable[[str], None] | None = None,
        stdin: Path | None = None,
    ) -> None:
        args = [os.fspath(a) for a in argv]
        chosen = tree_marked(environment() if env is None else env)
        args[0] = resolve(args[0], chosen.get("PATH"))
        self.program = os.fspath(argv[0])
        self.args = args
        self.log_file = log_file
        self.mark = chosen[TREE_VAR]
        if not quiet:
            log.info("$ %s", shlex.join([self.program, *args[1:]]))
        adopt_orphans()
        hide_secrets()
        # a folder of its own unless it needs one: a program run in the caller's loaded the libgcc_s.so.1 planted there
        self.scratch = scratch.folder("cwd") if cwd is None else None
        source = stdin.open("rb") if stdin is not None else None
        try:
            self.proc = subprocess.Popen(
                args,
                cwd=self.scratch or cwd,
                env=chosen,
                stdin=source if source is not None else subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                bufsize=0,
            )
        except BaseException:
            self._remove_scratch()
            raise
        finally:
            if source is not None:
                source.close()
        remember_mark(self.proc, self.mark)
        loaded.follow(self.proc.pid)  # the libraries it maps, while a gate watches (ci.loaded)
        self.started = time.monotonic()
        self.ended: float | None = None
        self.timed_out = False
        self.lines: collections.deque[str] = collections.deque()  # what memory keeps: all, or the tail (see KEPT_LIMIT)
        self.kept = 0  # characters in ``lines``
        self.size = 0  # characters printed in all
        self.cut = False
        self.over = 0  # the limit it went past, when it did (it is ended)
        self.broken: list[OSError] = []  # the log's write error, raised once the program is gone
        self.reported: list[OSError] = []  # on_line's error (a closed stdout), raised as it is once the program is gone
        self.reader = threading.Thread(target=self._pump, args=(on_line,), daemon=True)
        try:
            self.reader.start()
        except BaseException:  # no thread left to start: the program, started, is not left behind
            end_tree(self.proc)
            if self.proc.stdout is not None:
                self.proc.stdout.close()
            self._remove_scratch()
            raise

    def _pump(self, on_line: Callable[[str], None] | None) -> None:
        """Read the program's output in chunks, as text with its newlines translated (as text mode reads it), each line
        (or a piece of a line longer than :data:`LINE_LIMIT`) to the log, to ``on_line`` and to memory's tail."""
        if self.proc.stdout is None:
            return
        decoder = io.IncrementalNewlineDecoder(codecs.getincrementaldecoder("utf-8")("replace"), translate=True)
        fd, partial = self.proc.stdout.fileno(), ""
        while True:
            chunk = os.read(fd, CHUNK)
            partial += decoder.decode(chunk, final=not chunk)
            while partial:
                end = partial.find("\n")
                if end < 0 and len(partial) < LINE_LIMIT and chunk:
                    break
                cut_at = end + 1 if 0 <= end < LINE_LIMIT else min(len(partial), LINE_LIMIT)
                line, partial = partial[:cut_at], partial[cut_at:]
                on_line = self._take(line, on_line)
            if not chunk:
                return

    def _take(self, line: str, on_line: Callable[[str], None] | None) -> Callable[[str], None] | None:
        self.size += len(line)
        if self.over:
            return on_line  # ended: what it still had in the pipe is drained and dropped
        if self.log_file is not None and not self.broken:
            try:
                self.log_file.write(line)
            except OSError as exc:
                self.broken.append(exc)
                end_tree(self.proc, grace=2.0)  # this reader ends it, then drains what is left; a full pipe waits 2 s at most
        self.lines.append(line)
        self.kept += len(line)
        while self.kept > KEPT_LIMIT and self.log_file is not None and len(self.lines) > 1:
            self.kept -= len(self.lines.popleft())
            self.cut = True
        limit = KEPT_LIMIT if self.log_file is None else LOG_LIMIT
        if (self.kept if self.log_file is None else self.size) > limit:
            self.over = limit
            end_tree(self.proc, grace=2.0)
        if on_line is not None:
            try:
                on_line(line.rstrip("\n"))
            except OSError as exc:  # the progress's reader is gone (nox -s build | head -1): stop reporting, end
                on_line = None  # the program and keep draining; the error is raised in the caller's thread
                self.reported.append(exc)
                end_tree(self.proc, grace=2.0)
        return on_line

    def poll(self, timeout: float | None) -> bool:
        """Whether it has ended (a program past its ``timeout`` seconds is ended here, its whole tree; one that exited
        leaves no orphan behind)."""
        if self.ended is not None:
            return True
        if self.proc.poll() is None:
            if timeout is None or time.monotonic() - self.started < timeout:
                return False
            self.timed_out = True
            end_tree(self.proc)
        else:
            end_orphans(self.mark)
        self.ended = time.monotonic()
        return True

    def wait(self, timeout: float | None) -> None:
        try:
            self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.timed_out = True
            end_tree(self.proc)
        else:
            end_orphans(self.mark)
        self.ended = time.monotonic()

    def close(self) -> None:
        self.reader.join(timeout=5)
        _close_output(self.proc, self.reader)
        self._remove_scratch()

    def _remove_scratch(self) -> None:
        if self.scratch is not None:
            shutil.rmtree(self.scratch, ignore_errors=True)

    def finish(self, check: bool, what: str | None) -> Completed:
        self.close()
        if self.proc.returncode == -signal.SIGINT:
            # a terminal's Ctrl-C reaches the whole foreground group: the program may die of it before this process's own
            # handler runs, and then it is the interrupt, not a failed command (as a shell treats a child killed by SIGINT)
            raise KeyboardInterrupt
        if self.reported:
            raise self.reported[0]
        if self.broken:
            exc = self.broken[0]
            name = getattr(self.log_file, "name", None)
            raise OSError(exc.errno, exc.strerror, str(name) if name is not None else exc.filename) from None
        seconds = (self.ended or time.monotonic()) - self.started
        tail = "".join(list(self.lines)[-TAIL_LINES:])
        if self.over:
            where = str(getattr(self.log_file, "name", "")) or NOT_LOGGED if self.log_file is not None else NOT_LOGGED
            raise OutputTooLong(self.args, tail, what or self.program, self.over, where)
        done = Completed(tuple(self.args), self.proc.returncode, "".join(self.lines), self.timed_out, seconds, self.size, self.cut)
        if check and (self.timed_out or self.proc.returncode != 0):
            raise CommandFailed(self.args, self.proc.returncode, tail, what=what or self.program)
        return done


def _end_all(started: Sequence[_Started]) -> None:
    """Ctrl-C, SIGTERM or an error while programs run: every tree ends (the programs got SIGINT too, if it was
    Ctrl-C at a terminal; a moment to stop, then the whole tree goes), every output is closed."""
    end_trees([s.proc for s in started], grace=10.0)
    for s in started:
        s.close()


def run(
    argv: Sequence[str | os.PathLike[str]],
    *,
    cwd: str | os.PathLike[str] | None = None,
    env: Mapping[str, str] | None = None,
    timeout: float | None = None,
    check: bool = True,
    quiet: bool = False,
    log_file: IO[str] | None = None,
    on_line: Callable[[str], None] | None = None,
    what: str | None = None,
    stdin: Path | None = None,
) -> Completed:
    """Run ``argv`` to completion and return its combined output.

    ``log_file`` receives every line as it comes (a log that cannot be written ends the program and raises the OSError
    naming it); ``on_line`` is called per line. The environment is :func:`ci.environment.environment`'s unless ``env``
    is given (the key and witness taken out all the same); the working directory a fresh empty folder unless ``cwd``
    is given; ``stdin`` a file it reads. A timeout or Ctrl-C ends its whole tree (with ``check``, a timeout raises);
    what it orphaned is ended once it exits."""
    started: list[_Started] = []
    try:
        with signals_held():  # a signal as it starts: raised once the program is in ``started``, which is ended
            started.append(_Started(argv, cwd=cwd, env=env, quiet=quiet, log_file=log_file, on_line=on_line, stdin=stdin))
        started[0].wait(timeout)
    except BaseException:
        _end_all(started)
        raise
    return started[0].finish(check, what)


POLL = 0.01  # seconds between looks at programs run together


def run_together(argvs: Sequence[Sequence[str | os.PathLike[str]]], *, timeout: float | None = None, quiet: bool = False) -> list[Completed]:
    """Run every argv at once, each with its own ``timeout`` from its start, and return their outputs in order; as
    :func:`run` with ``check=False``, and each :class:`Completed` has its program's own seconds. Ctrl-C, SIGTERM or
    a program that cannot start ends every tree before it is raised."""
    started: list[_Started] = []
    try:
        for argv in argvs:
            with signals_held():  # SIGTERM as a program starts left it running: it was not in ``started`` yet
                started.append(_Started(argv, quiet=quiet))
        while not all([s.poll(timeout) for s in started]):  # a list: every program is looked at, each round
            time.sleep(POLL)
    except BaseException:
        _end_all(started)
        raise
    for s in started:
        s.close()  # every output closed before any finish raises (a program that died of Ctrl-C's SIGINT)
    return [s.finish(False, None) for s in started]


def _close_output(proc: subprocess.Popen[bytes], reader: threading.Thread) -> None:
    # Popen leaves its pipe open without a with-block: an unclosed file is a ResourceWarning, an error under pytest's
    # filterwarnings. A reader still blocked on it (a grandchild holding the pipe) keeps it.
    if proc.stdout is not None and not reader.is_alive():
        proc.stdout.close()


def open_log(path: Path, *, append: bool = False, binary: bool = False) -> IO[Any]:
    """A log at ``path`` opened for writing, never through a link: a link (or a pipe, a device) at its name is replaced
    by a fresh file, what it pointed to left as it was (the crash log, test-backend-ops' and llama-server's logs had
    written outside the checkout through a planted one); ``append`` keeps a regular file's lines. A folder there is an
    OSError naming it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with contextlib.suppress(FileNotFoundError):
        if not stat.S_ISREG(os.lstat(path).st_mode) and not stat.S_ISDIR(os.lstat(path).st_mode):
            os.unlink(path)
    mode = ("a" if append else "w") + ("b" if binary else "")

    def opener(name: str, flags: int) -> int:
        return os.open(name, flags | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)  # a link planted since the look: ELOOP, named

    try:
        return open(path, mode, encoding=None if binary else "utf-8", opener=opener)
    except OSError as exc:
        raise OSError(exc.errno, exc.strerror, str(path)) from None


def output_of(argv: Sequence[str | os.PathLike[str]], **kwargs: object) -> str:
    """Stdout and stderr of a quick command that must succeed (a version query, ``hipconfig``)."""
    return run(argv, quiet=True, **kwargs).output  # type: ignore[arg-type]
