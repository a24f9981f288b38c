"""The checkout as a build saw it, and its modification times put back when its content is the same.

ninja judges a file by its time, not its content, so a checkout written again with the same content (a fresh clone,
``patches --reset``) would rebuild everything. A :class:`CheckoutView` holds each file's stat data and sha256 as a
build saw them, and the store's ``index`` by HEAD and tree; :func:`restore` gives each file still of that content its
time back, a changed file older than the view the current time. The rules: docs/build.md.
"""

from __future__ import annotations

import json
import os
import re
import stat
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ci.files import sha256_file
from ci.git import Git

SCHEMA = 1
INDEX = "index"
SYNC_RECORD = "onebit-sync.json"  # ci.source.sync.RECORD: the tree this tool checked out there
_SHA_RE = re.compile(r"\A[0-9a-f]{40}(?:[0-9a-f]{24})?\Z")


@dataclass(frozen=True)
class FileSeen:
    """One file as a build saw it: what its stat data said, and the sha256 of its content then."""

    size: int
    mtime_ns: int
    ino: int
    ctime_ns: int
    sha256: str

    @classmethod
    def of(cls, st: os.stat_result, sha256: str) -> FileSeen:
        return cls(st.st_size, st.st_mtime_ns, st.st_ino, st.st_ctime_ns, sha256)

    def same_stat(self, st: os.stat_result) -> bool:
        """Unchanged without reading it (git's index does the same): size, time, inode and ctime all as recorded."""
        return (self.size, self.mtime_ns, self.ino, self.ctime_ns) == (st.st_size, st.st_mtime_ns, st.st_ino, st.st_ctime_ns)


@dataclass(frozen=True)
class IndexSeen:
    """The fork store's index as a build saw it: its time, and what CMake reads through it (HEAD, the tree)."""

    head: str
    tree: str
    mtime_ns: int


@dataclass(frozen=True)
class CheckoutView:
    files: Mapping[str, FileSeen]  # by path relative to the checkout, "/"-separated
    taken_ns: int  # when the view was taken: no object of a ninja run that saw it is newer than the run's end
    index: IndexSeen | None = None

    def to_json(self) -> dict[str, Any]:
        files = {p: [f.size, f.mtime_ns, f.ino, f.ctime_ns, f.sha256] for p, f in sorted(self.files.items())}
        index = None if self.index is None else {"head": self.index.head, "tree": self.index.tree, "mtime_ns": self.index.mtime_ns}
        return {"schema": SCHEMA, "taken_ns": self.taken_ns, "index": index, "files": files}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> CheckoutView:
        if data.get("schema") != SCHEMA:
            raise ValueError(f"schema {data.get('schema')!r}, expected {SCHEMA}")
        files = {str(p): FileSeen(int(s), int(m), int(i), int(c), str(h)) for p, (s, m, i, c, h) in dict(data["files"]).items()}
        raw = data.get("index")
        index = None if raw is None else IndexSeen(str(raw["head"]), str(raw["tree"]), int(raw["mtime_ns"]))
        return cls(files, int(data["taken_ns"]), index)

    def dumps(self) -> str:
        return json.dumps(self.to_json(), separators=(",", ":")) + "\n"


@dataclass(frozen=True)
class Restoration:
    """What :func:`restore` did, and the checkout as the next ninja run will see it."""

    view: CheckoutView
    put_back: tuple[str, ...] = ()  # files given their recorded time back: their content is what the build saw
    touched: tuple[str, ...] = ()  # files whose content differs from it with an older time: given the current time
    kept_new: tuple[str, ...] = ()  # content as seen, time left: another build directory saw other content there
    index_put_back: bool = False
    changed: tuple[str, ...] = ()  # files whose content differs from what the build saw (touched or not)


def store_of(workdir: Path) -> Path | None:
    """The git directory a checkout's ``.git`` names (a submodule's ``gitdir:`` file, as CMake reads it), or None."""
    dot = workdir / ".git"
    if dot.is_dir():
        return dot
    try:
        text = dot.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None
    m = re.match(r"gitdir: (.*)", text)
    return (workdir / m.group(1).strip()).resolve() if m else None


def _files(workdir: Path, skip: Path | None) -> Iterator[tuple[str, os.stat_result]]:
    """Every regular file under ``workdir`` with its stat data, git's own directory and ``skip`` left out; links are
    skipped (their target, when in the checkout, is a file of its own)."""
    skipped = os.path.realpath(skip) if skip is not None else None
    for top, dirs, names in os.walk(workdir):
        if top == str(workdir):
            dirs[:] = [d for d in dirs if d != ".git"]
            names = [n for n in names if n != ".git"]
        if skipped is not None:
            dirs[:] = [d for d in dirs if os.path.realpath(os.path.join(top, d)) != skipped]
        for name in names:
            path = os.path.join(top, name)
            try:
                st = os.lstat(path)
            except FileNotFoundError:
                continue
            if stat.S_ISREG(st.st_mode):
                yield os.path.relpath(path, workdir).replace(os.sep, "/"), st


