"""One way to run an external program (after nox's ``command.run``).

Every program goes through :func:`run`: an argv list, never a string or ``shell=True``; the program is resolved
before it starts; the quoted command line is logged; a failure raises :class:`CommandFailed` with the tail. It runs
with the one environment of :func:`environment` (an allow-list, never the ledger's key), in a fresh empty folder unless
it is given one, and nothing it starts outlives it: this process is the child subreaper of what it starts (Linux), so
an orphan comes back here, known by its tree's mark (:data:`TREE_VAR`), and ends with its tree.
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import os
import re
import secrets
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import weakref
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import IO, Any

import psutil

from ci.errors import CommandFailed, Refused, ToolchainError

log = logging.getLogger("onebit-ci")

TAIL_LINES = 40

# Messages, shared with the tests that match on them (tests/support/messages.py)
NOT_ON_PATH = "{program}: not found on PATH; install it or put it on PATH"
LOADS_CODE_SET = "{name} is set: it loads code into every program a gate or a build starts, whose results would not be the build's; unset it"
FLAG_FROM_ENV = "{name} is set: llama-server takes it as a flag that no gate planned; unset it (a gate's flags are its own)"
JUDGES_OWN = "it changes how the gates themselves run and judge (pytest's options, Python's start-up, this tool's own settings)"
NOT_PASSABLE = "ONEBIT_PASS_ENV names {name}: " + JUDGES_OWN + "; take it out"
NOT_ABSOLUTE = (
    "{name}: the entry '{entry}' is not an absolute path: an empty or relative entry is searched from the working "
    "directory, where a planted library loads; give absolute paths only"
)

# -- the environment of every program -------------------------------------------------------------------------------
# Every program a gate or a build starts (cmake running the fork's CMakeLists, test-backend-ops, test-llama-archs,
# 1bit serve and its llama-server) is given these from this process's environment, and no other variable: a fork
# commit or a patch read ONEBIT_LEDGER_KEY from the whole environment it was given, and could sign any record.
# Passed, not recorded: where programs and the home folder are, the locale, the temporary folder.
BASE = ("PATH", "HOME", "LANG", "TMPDIR")
BASE_PREFIXES = ("LC_",)
# Passed and recorded, as every gate record's criterion ``environment`` (ci/release/binding.py), so that a pass under
# one setting never counts for another: what changes what a program computes or loads. ggml's and llama.cpp's knobs
# (GGML_VK_DISABLE_GRAPH_OPTIMIZE turns the MTP leg's verdict on Vulkan: docs/gates.md), the loader's, the GPU stacks'
# (Vulkan and its Mesa drivers, HIP/ROCm, CUDA), OpenMP's and BLAS's threads; and the launcher's Python path.
RESULT_PREFIXES = (
    "GGML_", "LLAMA_", "LD_", "VK_", "HIP_", "HSA_", "ROCR_", "ROCM_", "ROCBLAS_", "HIPBLASLT_", "AMD_", "GPU_",
    "CUDA_", "NVIDIA_", "MESA_", "RADV_", "OMP_", "GOMP_", "KMP_", "OPENBLAS_",
)  # fmt: skip
RESULT_NAMES = ("PYTHONPATH", "DRI_PRIME")
# Names the operator passes on besides (split on commas and blanks): passed and recorded as the families are. Never
# the judges' own: PYTEST_ADDOPTS="-k hadamard" passed that way made the route gate's record 18/18 of 180 (a hostile
# pass, 2026-12-05), so pytest's, Python's start-up (but PYTHONPATH) and this tool's own variables are refused there,
# and in pins.yaml's ``environment`` (ci.pin.pins), which names them for every machine.
PASS_VAR = "ONEBIT_PASS_ENV"
NOT_PASSABLE_NAMES = re.compile(r"PYTEST_\w*|PY_COLORS|PYTHON(?!PATH$)\w*|ONEBIT_\w*|NOX_\w*")
# Never given to any program, however it is started or named: whoever reads the key can sign any ledger record, and the
# witness names the file that stops a rewind (ci/release/ledger.py's KEY_VAR and WITNESS_VAR).
NEVER_PASSED = ("ONEBIT_LEDGER_KEY", "ONEBIT_LEDGER_WITNESS")
# Refused: no program starts while one is set (named or in a family). They make a loader take code from where they
# point (ld.so's own, ggml's out-of-tree backends, the Vulkan loader's layers, the ROCm and CUDA tool and injection
# libraries; serve/launch.py drops the same for a gated llama-server), or give llama-server flags past the gate's plan.
LOADS_CODE = re.compile(
    r"LD_PRELOAD|LD_AUDIT|GGML_BACKEND_PATH|VK_(?:LAYER_PATH|ADD_LAYER_PATH|IMPLICIT_LAYER_PATH|ADD_IMPLICIT_LAYER_PATH|"
    r"INSTANCE_LAYERS|LOADER_LAYERS_ENABLE)|HSA_TOOLS_LIB|ROCP_TOOL_LIBS?|ROCTX_LIB|HIP_[A-Z_]*TOOL[A-Z_]*|"
    r"CUDA_INJECTION64_PATH|NVTX_INJECTION64_PATH"
)
FLAGS_FROM_ENV = re.compile(r"LLAMA_ARG_\w*")
# Lists of paths a loader searches, or files it loads (the Vulkan driver, which the H200's profile names): each entry
# absolute. An empty or relative one is the working directory, where a planted libgcc_s.so.1 ran inside the gates.
PATH_LISTS = ("LD_LIBRARY_PATH", "VK_DRIVER_FILES", "VK_ICD_FILENAMES", "VK_ADD_DRIVER_FILES", "PYTHONPATH")
# Each program's tree: a mark in its environment that its descendants inherit, so an orphan adopted here is known
TREE_VAR = "ONEBIT_CI_TREE"


# What the job declares (its profile's variables, pins.yaml's ``environment``), once the command has resolved it
# (ci.commands.job): passed and recorded as the families are, for every program of the job whichever stage starts it.
# A gate starts most of its programs with the default environment, and the vulkan profile's VULKAN_SDK reached its
# build and its records but none of its gates' programs: the build and the gates now run in one environment.
_JOB_DECLARED: list[frozenset[str]] = [frozenset()]


def declare(names: Iterable[str]) -> None:
    """The names the job declares, from now on: this process runs one command's job, and a command resolving another
    replaces them. Each is checked where it is declared (a profile, pins.yaml)."""
    _JOB_DECLARED[0] = frozenset(names)


def declared_by_job() -> frozenset[str]:
    return _JOB_DECLARED[0]


def passed_on(name: str, declared: Collection[str] = ()) -> bool:
    """Whether a variable ``name`` of this process's environment is given to the programs it starts."""
    return name not in NEVER_PASSED and (name in BASE or name.startswith(BASE_PREFIXES) or recorded(name, declared))


