"""One digest of a folder of code (ci/, serve/), and what under it a judging process could import without a digest
reading it as source (a stray, refused at start). An edge module: the entry point and the stages read it alike.

A digest reads every entry, not following links, except the bytecode Python caches for a source beside it. A stray is
what an import could load other than sources and data: a compiled module (imported ahead of the ``.py`` beside it), a
``.pth``, bytecode outside ``__pycache__`` or whose source is gone, and a link.
"""

from __future__ import annotations

import hashlib
import importlib.machinery
import os
import stat
from collections.abc import Iterable, Iterator
from pathlib import Path

from ci.errors import Refused
from serve import bounded

BYTECODE_CACHE = "__pycache__"
BYTECODE_SUFFIXES = (".pyc", ".pyo")
# what an import loads as a module ahead of its source (importlib's own list, and the plain .so it holds), and a .pth
EXTENSION_SUFFIXES = tuple(dict.fromkeys((*importlib.machinery.EXTENSION_SUFFIXES, ".so", ".pyd")))
PATH_FILE_SUFFIX = ".pth"

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
EXTENSION_MODULE = "a compiled module, which Python imports as {module} before any {module}.py"
PATH_FILE = "a .pth file, whose lines a Python may run or put on sys.path at start-up"


PROJECT_ROOT = Path(__file__).resolve().parents[1]  # the checkout (or the install) whose ci/ this is
PROJECT_PACKAGES = ("ci", "serve", "tests")  # its top-level packages (tests in a checkout only)


def package_dir(name: str) -> Path:
    """The folder of the project's package ``name``: the one beside this ci/, whatever sys.path would import under
    that name (a PYTHONPATH entry holding a serve/ was the launcher digested and shipped, while the route tests
    judged the checkout's: hostile pass 5)."""
    return PROJECT_ROOT / name


def tree_sha256(root: Path) -> str:
    """One digest of every entry under ``root`` (:func:`entries`): each file's path and contents, each folder's path
    (an empty one too), each link's path and what it points to, never followed. The bytecode cache of a source
    beside it is left out: it is never what a judge runs (ci.cli's fresh imports, the gates' own bytecode folders); anything
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
        elif (suffix := next((s for s in EXTENSION_SUFFIXES if path.name.endswith(s)), None)) is not None:
            found.append((path, EXTENSION_MODULE.format(module=path.name.removesuffix(suffix).split(".", 1)[0])))
        elif path.suffix == PATH_FILE_SUFFIX:
            found.append((path, PATH_FILE))
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


_AT_START: dict[Path, str] = {}  # a folder's digest as this process's command started (remember_start)


def remember_start(root: Path) -> None:
    """Take ``root``'s digest now, as the command starts, before it imports the judges: what a judge's import does to
    its own file afterwards (a planted one put itself back) is then a change of the folder, not its clean digest."""
    _AT_START[root.resolve()] = tree_sha256(root)


def at_start(root: Path) -> str | None:
    """``root``'s digest as this process's command started, or None when it was not taken."""
    return _AT_START.get(root.resolve())
