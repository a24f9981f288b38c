"""The launcher the gates start and ship puts in the wheel: where it is, one digest of its files, and the fresh
bytecode folder every Python that runs it gets (so the tree's __pycache__ is neither read nor written).

The digests of ci/ and serve/ (:func:`tree_sha256`) read every entry under them, not following links, except the
bytecode Python caches for a source beside it; and what a judging process would import without reading it as
source is a stray (:func:`strays`) that ci refuses to start beside: bytecode outside ``__pycache__`` (a folder
holding only ``__init__.pyc`` is a package that shadows the module of its name), bytecode whose source is gone, and
a link (a link to a folder holding ``__init__.py`` shadows a module too, and no digest reads what it points to)."""

from __future__ import annotations

import atexit
import contextlib
import hashlib
import os
import shutil
import stat
import sys
import tempfile
import threading
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path

from ci.errors import Refused
from serve import bounded

SOURCE_ROOT = Path(__file__).resolve().parents[3]  # the onebit-ci checkout: the launcher and its route tests
LAUNCHER_SKIPS = ("__pycache__", "*.pyc")  # a copy of a clean tree for a test (shutil.ignore_patterns): no bytecode
BYTECODE_FOLDER = "PYTHONPYCACHEPREFIX"
BYTECODE_CACHE = "__pycache__"
BYTECODE_SUFFIXES = (".pyc", ".pyo")

# Messages, shared with the tests that match on them (tests/support/messages.py)
STRAY = "{path}: {why}; the judges run only the sources that the digests read: remove it{more}"
STRAYS_MORE = " (and {count} more)"  # STRAY's more
# STRAY's whys
SOURCELESS_PACKAGE = "a package of bytecode alone (no __init__.py), which Python imports as {module} before any {module}.py"
SOURCELESS_BYTECODE = "bytecode outside __pycache__, which Python imports with no source"
ORPHAN_BYTECODE = "bytecode of {source}, which is not there (left by a module that moved? remove the __pycache__ folders)"
NOT_BYTECODE = "in a __pycache__ folder, and not bytecode of a source beside it"
A_LINK = "a link to {target}, which the digests do not follow"
NOT_A_FILE = "{kind}, neither a file nor a folder"


def safe_path() -> tuple[str, ...]:
    """``-P`` (Python 3.11+) for a Python the gates start on the launcher, when ``serve`` is importable without the
    working directory (installed, as nox's sessions install the project; else nothing can be left out). ``python -m``
    puts the working directory first on sys.path, ahead of the standard library: a ``json.py`` that a fork's build
    wrote into the job's folder ran inside every launcher, as the launcher's code, unread by ``launcher_sha256``."""
    import importlib.machinery

    if sys.version_info < (3, 11):
        return ()
    here = os.path.realpath(os.curdir)
    rest = [p for p in sys.path if os.path.realpath(p or os.curdir) != here]
    finders = [f for f in sys.meta_path if f is not importlib.machinery.PathFinder]
    found = any(getattr(f, "find_spec", lambda *_: None)("serve", None) for f in finders)
    return ("-P",) if found or importlib.machinery.PathFinder.find_spec("serve", rest) is not None else ()


def launcher_dir() -> Path:
    """The serve package ship puts in the wheel: the one this Python imports (this checkout's, in nox's sessions)."""
    import serve

    return Path(serve.__file__).resolve().parent


def launcher_sha256(directory: Path | None = None) -> str:
    """One digest of the launcher's files (paths and contents), as ship copies them: the route and equivalence
    records are bound to it, so a launcher edited after the gates ran is not shipped on their evidence."""
    return tree_sha256(directory or launcher_dir())


