"""The trees of the programs this process starts: each marked, its orphans adopted here (Linux's child subreaper)
and ended with it; and the signals that end them (SIGTERM and SIGHUP raised as Ctrl-C is).

A tree is frozen (SIGSTOP) before anything in it is signalled, so no child is born or orphaned unseen.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import secrets
import signal
import subprocess
import sys
import threading
import time
import weakref
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from types import FrameType
from typing import Any

import psutil

from ci.environment import NEVER_PASSED

# Each program's tree: a mark in its environment that its descendants inherit, so an orphan adopted here is known
TREE_VAR = "ONEBIT_CI_TREE"

_PR_SET_CHILD_SUBREAPER = 36
_SUBREAPER: list[bool] = []  # set once: whether this process adopts the orphans of what it starts
_SUBREAPER_LOCK = threading.Lock()
_ISSUED: set[str] = set()  # the marks this process gave: a mark inherited from whoever started it is none of them
_MARKS: weakref.WeakKeyDictionary[subprocess.Popen[Any], str] = weakref.WeakKeyDictionary()
_SEEN_MARKS: dict[tuple[int, float], str] = {}  # (pid, start): the mark read from a program's environment


def adopt_orphans() -> bool:
    """Make this process the child subreaper of what it starts (prctl PR_SET_CHILD_SUBREAPER; Linux, once): an orphan of
    a program's tree (a double fork with setsid, ``( sleep & )``) is reparented here, not to the machine's init, and
    :func:`end_trees` ends it with its tree (a llama-server's orphans had outlived a passing gate, 8 of them). Whether
    it is."""
    with _SUBREAPER_LOCK:
        if not _SUBREAPER:
            adopted = False
            if sys.platform.startswith("linux"):
                with contextlib.suppress(OSError, AttributeError):
                    adopted = ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0
            _SUBREAPER.append(adopted)
        return _SUBREAPER[0]


def tree_marked(env: Mapping[str, str]) -> dict[str, str]:
    """``env`` with a fresh mark of the tree its program starts (:data:`TREE_VAR`), the ledger's key and witness taken
    out whoever built it: every program this process starts is given one."""
    mark = secrets.token_hex(8)
    _ISSUED.add(mark)
    return {**{k: v for k, v in env.items() if k not in NEVER_PASSED}, TREE_VAR: mark}


def _mark_of(pid: int) -> str | None:
    """The mark of this process's issue that the process ``pid`` was started with, read once while it lives."""
    try:
        p = psutil.Process(pid)
        key = (pid, p.create_time())
        if key not in _SEEN_MARKS:
            _SEEN_MARKS[key] = p.environ().get(TREE_VAR, "")
        mark = _SEEN_MARKS[key]
    except psutil.Error:
        return None
    return mark if mark in _ISSUED else None


def _marks(procs: Sequence[subprocess.Popen[str] | subprocess.Popen[bytes]]) -> set[str]:
    """The marks of ``procs``' trees: as :func:`run` gave them, or read from a live one's environment (never from a
    program reaped already, whose pid may name another process by now)."""
    found = set()
    for proc in procs:
        mark = _MARKS.get(proc) or (_mark_of(proc.pid) if proc.returncode is None else None)
        if mark:
            found.add(mark)
    return found


def remember_mark(proc: subprocess.Popen[Any], mark: str) -> None:
    """``proc`` was started with the tree mark ``mark`` (:func:`tree_marked`)."""
    _MARKS[proc] = mark


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
    """The live descendants of ``pid``, with the orphans of its tree that this process adopted (:func:`adopt_orphans`;
    known by the mark ``pid`` was started with) and theirs."""
    mark = _mark_of(pid)
    return tuple(_below([pid], (), {mark} if mark else set()))


def wait_gone(processes: Iterable[Process], seconds: float, reaped: bool = False) -> None:
    """Until none of ``processes`` is alive (with ``reaped``: none is left even as a zombie that its adopter has
    not reaped yet), or ``seconds`` have passed. Those this process adopted are reaped here as they die."""
    processes = tuple(processes)
    deadline = time.monotonic() + seconds
    while True:
        _reap(processes)
        if not any(p.exists() if reaped else p.alive() for p in processes) or time.monotonic() >= deadline:
            return
        time.sleep(0.02)


def _reap(processes: Iterable[Process]) -> None:
    """Reap each of ``processes`` that is a dead child of this process: an orphan adopted here (a descendant of a
    program, never the program itself, whose Popen reaps it)."""
    for p in processes:
        if not p.alive() and p.exists():
            with contextlib.suppress(ChildProcessError, OSError):
                os.waitpid(p.pid, os.WNOHANG)


def end_orphans(mark: str, grace: float = 2.0) -> None:
    """End what a program that has exited left behind: the orphans of its tree (``mark``) adopted here, and theirs."""
    if _SUBREAPER and _SUBREAPER[0] and _adopted_children({mark}, ()):
        end_trees([], grace, marks={mark})


def end_tree(proc: subprocess.Popen[str] | subprocess.Popen[bytes], grace: float = 5.0) -> None:
    """End ``proc`` and every process below it: SIGTERM to all, SIGKILL to what is left after ``grace`` seconds;
    ``proc`` is reaped. The tree is frozen (:func:`freeze`) before anything is signalled, so a child orphaned by its
    parent's death is still found, and no child is born unseen. The server's stop (:class:`ci.gates.serving.llama.LlamaServer`) ends its tree with the same parts, and
    the tree it saw over the server's life."""
    end_trees([proc], grace)


FREEZE_ROUNDS = 100  # reads of a tree being stopped; each round stops what the one before found new


def freeze(
    procs: Sequence[subprocess.Popen[str] | subprocess.Popen[bytes]], frozen: list[Process], marks: Collection[str] | None = None
) -> None:
    """Stop ``procs`` and every process below them (SIGSTOP), reading the tree again until no new process appears
    (a stopped process cannot fork, so no child is born unseen); each descendant is added to ``frozen`` as it is stopped,
    for the caller to resume. Below a live process of ``frozen`` is read too, and the orphans of the trees ``marks``
    (default ``procs``' own) adopted here; a program reaped already is not (its pid may name another process now)."""
    marks = _marks(procs) if marks is None else marks
    live = []
    for proc in procs:
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                proc.send_signal(signal.SIGSTOP)
            live.append(proc)
    programs = {proc.pid for proc in procs}
    for _ in range(FREEZE_ROUNDS):
        new = _below([proc.pid for proc in live if proc.returncode is None], frozen, marks, programs)
        if not new:
            break
        for p in new:
            frozen.append(p)
            p.stop()


def _adopted_children(marks: Collection[str], programs: Collection[int]) -> list[int]:
    """This process's children that are orphans it adopted from the trees of ``marks``: not one of the ``programs``
    it started (each has a mark of its own), their environment carrying one of the marks. Read from the kernel's
    list of each thread's children, not from the whole process table."""
    if not marks:
        return []
    pids: set[int] = set()
    try:
        with os.scandir("/proc/self/task") as tasks:
            for task in tasks:
                with open(os.path.join(task.path, "children"), encoding="ascii") as fh:
                    pids |= {int(x) for x in fh.read().split()}
    except OSError:
        pids = {c.pid for c in _children_of_this_process()}
    return sorted(pid for pid in pids if pid not in programs and _mark_of(pid) in marks and _alive(pid))


def _alive(pid: int) -> bool:
    with contextlib.suppress(psutil.Error):
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    return False


def _children_of_this_process() -> list[psutil.Process]:
    with contextlib.suppress(psutil.Error):
        return list(psutil.Process().children())
    return []


def _below(roots: Sequence[int], known: Sequence[Process], marks: Collection[str] = (), programs: Collection[int] = ()) -> list[Process]:
    """The live processes below ``roots`` and below each live process of ``known``, and the orphans of the trees of
    ``marks`` that this process adopted and what is below them, less those ``known`` holds: one read of the process
    table, however many roots (2000 sleeps of a forking shell are 2000 roots)."""
    adopted = _adopted_children(marks, {*roots, *programs})
    table: dict[int, tuple[int, float, str]] = {}  # pid: (parent, start, name), of the processes alive
    for p in psutil.process_iter(["ppid", "create_time", "name", "status"]):
        info = p.info
        if info["status"] not in (None, psutil.STATUS_ZOMBIE) and info["ppid"] is not None and info["create_time"] is not None:
            table[p.pid] = (info["ppid"], info["create_time"], info["name"] or "")
    children: dict[int, list[int]] = {}
    for pid, (parent, _, _) in table.items():
        children.setdefault(parent, []).append(pid)
    seen = {(p.pid, p.start) for p in known}
    found = []
    for pid in adopted:
        if pid in table and (pid, table[pid][1]) not in seen:
            found.append(Process(pid, table[pid][1], table[pid][2]))
    todo = [*roots, *(p.pid for p in known if p.pid in table and table[p.pid][1] == p.start), *(p.pid for p in found)]
    visited = set(todo)
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


def end_trees(
    procs: Sequence[subprocess.Popen[str] | subprocess.Popen[bytes]], grace: float = 5.0, marks: Collection[str] | None = None
) -> None:
    """:func:`end_tree` for several programs at once: every tree is frozen (:func:`freeze`), then each process gets
    SIGTERM and is let go on (SIGCONT), all before any is waited for, so their grace periods overlap. What is left
    after ``grace`` seconds is frozen again, with what it has started since (a program that forks on SIGTERM), and
    gets SIGKILL. A tree holds the orphans of it that this process adopted (``marks``, default the programs' own)."""
    marks = _marks(procs) if marks is None else marks
    with signals_held():  # the whole teardown: a second Ctrl-C waits for it, as a second SIGTERM does
        everything: list[Process] = []
        try:
            freeze(procs, everything, marks)
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
            freeze(procs, everything, marks)
            for proc in procs:
                proc.kill()
            for p in everything:
                p.kill()
        finally:
            _resume(procs, everything)
        for proc in procs:
            proc.wait()
        wait_gone(everything, 5.0, reaped=True)


class Stopped(KeyboardInterrupt):
    """SIGTERM, raised as Ctrl-C's KeyboardInterrupt is (and ended as it is: exit 130), by :func:`sigterm_as_interrupt`."""


@contextlib.contextmanager
def sigterm_as_interrupt() -> Iterator[None]:
    """SIGTERM raises :class:`Stopped` for the block (in the main thread; elsewhere SIGTERM is left alone), so what a
    command puts back on Ctrl-C (bisect's checkout) is put back on SIGTERM too."""

    def handler(_signum: int, _frame: FrameType | None) -> None:
        raise Stopped

    try:
        old = signal.signal(signal.SIGTERM, handler)
    except ValueError:
        yield
        return
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, old)


@contextlib.contextmanager
def signals_ignored() -> Iterator[None]:
    """Ctrl-C and SIGTERM ignored for the block, which must finish (a checkout put back); the main thread only can
    set handlers, elsewhere nothing changes."""
    try:
        old = {s: signal.signal(s, signal.SIG_IGN) for s in (signal.SIGINT, signal.SIGTERM)}
    except ValueError:
        old = {}
    try:
        yield
    finally:
        for s, handler in old.items():
            signal.signal(s, handler)
