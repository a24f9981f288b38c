"""One way to run an external program (after nox's ``command.run``).

Every program goes through :func:`run`: an argv list, never a string or ``shell=True``; the program is resolved
before it starts; the quoted command line is logged; a failure raises :class:`CommandFailed` with the tail.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shlex
import shutil
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import IO

import psutil

from ci.errors import CommandFailed, ToolchainError

log = logging.getLogger("onebit-ci")

TAIL_LINES = 40

# Messages, shared with the tests that match on them (tests/support/messages.py)
NOT_ON_PATH = "{program}: not found on PATH; install it or put it on PATH"


@dataclass(frozen=True)
class Completed:
    argv: tuple[str, ...]
    returncode: int
    output: str
    timed_out: bool = False
    seconds: float = 0.0  # from its start until it was seen to end


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
        search = env.get("PATH") if env is not None else None
        args[0] = resolve(args[0], search)
        self.program = os.fspath(argv[0])
        self.args = args
        self.log_file = log_file
        if not quiet:
            log.info("$ %s", shlex.join([self.program, *args[1:]]))
        source = stdin.open("rb") if stdin is not None else None
        try:
            self.proc = subprocess.Popen(
                args,
                cwd=cwd,
                env=dict(env) if env is not None else None,
                stdin=source if source is not None else subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
                errors="replace",
                bufsize=1,
            )
        finally:
            if source is not None:
                source.close()
        self.started = time.monotonic()
        self.ended: float | None = None
        self.timed_out = False
        self.lines: list[str] = []
        self.broken: list[OSError] = []  # the log's write error, raised once the program is gone
        self.reader = threading.Thread(target=self._pump, args=(on_line,), daemon=True)
        try:
            self.reader.start()
        except BaseException:  # no thread left to start: the program, started, is not left behind
            end_tree(self.proc)
            if self.proc.stdout is not None:
                self.proc.stdout.close()
            raise

    def _pump(self, on_line: Callable[[str], None] | None) -> None:
        if self.proc.stdout is None:
            return
        for line in self.proc.stdout:
            self.lines.append(line)
            if self.log_file is not None and not self.broken:
                try:
                    self.log_file.write(line)
                except OSError as exc:
                    self.broken.append(exc)
                    end_tree(self.proc, grace=2.0)  # this reader ends it, then drains what is left; a full pipe waits 2 s at most
            if on_line is not None:
                on_line(line.rstrip("\n"))

    def poll(self, timeout: float | None) -> bool:
        """Whether it has ended (a program past its ``timeout`` seconds is ended here, its whole tree)."""
        if self.ended is not None:
            return True
        if self.proc.poll() is None:
            if timeout is None or time.monotonic() - self.started < timeout:
                return False
            self.timed_out = True
            end_tree(self.proc)
        self.ended = time.monotonic()
        return True

    def wait(self, timeout: float | None) -> None:
        try:
            self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.timed_out = True
            end_tree(self.proc)
        self.ended = time.monotonic()

    def close(self) -> None:
        self.reader.join(timeout=5)
        _close_output(self.proc, self.reader)

    def finish(self, check: bool, what: str | None) -> Completed:
        self.close()
        if self.proc.returncode == -signal.SIGINT:
            # a terminal's Ctrl-C reaches the whole foreground group: the program may die of it before this process's own
            # handler runs, and then it is the interrupt, not a failed command (as a shell treats a child killed by SIGINT)
            raise KeyboardInterrupt
        if self.broken:
            exc = self.broken[0]
            name = getattr(self.log_file, "name", None)
            raise OSError(exc.errno, exc.strerror, str(name) if name is not None else exc.filename) from None
        seconds = (self.ended or time.monotonic()) - self.started
        done = Completed(tuple(self.args), self.proc.returncode, "".join(self.lines), self.timed_out, seconds)
        if check and (self.timed_out or self.proc.returncode != 0):
            raise CommandFailed(self.args, self.proc.returncode, "".join(self.lines[-TAIL_LINES:]), what=what or self.program)
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

    ``log_file`` receives every line as it comes; ``on_line`` is called per line (progress display). A log that
    cannot be written (a full disk) ends the program, whose output would otherwise fill the pipe and block it
    forever, and raises the OSError naming the log. ``env`` replaces the environment when given; ``stdin`` is a
    file the program reads. A timeout ends the program's whole process tree and, with ``check``, raises; so does
    Ctrl-C (which the program also receives, in our process group), re-raised once the tree is gone.
    """
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