def tree_sha256(root: Path) -> str:
    """One digest of every entry under ``root`` (:func:`entries`): each file's path and contents, each folder's path
    (an empty one too), each link's path and what it points to, never followed. The bytecode cache of a source
    beside it is left out: it is never what a judge runs (ci.cli's fresh imports, :func:`own_bytecode`); anything
    else Python could import is in."""

    def entry(path: Path, mode: int) -> tuple[str, bytes]:
        if stat.S_ISREG(mode):
            payload = FILE_ENTRY + hashlib.sha256(_read(path)).digest()
        elif stat.S_ISDIR(mode):
            payload = FOLDER_ENTRY
        elif stat.S_ISLNK(mode):
            payload = b"l" + os.fsencode(os.readlink(path))
        else:
            payload = b"o" + bounded.kind(mode).encode()
        return path.relative_to(root).as_posix(), payload

    return entries_sha256(entry(path, st.st_mode) for path, st in entries(root))


FILE_ENTRY, FOLDER_ENTRY = b"f", b"d"  # an entry's payload: b"f" and the file's sha256 (raw), or b"d" for a folder


def entries_sha256(items: Iterable[tuple[str, bytes]]) -> str:
    """:func:`tree_sha256` of entries given as (path relative to the root, payload), in :func:`entries`' order: ship
    digests what it read and copied, not the copy as it lies (which another process could have rewritten since)."""
    digest = hashlib.sha256()
    for name, payload in items:
        digest.update(os.fsencode(name) + b"\0" + payload + b"\0")
    return digest.hexdigest()


def _read(path: Path) -> bytes:
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    with os.fdopen(fd, "rb") as fh:
        return fh.read()


def entries(root: Path) -> Iterator[tuple[Path, os.stat_result]]:
    """Every entry under ``root``, in path order, with its own stat (a link is not followed, nor descended): all but
    the bytecode cache of sources that are there (:func:`is_cached`), and a ``__pycache__`` folder that holds nothing
    else."""
    with os.scandir(root) as it:
        found = sorted(it, key=lambda e: e.name)
    for entry in found:
        path = Path(entry.path)
        st = entry.stat(follow_symlinks=False)
        if is_cached(path, st):
            continue
        if stat.S_ISDIR(st.st_mode):
            inside = list(entries(path))
            if entry.name != BYTECODE_CACHE or inside:
                yield path, st
                yield from inside
            continue
        yield path, st


def is_cached(path: Path, st: os.stat_result) -> bool:
    """Whether ``path`` is what Python caches for a source: a file in a ``__pycache__`` folder named after a source
    beside that folder (``route.cpython-311.pyc`` for ``route.py``, or the temporary name it is written under)."""
    if path.parent.name != BYTECODE_CACHE or not stat.S_ISREG(st.st_mode):
        return False
    return _is_file(path.parent.parent / (path.name.split(".", 1)[0] + ".py"))


def _is_file(path: Path) -> bool:
    try:
        return stat.S_ISREG(os.lstat(path).st_mode)
    except OSError:
        return False


def strays(root: Path) -> list[tuple[Path, str]]:
    """What under ``root`` a judging process could import, or follow, without a digest reading it as source: each
    path and why (STRAY's whys), in path order."""
    found: list[tuple[Path, str]] = []
    for path, st in entries(root):
        mode = st.st_mode
        if stat.S_ISLNK(mode):
            found.append((path, A_LINK.format(target=os.readlink(path))))
        elif stat.S_ISDIR(mode):
            if path.parent.name == BYTECODE_CACHE:
                found.append((path, NOT_BYTECODE))
        elif not stat.S_ISREG(mode):
            found.append((path, NOT_A_FILE.format(kind=bounded.kind(mode))))
        elif path.parent.name == BYTECODE_CACHE:
            source = path.name.split(".", 1)[0] + ".py"
            found.append((path, ORPHAN_BYTECODE.format(source=source) if path.suffix in BYTECODE_SUFFIXES else NOT_BYTECODE))
        elif path.suffix in BYTECODE_SUFFIXES:
            package = path.stem.split(".", 1)[0] == "__init__" and not _is_file(path.with_name("__init__.py"))
            found.append((path.parent, SOURCELESS_PACKAGE.format(module=path.parent.name)) if package else (path, SOURCELESS_BYTECODE))
    return sorted(set(found))