def recorded(name: str, declared: Collection[str] = ()) -> bool:
    """Whether ``name`` is one that can change a result: passed on, and recorded in every gate record. ``declared``:
    names declared beside the job's (:func:`declare`)."""
    return name not in NEVER_PASSED and (
        name.startswith(RESULT_PREFIXES) or name in RESULT_NAMES or name in declared or name in _JOB_DECLARED[0]
    )


def not_passable(name: str) -> bool:
    """Whether ``name`` is one of the judges' own variables, which no list of names to pass on may hold."""
    return NOT_PASSABLE_NAMES.fullmatch(name) is not None or name in NEVER_PASSED


def _declared(source: Mapping[str, str], declared: Iterable[str]) -> frozenset[str]:
    named = source.get(PASS_VAR, "").replace(",", " ").split()
    for name in named:
        if not_passable(name):
            raise Refused(NOT_PASSABLE.format(name=name))
    return frozenset((*declared, *named))


def environment(
    source: Mapping[str, str] | None = None, *, declared: Iterable[str] = (), given: Mapping[str, str] | Iterable[tuple[str, str]] = ()
) -> dict[str, str]:
    """The environment of a program a gate or a build starts: from ``source`` (default: this process's environment)
    the variables :func:`passed_on` names, the declared ones (the job's, :func:`declare`; ``declared``, the build's;
    :data:`PASS_VAR`'s) among them, then
    ``given`` (what the caller sets: the toolchain's ROCM_PATH, the launcher's bytecode folder) over them. Never the
    ledger's key or witness. A variable that loads code (:data:`LOADS_CODE`), a flag of llama-server's, or a path
    list with an empty or relative entry is refused, and nothing starts."""
    source = os.environ if source is None else source
    names = _declared(source, declared)
    env = {k: v for k, v in source.items() if passed_on(k, names)}
    env.update(given)
    for name in NEVER_PASSED:
        env.pop(name, None)
    for name, value in env.items():
        if LOADS_CODE.fullmatch(name):
            raise Refused(LOADS_CODE_SET.format(name=name))
        if FLAGS_FROM_ENV.fullmatch(name):
            raise Refused(FLAG_FROM_ENV.format(name=name))
        if name in PATH_LISTS:
            entry = next((e for e in value.split(os.pathsep) if not os.path.isabs(e)), None)
            if entry is not None:
                raise Refused(NOT_ABSOLUTE.format(name=name, entry=entry))
    return env


