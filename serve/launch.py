"""Running llama-server: start it, forward SIGINT/SIGTERM/SIGHUP to it, reap it, return its exit status.

The child has its own process group, so serve passes a Ctrl-C on once (a second SIGINT is llama-server's "stop
now"); on Linux it gets SIGTERM should serve die. Under ``--require-gated`` what runs is a private copy of the judged
files (:func:`private_copy`), that directory its working directory and only library path (:func:`gated_env`): a path
hashed then run can change in between, a copy cannot, and as ld.so and ggml open libraries by name, only such a
directory loads just what was hashed.
"""

from __future__ import annotations

import contextlib
import ctypes
import hashlib
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import FrameType

from serve import elf
from serve.errors import NoServer, Refused, ServeError

PRIVATE_PREFIX = "onebit-serve-"
PROGRAM = "llama-server"
# variables that make a loader take code from where the user points: ld.so's own, ggml's out-of-tree backend, the
# Vulkan loader's drivers and layers, the ROCm and CUDA tool and injection libraries, the OpenCL vendors
UNSAFE_ENV = re.compile(
    r"LD_[A-Z_]*|GGML_BACKEND_PATH|VK_(?:ICD_FILENAMES|DRIVER_FILES|ADD_DRIVER_FILES|LAYER_PATH|ADD_LAYER_PATH|"
    r"IMPLICIT_LAYER_PATH|ADD_IMPLICIT_LAYER_PATH|INSTANCE_LAYERS|LOADER_LAYERS_ENABLE)|HSA_TOOLS_LIB|ROCP_TOOL_LIBS?|"
    r"ROCTX_LIB|HIP_[A-Z_]*TOOL[A-Z_]*|CUDA_INJECTION64_PATH|NVTX_INJECTION64_PATH|OCL_ICD_VENDORS|OPENCL_VENDOR_PATH"
)

# Messages, shared with the tests that match on them (tests/support/messages.py)
COPY_DIFFERS = "{path}: sha256 {got} as copied is not the {want} that was judged (the file changed while serve read it)"
NO_PRIVATE_DIRECTORY = "no directory to run a private copy from ({tried}): each is missing, not this user's, or mounted noexec"
SHADOWED = (
    "{file}: its {tag} entry {entry} is searched before or besides serve's private directory and holds {name}, "
    "which would load instead of a judged file; build with RUNPATH $ORIGIN (-DCMAKE_BUILD_WITH_INSTALL_RPATH=ON -DCMAKE_INSTALL_RPATH=$ORIGIN)"
)
DROPPED = "--require-gated: not passed to llama-server: {names} (they make a loader take code the gates never judged)"
PRIVATE = "--require-gated: running a private copy of llama-server and {count} libraries, hashed as copied, from {directory}"

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


def run(argv: Sequence[str], env: Mapping[str, str], on_start: Callable[[int], None] | None = None, cwd: Path | None = None) -> int:
    """Run ``argv`` with exactly ``env`` (in ``cwd``); return its exit status once it has been reaped."""
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
            child = subprocess.Popen(list(argv), env=dict(env), stdin=subprocess.DEVNULL, preexec_fn=_child_setup(), cwd=cwd)
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


# -- the private copy of a gated llama-server ----------------------------------------------------------------------


@dataclass(frozen=True)
class Judged:
    """One file to copy: where it is now, the name it takes in the copy (ld.so's), and the sha256 it must have."""

    path: Path
    name: str
    sha256: str


def _private_parent(environ: Mapping[str, str]) -> Path:
    """A directory to make the private one in: this user's own, or one whose sticky bit stops others from moving
    what is in it, and not mounted noexec (where no copy could run)."""
    tried: list[str] = []
    for candidate in (environ.get("XDG_RUNTIME_DIR", ""), tempfile.gettempdir(), str(Path.home() / ".cache")):
        if not candidate or candidate in tried:
            continue
        tried.append(candidate)
        try:
            st = os.stat(candidate)
            noexec = bool(os.statvfs(candidate).f_flag & getattr(os, "ST_NOEXEC", 8))
        except OSError:
            continue
        others_can_move = st.st_uid != os.getuid() and not st.st_mode & 0o1000
        if not noexec and not others_can_move:
            return Path(candidate)
    raise Refused(NO_PRIVATE_DIRECTORY.format(tried=", ".join(tried)), "--require-gated")