class Terminated(KeyboardInterrupt):
    """SIGTERM or SIGHUP, raised where Ctrl-C's KeyboardInterrupt is: a CI runner cancels a job with SIGTERM, a
    closed terminal sends SIGHUP, and each must end what Ctrl-C ends (the process tree, the same roll-back). Unlike
    Ctrl-C it reaches this process alone, so :func:`run` ends the program's tree itself."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum

    @property
    def exit_code(self) -> int:
        return 128 + self.signum


TERMINATING = (signal.SIGTERM, signal.SIGHUP)


@contextlib.contextmanager
def signals_as_interrupt() -> Iterator[None]:
    """SIGTERM and SIGHUP raise :class:`Terminated` (a KeyboardInterrupt) for the block. A second one while the first
    is being handled is ignored, so the roll-back it started finishes."""

    def handler(signum: int, _frame: FrameType | None) -> None:
        for s in TERMINATING:
            signal.signal(s, signal.SIG_IGN)
        raise Terminated(signum)

    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {s: signal.signal(s, handler) for s in TERMINATING}
    try:
        yield
    finally:
        for s, old in previous.items():
            signal.signal(s, old)


@dataclass(frozen=True)
class Process:
    """A process known by pid and start time, so a reused pid is never mistaken for it."""

    pid: int
    start: float  # psutil's create_time
    command: str = ""

    def _live(self, zombie: bool = False) -> psutil.Process | None:
        """Its psutil handle while its pid still names it, alive (or, with ``zombie``, dead but not reaped yet)."""
        try:
            p = psutil.Process(self.pid)
            return p if p.create_time() == self.start and (zombie or p.status() != psutil.STATUS_ZOMBIE) else None
        except psutil.Error:
            return None

    def alive(self) -> bool:
        return self._live() is not None

    def exists(self) -> bool:
        """Alive or a zombie not yet reaped: its pid still names it."""
        return self._live(zombie=True) is not None

    def _send(self, signum: int) -> None:
        p = self._live()
        if p is not None:
            with contextlib.suppress(psutil.Error):
                p.send_signal(signum)

    def terminate(self) -> None:
        self._send(signal.SIGTERM)

    def stop(self) -> None:
        self._send(signal.SIGSTOP)

    def resume(self) -> None:
        self._send(signal.SIGCONT)

    def kill(self) -> None:
        self._send(signal.SIGKILL)


def descendants(pid: int) -> tuple[Process, ...]:
    """The live descendants of ``pid``."""
    try:
        children = psutil.Process(pid).children(recursive=True)
    except psutil.Error:
        return ()
    found = []
    for child in children:
        with contextlib.suppress(psutil.Error):
            if child.status() != psutil.STATUS_ZOMBIE:
                found.append(Process(child.pid, child.create_time(), child.name()))
    return tuple(sorted(found, key=lambda x: x.pid))


def wait_gone(processes: Iterable[Process], seconds: float, reaped: bool = False) -> None:
    """Until none of ``processes`` is alive (with ``reaped``: none is left even as a zombie that its adopter has
    not reaped yet), or ``seconds`` have passed."""
    processes = tuple(processes)
    deadline = time.monotonic() + seconds
    while any(p.exists() if reaped else p.alive() for p in processes) and time.monotonic() < deadline:
        time.sleep(0.02)


def end_tree(proc: subprocess.Popen[str] | subprocess.Popen[bytes], grace: float = 5.0) -> None:
    """End ``proc`` and every process below it: SIGTERM to all, SIGKILL to what is left after ``grace`` seconds;
    ``proc`` is reaped. The tree is frozen (:func:`freeze`) before anything is signalled, so a child orphaned by its
    parent's death is still found, and no child is born unseen. The server's stop (:class:`ci.gates.serving.llama.LlamaServer`) ends its tree with the same parts, and
    the tree it saw over the server's life."""
    end_trees([proc], grace)


FREEZE_ROUNDS = 100  # reads of a tree being stopped; each round stops what the one before found new


def freeze(procs: Sequence[subprocess.Popen[str] | subprocess.Popen[bytes]], frozen: list[Process]) -> None:
    """Stop ``procs`` and every process below them (SIGSTOP), reading the tree again until no new process appears;
    each descendant is added to ``frozen`` as it is stopped (the caller resumes them, whatever happens). A stopped process cannot fork: read once, a tree loses the child its shell
    forks while it is being signalled, and that child, orphaned, outlives the end of the tree (a ``sleep`` outlived
    SIGTERM so, on a loaded machine). What is below a live process of ``frozen`` is read too: the tree of a program
    that has exited since, and what a survivor of SIGTERM has started. A program reaped already is not read: its pid
    may name another process by now, whose children were stopped and killed."""
    live = []
    for proc in procs:
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                proc.send_signal(signal.SIGSTOP)
            live.append(proc)
    for _ in range(FREEZE_ROUNDS):
        new = _below([proc.pid for proc in live if proc.returncode is None], frozen)
        if not new:
            break
        for p in new:
            frozen.append(p)
            p.stop()