def _head_and_tree(gitdir: Path | None) -> tuple[str, str] | None:
    """HEAD (detached, as the sync leaves it) and the tree the sync checked out; None when either is unknown."""
    if gitdir is None:
        return None
    try:
        head = (gitdir / "HEAD").read_text().strip()
        tree = str(json.loads((gitdir / SYNC_RECORD).read_text())["tree"])
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return (head, tree) if _SHA_RE.match(head) and _SHA_RE.match(tree) else None


def _index_seen(gitdir: Path | None) -> IndexSeen | None:
    found = _head_and_tree(gitdir)
    if found is None or gitdir is None:
        return None
    try:
        return IndexSeen(found[0], found[1], (gitdir / INDEX).stat().st_mtime_ns)
    except OSError:
        return None


def scan(workdir: Path, before: CheckoutView | None = None, *, gitdir: Path | None = None, skip: Path | None = None) -> CheckoutView:
    """The checkout now: each file's stat data and sha256, a digest of ``before`` kept where the stat data is
    unchanged (so only what moved is read)."""
    taken = time.time_ns()
    known = before.files if before is not None else {}
    files: dict[str, FileSeen] = {}
    for rel, st in _files(workdir, skip):
        old = known.get(rel)
        if old is not None and old.same_stat(st):
            files[rel] = old
            continue
        seen = _hashed(workdir / rel, st)
        if seen is not None:
            files[rel] = seen
    return CheckoutView(files, taken, _index_seen(gitdir))


def _hashed(path: Path, st: os.stat_result) -> FileSeen | None:
    """The file's digest, with stat data taken before and after: a file that moved meanwhile is left out (unknown,
    so never given an old time back)."""
    try:
        digest = sha256_file(path)
        after = os.lstat(path)
    except OSError:
        return None
    seen = FileSeen.of(st, digest)
    return seen if seen.same_stat(after) else None


def restore(
    workdir: Path,
    seen: CheckoutView,
    *,
    gitdir: Path | None = None,
    others: Sequence[CheckoutView] = (),
    skip: Path | None = None,
    refresh_index: bool = True,
) -> Restoration:
    """Give every file whose content is what ``seen`` recorded its recorded time back, and the current time to a file
    whose content differs but whose time is no later than ``seen`` was taken; likewise the store's index (by HEAD and
    the tree). ``refresh_index``: afterwards git's index learns the files' new stat data (``update-index --refresh``),
    so the next sync does not read every file again; off for a copy of the checkout, which the index does not
    describe."""
    files: dict[str, FileSeen] = {}
    put_back: list[str] = []
    touched: list[str] = []
    kept_new: list[str] = []
    changed: list[str] = []
    for rel, st in _files(workdir, skip):
        path = workdir / rel
        old = seen.files.get(rel)
        if old is not None and old.same_stat(st):
            files[rel] = old
            continue
        now = _hashed(path, st)
        if now is None:
            continue
        if old is not None and now.sha256 == old.sha256:
            if st.st_mtime_ns != old.mtime_ns:
                if not _safe_for_others(rel, now.sha256, old.mtime_ns, others):
                    kept_new.append(rel)
                elif _set_mtime(path, st, old.mtime_ns):
                    put_back.append(rel)
                    now = _hashed(path, os.lstat(path)) or now
        else:
            changed.append(rel)
            if st.st_mtime_ns <= seen.taken_ns and _set_mtime(path, st, time.time_ns()):
                touched.append(rel)
                now = _hashed(path, os.lstat(path)) or now
        files[rel] = now
    if put_back and refresh_index and gitdir is not None:
        # the index's stat data no longer matches: without a refresh every sync would read all the files again
        Git(gitdir, workdir).run("update-index", "-q", "--refresh", check=False)
    index_put_back = _restore_index(gitdir, seen, others)
    return Restoration(
        CheckoutView(files, time.time_ns(), _index_seen(gitdir)),
        tuple(put_back),
        tuple(touched),
        tuple(kept_new),
        index_put_back,
        tuple(changed),
    )


def _safe_for_others(rel: str, sha256: str, mtime_ns: int, others: Sequence[CheckoutView]) -> bool:
    """Whether ``mtime_ns`` keeps every other build directory's ninja honest: one that saw other content in the file
    may hold objects newer than that time, which would then look up to date."""
    for other in others:
        theirs = other.files.get(rel)
        if theirs is not None and theirs.sha256 != sha256 and mtime_ns <= other.taken_ns:
            return False
    return True


def _restore_index(gitdir: Path | None, seen: CheckoutView, others: Sequence[CheckoutView]) -> bool:
    if gitdir is None or seen.index is None or _head_and_tree(gitdir) != (seen.index.head, seen.index.tree):
        return False
    index = gitdir / INDEX
    try:
        st = index.stat()
    except OSError:
        return False
    if st.st_mtime_ns == seen.index.mtime_ns:
        return False
    for other in others:
        o = other.index
        if o is not None and (o.head, o.tree) != (seen.index.head, seen.index.tree) and seen.index.mtime_ns <= other.taken_ns:
            return False
    # an older index time makes git treat more entries as racily clean, which only makes it read them again
    return _set_mtime(index, st, seen.index.mtime_ns)


def _set_mtime(path: Path, st: os.stat_result, mtime_ns: int) -> bool:
    try:
        os.utime(path, ns=(st.st_atime_ns, mtime_ns), follow_symlinks=False)
    except OSError:  # a read-only checkout: ninja decides by the time it has
        return False
    return True