def _copy_hashed(item: Judged, directory: Path, mode: int) -> None:
    """``item`` copied into ``directory`` under its name, hashed from the bytes written; Refused when they are not the
    judged ones (the copy is then left to the directory's removal)."""
    digest = hashlib.sha256()
    source = os.open(item.path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        target = os.open(directory / item.name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        try:
            while block := os.read(source, 1 << 20):
                digest.update(block)
                view = memoryview(block)
                while view:
                    view = view[os.write(target, view) :]
            os.fchmod(target, mode)
        finally:
            os.close(target)
    finally:
        os.close(source)
    got = digest.hexdigest()
    if got != item.sha256:
        raise Refused(COPY_DIFFERS.format(path=item.path, got=got[:12], want=item.sha256[:12]), "--require-gated")


@contextlib.contextmanager
def private_copy(program: Judged, libraries: Sequence[Judged], environ: Mapping[str, str]) -> Iterator[Path]:
    """A fresh directory only this user can write, holding llama-server and each library under the name ld.so looks
    for, copied from the bytes hashed as they were read (not the paths read again): what runs is what was judged.
    Removed when the block ends."""
    directory = Path(tempfile.mkdtemp(prefix=PRIVATE_PREFIX, dir=_private_parent(environ)))  # mode 0700
    try:
        _copy_hashed(Judged(program.path, PROGRAM, program.sha256), directory, 0o500)
        for lib in libraries:
            _copy_hashed(lib, directory, 0o400)
        os.chmod(directory, 0o500)  # nothing more goes in: ggml opens every libggml-*.so it finds here
        yield directory
    finally:
        with contextlib.suppress(OSError):
            os.chmod(directory, 0o700)
        shutil.rmtree(directory, ignore_errors=True)


def gated_env(environ: Mapping[str, str], directory: Path) -> tuple[dict[str, str], tuple[str, ...]]:
    """The environment of a gated llama-server: ``environ`` without what makes a loader take code from elsewhere,
    with the private directory as the only library path (ld.so searches it before a RUNPATH); and what was dropped."""
    dropped = tuple(sorted(k for k in environ if UNSAFE_ENV.fullmatch(k)))
    env = {k: v for k, v in environ.items() if not UNSAFE_ENV.fullmatch(k)}
    env["LD_LIBRARY_PATH"] = str(directory)
    return env, dropped


def shadowing(directory: Path, root: Path, names: Sequence[str]) -> list[str]:
    """What could still load in place of a copy, or beside them from the build: a DT_RPATH entry (searched before
    LD_LIBRARY_PATH) holding a judged name, or a search path entry into the build holding a name a copy needs that
    was not judged (a system library's name planted there). Each one line; empty when nothing can."""
    out: list[str] = []
    judged = set(names)
    for copy in sorted(directory.iterdir()):
        try:
            dyn = elf.read_dynamic(copy)
        except (elf.NotElf, OSError):
            continue  # a script: nothing of its own is loaded
        for tag, entries in (("RPATH", dyn.rpath or ()), ("RUNPATH", dyn.runpath or ())):
            for entry in entries:
                expanded = entry.replace("${ORIGIN}", str(directory)).replace("$ORIGIN", str(directory))
                if not expanded or os.path.realpath(expanded) == os.path.realpath(directory):
                    continue
                inside = os.path.realpath(expanded).startswith(os.path.realpath(root).rstrip(os.sep) + os.sep)
                for name in dyn.needed:
                    hit = (tag == "RPATH" and name in judged) or (inside and name not in judged)
                    if hit and os.path.exists(os.path.join(expanded, name)):
                        out.append(SHADOWED.format(file=copy.name, tag=tag, entry=entry, name=name))
    return out