def refuse_strays(*roots: Path) -> None:
    """Refuse, in one line naming the first (its path from the folder above its root: ``ci/...``, ``serve/...``),
    any stray under ``roots`` (:func:`strays`)."""
    found = [(root, path, why) for root in roots for path, why in strays(root)]
    if found:
        root, path, why = found[0]
        more = STRAYS_MORE.format(count=len(found) - 1) if len(found) > 1 else ""
        raise Refused(STRAY.format(path=path.relative_to(root.parent).as_posix(), why=why, more=more))


def files_under(root: Path) -> list[Path]:
    """The regular files under ``root`` that :func:`entries` lists (a stray .pyc among them)."""
    return [p for p, st in entries(root) if stat.S_ISREG(st.st_mode)]


def files_sha256(root: Path, files: Iterable[Path]) -> str:
    digest = hashlib.sha256()
    for path in sorted(files):
        digest.update(path.relative_to(root).as_posix().encode() + b"\0" + hashlib.sha256(path.read_bytes()).digest())
    return digest.hexdigest()


@contextlib.contextmanager
def own_bytecode() -> Iterator[dict[str, str]]:
    """The environment for a Python a gate starts on the launcher (its tests, ``python -m serve``): its bytecode in a
    fresh folder, removed afterwards, so the __pycache__ folders of the tree are neither read nor written. Python
    checks a .pyc only by its source's mtime and size: a good module's .pyc left in serve/__pycache__ beside a bad
    source of the same size, its mtime put back, was what the tests judged, while the digest and the wheel held the
    source."""
    with tempfile.TemporaryDirectory(prefix="onebit-bytecode-", ignore_cleanup_errors=True) as folder:
        yield {BYTECODE_FOLDER: folder}


def with_bytecode(env: Mapping[str, str], folder: Mapping[str, str]) -> dict[str, str]:
    """``env`` with the bytecode ``folder`` (:func:`own_bytecode`, :func:`process_bytecode`) and bytecode written there:
    under PYTHONDONTWRITEBYTECODE (set on this machine) nothing was written, and every launcher compiled the standard
    library and its packages again, 0.34-0.36 s a start against 0.10 s."""
    return {**{k: v for k, v in env.items() if k != "PYTHONDONTWRITEBYTECODE"}, **folder}


_LAUNCHERS_BYTECODE: list[str] = []  # this process's folder for process_bytecode, once made
_LAUNCHERS_LOCK = threading.Lock()


def process_bytecode() -> dict[str, str]:
    """:func:`own_bytecode` for the launchers a command starts (``python -m serve`` under a gate's llama-servers): one
    fresh folder for this process, made on first use and removed when it exits, so serve/ is compiled once per
    command, not once per server. Made here, it holds nothing planted before the command ran, as a folder per server
    would not either. What it costs, the equivalence and serve tests (256) on 2 cores: 22.3-24.3 s with the tree's
    __pycache__, 30.1-36.8 s with this folder, 37.1 s with a folder per server; most of it is the standard library and
    the packages each command compiles again, not serve/."""
    with _LAUNCHERS_LOCK:
        if not _LAUNCHERS_BYTECODE:
            folder = tempfile.mkdtemp(prefix="onebit-bytecode-")
            atexit.register(shutil.rmtree, folder, ignore_errors=True)
            _LAUNCHERS_BYTECODE.append(folder)
        return {BYTECODE_FOLDER: _LAUNCHERS_BYTECODE[0]}


_AT_START: dict[Path, str] = {}  # a folder's digest as this process's command started (remember_start)


def remember_start(root: Path) -> None:
    """Take ``root``'s digest now, as the command starts, before it imports the judges: what a judge's import does to
    its own file afterwards (a planted one put itself back) is then a change of the folder, not its clean digest."""
    _AT_START[root.resolve()] = launcher_sha256(root)


def at_start(root: Path) -> str | None:
    """``root``'s digest as this process's command started, or None when it was not taken."""
    return _AT_START.get(root.resolve())
