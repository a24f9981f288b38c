"""The libraries a gate's programs actually loaded, read from each running process (``/proc/PID/maps``), and the
system's library folders (ld.so's defaults and ``/etc/ld.so.conf``).

While a :func:`watching` block runs, every program the command layer or a llama-server starts is followed (every
millisecond at first, so a short program is seen once its loader is done), and :meth:`Watch.judge` holds each library
of a build library's name, in each process running a build binary, to the build's sha256.
"""

from __future__ import annotations

import contextlib
import glob
import os
import sys
import threading
import time
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from ci.files import sha256_file

# ld.so's own folders, searched after LD_LIBRARY_PATH and a binary's RUNPATH
DEFAULT_FOLDERS = ("/lib", "/lib64", "/usr/lib", "/usr/lib64")
LD_SO_CONF = Path("/etc/ld.so.conf")
FAST_SECONDS = 0.05  # a program's first moments, read every millisecond: its loader maps the libraries then
FAST_STEP, SLOW_STEP = 0.001, 0.05

# Messages, shared with the tests that match on them (tests/support/messages.py)
OTHER_LIBRARY = "{program} loaded {path} as the build's {name}, whose sha256 is {want}, not {got}: {hint}"
REPLACED_LIBRARY = "{program} loaded {path} as the build's {name}, and the file was replaced while it ran"
REPLACED_PROGRAM = "{program} ran from {path}, which is not the file of the build hashed before the gates: another was put there"
NOT_IN_BUILD = "{program} loaded {path} from the build, which is no library the build's binaries load (a planted file?)"
WHERE_FROM = "a library path outside the build (LD_LIBRARY_PATH?) gave it another file; unset it and run the gates again"


def system_folders(conf: Path = LD_SO_CONF) -> tuple[str, ...]:
    """The folders ld.so searches of itself: its defaults and those ``/etc/ld.so.conf`` lists (its includes too)."""
    found: list[str] = [*DEFAULT_FOLDERS]
    seen: set[str] = set()

    def read(path: str) -> None:
        if path in seen:
            return
        seen.add(path)
        try:
            text = Path(path).read_text(encoding="utf-8", errors="replace")
        except OSError:
            return
        for line in text.splitlines():
            line = line.split("#", 1)[0].strip()
            if line.startswith("include "):
                pattern = line.split(None, 1)[1]
                pattern = pattern if os.path.isabs(pattern) else os.path.join(os.path.dirname(path), pattern)
                for included in sorted(glob.glob(pattern)):
                    read(included)
            elif line.startswith("/"):
                found.append(line.rstrip("/") or "/")

    read(str(conf))
    return tuple(dict.fromkeys(os.path.realpath(f) for f in found))


def library_folders() -> tuple[str, ...]:
    """Where a library path may point: the system's folders, and the running Python's own (GitHub's setup-python puts
    its ``lib`` on LD_LIBRARY_PATH for every later step; what a build program loads is still held to the build)."""
    import sysconfig

    own = [sysconfig.get_config_var("LIBDIR"), os.path.join(sys.base_prefix, "lib")]
    return tuple(dict.fromkeys([*system_folders(), *(os.path.realpath(f) for f in own if f)]))


def inside(path: str, folders: Iterable[str]) -> bool:
    """Whether ``path`` (resolved) lies in one of ``folders`` or below it."""
    real = os.path.realpath(path)
    return any(real == f or real.startswith(f.rstrip(os.sep) + os.sep) for f in folders)


@dataclass(frozen=True)
class Mapping_:
    """An executable file mapping of a process: the path the kernel names, its device and inode."""

    path: str
    device: str
    inode: int
    deleted: bool = False


def mapped(pid: int) -> set[Mapping_]:
    """The files ``pid`` has mapped executable, from ``/proc/PID/maps``; empty when it is gone."""
    found: set[Mapping_] = set()
    try:
        with open(f"/proc/{pid}/maps", encoding="utf-8", errors="surrogateescape") as fh:
            for line in fh:
                parts = line.split(None, 5)
                if len(parts) < 6 or "x" not in parts[1] or not parts[5].startswith("/"):
                    continue
                path = parts[5].rstrip("\n")
                deleted = path.endswith(" (deleted)")
                found.add(Mapping_(path.removesuffix(" (deleted)"), parts[3], int(parts[4]), deleted))
    except (OSError, ValueError):
        pass
    return found