def recorded_environment(source: Mapping[str, str] | None = None, declared: Iterable[str] = ()) -> dict[str, str]:
    """What a gate record carries of the environment its programs ran in (the criterion ``environment``): every
    variable of ``source`` that can change a result (:func:`recorded`: the families, the job's declared names,
    ``declared`` and :data:`PASS_VAR`'s), by name, sorted."""
    source = os.environ if source is None else source
    names = _declared(source, declared)
    return {k: source[k] for k in sorted(source) if recorded(k, names)}


# -- the trees of what this process starts, and their orphans -------------------------------------------------------
_PR_SET_CHILD_SUBREAPER = 36
_SUBREAPER: list[bool] = []  # set once: whether this process adopts the orphans of what it starts
_SUBREAPER_LOCK = threading.Lock()
_ISSUED: set[str] = set()  # the marks this process gave: a mark inherited from whoever started it is none of them
_MARKS: weakref.WeakKeyDictionary[subprocess.Popen[Any], str] = weakref.WeakKeyDictionary()
_SEEN_MARKS: dict[tuple[int, float], str] = {}  # (pid, start): the mark read from a program's environment


_PR_SET_DUMPABLE = 4


def hide_secrets() -> bool:
    """With the ledger's key or witness in this process's environment, make it not dumpable (Linux's prctl
    PR_SET_DUMPABLE 0): its /proc files are then root's, and no other process of this user reads its environment or
    its memory. The allow-list keeps the key out of every program's own environment, but a fork's cmake walking up its
    parents read it from ``/proc/<ppid>/environ`` (a hostile pass). A program this process starts is dumpable again
    (execve) and holds no key. Whether it was done."""
    if not any(os.environ.get(name) for name in NEVER_PASSED) or not sys.platform.startswith("linux"):
        return False
    with contextlib.suppress(OSError, AttributeError):
        return bool(ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_DUMPABLE, 0, 0, 0, 0) == 0)
    return False


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
        self.scratch = tempfile.mkdtemp(prefix="onebit-cwd-") if cwd is None else None
        source = stdin.open("rb") if stdin is not None else None
        try:
            self.proc = subprocess.Popen(
                args,
                cwd=self.scratch or cwd,
                env=chosen,
                stdin=source if source is not None else subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
                errors="replace",
                bufsize=1,
            )
        except BaseException:
            self._remove_scratch()
            raise
        finally:
            if source is not None:
                source.close()
        _MARKS[self.proc] = self.mark
        self.started = time.monotonic()
        self.ended: float | None = None
        self.timed_out = False
        self.lines: list[str] = []
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
                try:
                    on_line(line.rstrip("\n"))
                except OSError as exc:  # the progress's reader is gone (nox -s build | head -1): stop reporting, end
                    on_line = None  # the program and keep draining; the error is raised in the caller's thread
                    self.reported.append(exc)
                    end_tree(self.proc, grace=2.0)

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
    forever, and raises the OSError naming the log. The program's environment is :func:`environment`'s, or ``env``
    when given (build it with :func:`environment`; the ledger's key and witness are taken out of it all the same); its
    working directory a fresh empty folder, removed afterwards, unless ``cwd`` is given; ``stdin`` is a file the
    program reads. A timeout ends the program's whole process tree and, with ``check``, raises; so does Ctrl-C (which
    the program also receives, in our process group), re-raised once the tree is gone. What the program orphaned is
    ended once it exits.
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
    """Stop ``procs`` and every process below them (SIGSTOP), reading the tree again until no new process appears;
    each descendant is added to ``frozen`` as it is stopped (the caller resumes them, whatever happens). A stopped process cannot fork: read once, a tree loses the child its shell
    forks while it is being signalled, and that child, orphaned, outlives the end of the tree (a ``sleep`` outlived
    SIGTERM so, on a loaded machine). What is below a live process of ``frozen`` is read too: the tree of a program
    that has exited since, and what a survivor of SIGTERM has started. So are the orphans of the trees (``marks``,
    default ``procs``' own) that this process adopted, and theirs. A program reaped already is not read: its pid
    may name another process by now, whose children were stopped and killed."""
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


def _close_output(proc: subprocess.Popen[str], reader: threading.Thread) -> None:
    # Popen leaves its pipe open without a with-block: an unclosed file is a ResourceWarning, an error under pytest's
    # filterwarnings. A reader still blocked on it (a grandchild holding the pipe) keeps it.
    if proc.stdout is not None and not reader.is_alive():
        proc.stdout.close()


def output_of(argv: Sequence[str | os.PathLike[str]], **kwargs: object) -> str:
    """Stdout and stderr of a quick command that must succeed (a version query, ``hipconfig``)."""
    return run(argv, quiet=True, **kwargs).output  # type: ignore[arg-type]