def _below(roots: Sequence[int], known: Sequence[Process]) -> list[Process]:
    """The live processes below ``roots`` and below each live process of ``known``, less those ``known`` holds: one
    read of the process table, however many roots (2000 sleeps of a forking shell are 2000 roots)."""
    table: dict[int, tuple[int, float, str]] = {}  # pid: (parent, start, name), of the processes alive
    for p in psutil.process_iter(["ppid", "create_time", "name", "status"]):
        info = p.info
        if info["status"] not in (None, psutil.STATUS_ZOMBIE) and info["ppid"] is not None and info["create_time"] is not None:
            table[p.pid] = (info["ppid"], info["create_time"], info["name"] or "")
    children: dict[int, list[int]] = {}
    for pid, (parent, _, _) in table.items():
        children.setdefault(parent, []).append(pid)
    seen = {(p.pid, p.start) for p in known}
    todo = [*roots, *(p.pid for p in known if p.pid in table and table[p.pid][1] == p.start)]
    visited = set(todo)
    found = []
    while todo:
        for child in children.get(todo.pop(), ()):
            if child not in visited:
                visited.add(child)
                todo.append(child)
                _, start, name = table[child]
                if (child, start) not in seen:
                    found.append(Process(child, start, name))
    return sorted(found, key=lambda x: x.pid)


@contextlib.contextmanager
def signals_held() -> Iterator[None]:
    """SIGINT, SIGTERM and SIGHUP held back for the block, then delivered to the handlers there were before it (in the
    main thread; elsewhere the block runs as it is). Between a tree's SIGSTOP and its SIGCONT an interrupt would
    leave processes stopped for good, so :func:`end_trees` freezes and lets go under it."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    held: list[int] = []

    def hold(signum: int, _frame: FrameType | None) -> None:
        held.append(signum)

    previous = {s: signal.signal(s, hold) for s in (signal.SIGINT, *TERMINATING)}
    try:
        yield
    finally:
        _put_back(list(previous.items()))
        if held:
            signal.raise_signal(held[0])  # its own handler now: Ctrl-C's KeyboardInterrupt, or Terminated


def _put_back(handlers: Sequence[tuple[int, Callable[[int, FrameType | None], object] | int | None]]) -> None:
    """Each handler put back, even when a signal raises as the one before is (Ctrl-C the moment SIGINT's handler was
    back left SIGTERM's holding, and every later SIGTERM was swallowed)."""
    if handlers:
        (signum, handler), *rest = handlers
        try:
            signal.signal(signum, handler)
        finally:
            _put_back(rest)


def _resume(procs: Sequence[subprocess.Popen[str] | subprocess.Popen[bytes]], frozen: Sequence[Process]) -> None:
    """Never leave a process stopped: SIGTERM waits for SIGCONT, and a stopped program is waited on forever."""
    for p in frozen:
        p.resume()
    for proc in procs:
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                proc.send_signal(signal.SIGCONT)


def end_trees(procs: Sequence[subprocess.Popen[str] | subprocess.Popen[bytes]], grace: float = 5.0) -> None:
    """:func:`end_tree` for several programs at once: every tree is frozen (:func:`freeze`), then each process gets
    SIGTERM and is let go on (SIGCONT), all before any is waited for, so their grace periods overlap. What is left
    after ``grace`` seconds is frozen again, with what it has started since (a program that forks on SIGTERM), and
    gets SIGKILL."""
    with signals_held():  # the whole teardown: a second Ctrl-C waits for it, as a second SIGTERM does
        everything: list[Process] = []
        try:
            freeze(procs, everything)
            for p in everything:
                p.terminate()
            for proc in procs:
                if proc.poll() is None:
                    with contextlib.suppress(ProcessLookupError):
                        proc.terminate()
        finally:
            _resume(procs, everything)
        deadline = time.monotonic() + grace
        wait_gone(everything, grace)
        for proc in procs:
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=max(0.0, deadline - time.monotonic()))
        try:
            for p in everything:
                p.stop()
            freeze(procs, everything)
            for proc in procs:
                proc.kill()
            for p in everything:
                p.kill()
        finally:
            _resume(procs, everything)
        for proc in procs:
            proc.wait()
        wait_gone(everything, 5.0, reaped=True)


def _close_output(proc: subprocess.Popen[str], reader: threading.Thread) -> None:
    # Popen leaves its pipe open without a with-block: an unclosed file is a ResourceWarning, an error under pytest's
    # filterwarnings. A reader still blocked on it (a grandchild holding the pipe) keeps it.
    if proc.stdout is not None and not reader.is_alive():
        proc.stdout.close()


def output_of(argv: Sequence[str | os.PathLike[str]], **kwargs: object) -> str:
    """Stdout and stderr of a quick command that must succeed (a version query, ``hipconfig``)."""
    return run(argv, quiet=True, **kwargs).output  # type: ignore[arg-type]