def tree(pid: int) -> list[int]:
    """``pid`` and its descendants, from the kernel's list of each thread's children (no scan of every process)."""
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        with contextlib.suppress(OSError, ValueError), os.scandir(f"/proc/{p}/task") as tasks:
            for task in tasks:
                with open(os.path.join(task.path, "children"), encoding="ascii") as fh:
                    todo += [int(c) for c in fh.read().split()]
    return out


def _argv0(pid: int) -> str:
    """The path ``pid`` was started by (its argv[0], absolute from its working folder, links not followed), or ""."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            first = fh.read().split(b"\0", 1)[0].decode("utf-8", "surrogateescape")
        return os.path.normpath(os.path.join(os.readlink(f"/proc/{pid}/cwd"), first)) if first else ""
    except OSError:
        return ""


def _exe(pid: int) -> str:
    """The executable ``pid`` runs now, or "" when it is gone (or a kernel thread)."""
    try:
        return os.readlink(f"/proc/{pid}/exe")
    except OSError:
        return ""


@dataclass(frozen=True)
class Library:
    """A library of the build: the name its binaries load it by, where it is, its sha256 (build.json's)."""

    name: str
    path: Path
    sha256: str


def family(name: str) -> str:
    """A library's name without its version: ``libggml-base`` for ``libggml-base.so.0.9.4``."""
    return os.path.basename(name).split(".so", 1)[0]


@dataclass
class Judged:
    """What a watch saw of a gate's programs: each build library loaded (name -> sha256), the problems, and the
    libraries its build programs loaded from neither the build nor the system's folders."""

    loaded: dict[str, str] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)
    elsewhere: list[str] = field(default_factory=list)


class Watch:
    """The executable mappings of every program registered while it is active, by process and executable (a process
    that execs another program, as the launcher does, is two)."""

    def __init__(self) -> None:
        self.seen: dict[tuple[int, str], set[Mapping_]] = {}
        self.started_as: dict[tuple[int, str], str] = {}  # the path each was exec'd by (argv[0], made absolute)
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []

    def follow(self, pid: int) -> None:
        thread = threading.Thread(target=self._follow, args=(pid,), daemon=True, name=f"onebit-maps-{pid}")
        self._threads.append(thread)
        thread.start()

    def _follow(self, pid: int) -> None:
        started = time.monotonic()
        while not self._stop.is_set():
            alive = False
            for p in tree(pid):
                exe, found, argv0 = _exe(p), mapped(p), _argv0(p)
                if not found or not exe or _exe(p) != exe:  # gone, or it exec'd another program between the reads
                    continue
                alive = True
                with self._lock:
                    self.seen.setdefault((p, exe), set()).update(found)
                    self.started_as.setdefault((p, exe), argv0)
            if not alive and not os.path.exists(f"/proc/{pid}"):
                return
            if time.monotonic() - started >= FAST_SECONDS:
                self._stop.wait(SLOW_STEP)

    def close(self) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(timeout=5)

    def judge(
        self, build_dir: Path, libraries: Iterable[Library], binaries: Iterable[Library], folders: Iterable[str] = (), sealed: Mapping[str, tuple[str, int]] | None = None
    ) -> Judged:
        """In each process running a binary of the build (by path, or by sha256: a private copy counts), each mapped
        library of a build library's name must be the build's file or a copy with its sha256; a mapped file of the
        build that no binary loads is named too. Other programs are not judged. ``folders``: where else a program may
        load from without note (the system's). ``sealed``: each build file's real path and inode when hashed, by path
        and real path; a program started by such a path running another file, or a mapping there of another inode,
        was put there since."""
        libs = list(libraries)
        programs = list(binaries)
        program_paths = {os.path.realpath(b.path) for b in programs}
        program_shas = {b.sha256 for b in programs}
        by_family: dict[str, list[Library]] = {}
        for lib in libs:
            by_family.setdefault(family(lib.name), []).append(lib)
        real = {os.path.realpath(lib.path): lib for lib in libs}
        build = os.path.realpath(build_dir)
        allowed = (*folders, build)
        out = Judged()
        hashes: dict[tuple[str, int], str] = {}
        with self._lock:
            seen = [(exe, self.started_as.get((pid, exe), ""), sorted(files, key=lambda m: m.path)) for (pid, exe), files in sorted(self.seen.items())]
        exe_sha: dict[str, str] = {}
        for exe, argv0, files in seen:
            started = sealed.get(argv0) if sealed is not None else None  # started as a program of the build, by its path
            if started is not None and (exe != started[0] or all(m.inode != started[1] for m in files if m.path == exe)):
                out.problems.append(REPLACED_PROGRAM.format(program=os.path.basename(argv0), path=exe))
                continue
            if os.path.realpath(exe) not in program_paths:
                if exe not in exe_sha:  # hashed once per program, not once per process that ran it
                    exe_sha[exe] = _sha256(exe)
                if exe_sha[exe] not in program_shas:
                    continue  # no binary of the build: a Python launcher, git, a compiler
            program = os.path.basename(exe)
            for m in files:
                at = sealed.get(m.path) if sealed is not None and not m.deleted else None
                if at is not None and m.inode != at[1]:
                    replaced = REPLACED_PROGRAM.format(program=program, path=m.path) if ".so" not in os.path.basename(m.path) else None
                    name = next((lib.name for lib in libs if os.path.realpath(lib.path) == os.path.realpath(m.path)), m.path)
                    out.problems.append(replaced or REPLACED_LIBRARY.format(program=program, path=m.path, name=name))
                    continue
                if ".so" not in os.path.basename(m.path):
                    continue
                own = real.get(os.path.realpath(m.path)) if not m.deleted else None
                if own is not None and _same_file(m, own.path):
                    out.loaded[own.name] = own.sha256
                    continue
                candidates = by_family.get(family(m.path))
                if candidates is None:
                    if inside(m.path, (build,)):
                        out.problems.append(NOT_IN_BUILD.format(program=program, path=m.path))
                    elif not inside(m.path, allowed) and m.path not in out.elsewhere:
                        out.elsewhere.append(m.path)
                    continue
                if m.deleted:
                    out.problems.append(REPLACED_LIBRARY.format(program=program, path=m.path, name=candidates[0].name))
                    continue
                got = hashes.get((m.device, m.inode)) or _sha256(m.path)
                hashes[(m.device, m.inode)] = got
                match = next((c for c in candidates if c.sha256 == got), None)
                if match is not None:
                    out.loaded[match.name] = match.sha256
                else:
                    want = candidates[0]
                    out.problems.append(OTHER_LIBRARY.format(program=program, path=m.path, name=want.name, want=want.sha256[:12], got=got[:12], hint=WHERE_FROM))
        return out


def _same_file(m: Mapping_, path: Path) -> bool:
    try:
        return os.stat(path).st_ino == m.inode
    except OSError:
        return False


def _sha256(path: str) -> str:
    try:
        return sha256_file(Path(path))
    except OSError:
        return "unreadable"


_ACTIVE: list[Watch] = []
_ACTIVE_LOCK = threading.Lock()


def follow(pid: int) -> None:
    """Follow a program just started (``pid``) in every watch active now; nothing when none is."""
    with _ACTIVE_LOCK:
        watches = list(_ACTIVE)
    for watch in watches:
        watch.follow(pid)


@contextlib.contextmanager
def watching() -> Iterator[Watch]:
    """A :class:`Watch` of every program started during the block."""
    watch = Watch()
    with _ACTIVE_LOCK:
        _ACTIVE.append(watch)
    try:
        yield watch
    finally:
        with _ACTIVE_LOCK:
            _ACTIVE.remove(watch)
        watch.close()
