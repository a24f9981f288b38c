"""The fork's commits as this machine knows them: a store fetched from the pinned URL or a local mirror.

The store is the submodule's own git directory (``.git/modules/<path>``), so a bump and a later checkout share its
objects. A local path given as the remote has its object files taken in (hard links where the file system allows,
else copies: packs are immutable), so a mirror that lacks some large blobs still serves every commit and tree, and
nothing depends on the mirror staying where it was: the store keeps no ``objects/info/alternates`` to a user's path.
A URL is fetched with libgit2.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from enum import Enum
from pathlib import Path

import pygit2
from pygit2.enums import RepositoryInitFlag, SortMode

from ci.errors import ConfigError, GitError
from ci.schema import did_you_mean
from ci.words import listed
from serve.bounded import CONFIG_LIMIT, read_regular

HEADS = "refs/onebit/heads/"
PULLS = "refs/onebit/pull/"
HEX_RE = re.compile(r"^[0-9a-fA-F]+$")
MIN_PREFIX = 4

# Messages, shared with the tests that match on them (tests/support/messages.py)
ALTERNATE_GONE = (
    "{alternates}: the store borrows objects from {mirror}, which is gone (the mirror moved?); "
    "pass --remote with its new path, or a URL, to fetch the objects in"
)
FETCH_FAILED = "fetch {url}: {error}; check the URL or pass --remote PATH to a local mirror"
BRANCHES_SHOWN = 12
MAIN_LINES = ("main", "master")
BRANCH_NOT_IN_FORK = 'branch "{branch}" is not in the fork{suggestion}; it has {count} branches: {names}'
NOT_A_COMMIT_ID = '"{spec}" is not a commit id (hex digits, at least {digits})'
TOO_SHORT = '"{spec}" is too short: give at least {digits} hex digits of the commit'
NOT_IN_FORK = "commit {spec} is not in the fork (no branch or pull request reaches it); check the id or the --remote"
AMBIGUOUS = "commit {spec} is ambiguous: {matches} commits match: {listing}; give more digits"


class Relation(Enum):
    SAME = "same"
    AHEAD = "ahead"
    ROLLBACK = "rollback"
    SIDEWAYS = "sideways"
    UNRELATED = "unrelated"  # the current pin is not in the store at all


@dataclass(frozen=True)
class Move:
    relation: Relation
    ahead: int  # commits in new that old lacks
    behind: int  # commits in old that new lacks


class ForkStore:
    def __init__(self, repo: pygit2.Repository) -> None:
        self.repo = repo

    @classmethod
    def open(cls, gitdir: Path) -> ForkStore:
        """Open the store at ``gitdir``, creating it bare when absent (a checkout attaches a work tree later)."""
        if (gitdir / "HEAD").is_file():
            try:  # opened bare: the store needs objects and refs only, and a deleted work tree must not stop it
                return cls(pygit2.Repository(str(gitdir), pygit2.enums.RepositoryOpenFlag.BARE))
            except pygit2.GitError as exc:
                raise GitError(f"{gitdir}: not a usable git directory ({exc}); move it away and retry") from None
        return cls(pygit2.init_repository(str(gitdir), bare=True, flags=RepositoryInitFlag.MKPATH | RepositoryInitFlag.BARE))

    # -- getting commits -------------------------------------------------------------------------------------

    def sync(self, remote: str) -> str:
        """Bring every branch (and pull ref) of ``remote`` into the store; return a one-line description."""
        local = _local_repo_path(remote)
        if local is not None:
            return self._borrow(local)
        return self._fetch(remote)

    @property
    def objects(self) -> Path:
        return Path(self.repo.path) / "objects"

    def alternates(self) -> list[Path]:
        """The object directories an older store borrowed (objects/info/alternates), as written."""
        alt = self.objects / "info" / "alternates"
        if not alt.is_file():
            return []
        text = read_regular(alt, CONFIG_LIMIT).decode("utf-8", errors="replace")
        return [
            Path(line) if Path(line).is_absolute() else self.objects / line
            for line in text.splitlines()
            if line.strip() and not line.startswith("#")
        ]

    def missing_alternates(self) -> list[Path]:
        return [p for p in self.alternates() if not p.is_dir()]

    def check_alternates(self) -> None:
        """A GitError naming the first mirror an older store borrowed objects from that is gone."""
        gone = self.missing_alternates()
        if gone:
            raise GitError(ALTERNATE_GONE.format(alternates=self.objects / "info" / "alternates", mirror=gone[0]))

    def _take_in_alternates(self) -> None:
        """Every object an older store borrowed, taken in from the mirrors still there; then no alternates at all."""
        for objects in self.alternates():
            if objects.is_dir():
                _take_objects(objects, self.objects)
        (self.objects / "info" / "alternates").unlink(missing_ok=True)
        self.repo = pygit2.Repository(self.repo.path, pygit2.enums.RepositoryOpenFlag.BARE)  # libgit2 reads alternates at open

    def _borrow(self, path: Path) -> str:
        try:
            src = pygit2.Repository(str(path))
        except pygit2.GitError:
            raise GitError(f"--remote {path}: not a git repository") from None
        _take_objects(Path(src.path) / "objects", self.objects)
        self._take_in_alternates()
        wanted: dict[str, pygit2.Oid] = {}
        for name in src.references:
            if name.startswith("refs/heads/"):
                dest = HEADS + name[len("refs/heads/") :]
            elif name.startswith("refs/pull/") and name.endswith("/head"):
                dest = PULLS + name[len("refs/pull/") : -len("/head")]
            else:
                continue
            try:
                target = src.references[name].resolve().target
            except pygit2.GitError:
                continue
            if isinstance(target, pygit2.Oid):
                wanted[dest] = target
        self._replace_refs(wanted)
        return f"{path} (local mirror, objects taken in): {sum(n.startswith(HEADS) for n in wanted)} branches"

    def _fetch(self, url: str) -> str:
        self._take_in_alternates()
        remote = self.repo.remotes.create_anonymous(url)
        try:
            remote.fetch([f"+refs/heads/*:{HEADS}*"], prune=pygit2.enums.FetchPrune.PRUNE)
        except pygit2.GitError as exc:
            raise GitError(FETCH_FAILED.format(url=url, error=exc)) from None
        with contextlib.suppress(pygit2.GitError):  # not every host serves pull refs; they only improve a message
            remote.fetch([f"+refs/pull/*/head:{PULLS}*"])
        n = sum(1 for r in self.repo.references if r.startswith(HEADS))
        return f"{url}: {n} branches"

    def _replace_refs(self, wanted: dict[str, pygit2.Oid]) -> None:
        for name in list(self.repo.references):
            if name.startswith(("refs/onebit/",)) and name not in wanted:
                self.repo.references.delete(name)
        for name, oid in wanted.items():
            self.repo.references.create(name, oid, force=True)

    # -- questions about commits ---------------------------------------------------------------------------

    def branch_tip(self, branch: str) -> pygit2.Oid:
        try:
            return self.repo.references[HEADS + branch].target  # type: ignore[return-value]
        except KeyError:
            names = self.branches()
            listing = listed(names, BRANCHES_SHOWN)
            raise GitError(BRANCH_NOT_IN_FORK.format(branch=branch, suggestion=did_you_mean(branch, names), count=len(names), names=listing)) from None

    def branches(self) -> list[str]:
        """The fork's branches, its main line first (main, then master), the rest by name."""
        return by_main_first(r[len(HEADS) :] for r in self.repo.references if r.startswith(HEADS))

    def commit(self, sha: str) -> pygit2.Commit:
        try:
            obj = self.repo[sha]
        except (KeyError, ValueError):
            obj = None
        if not isinstance(obj, pygit2.Commit):
            raise GitError(f"{sha[:12]}: not a commit in the fork store {self.repo.path}")
        return obj

    def tree_of(self, sha: str) -> pygit2.Tree:
        return self.commit(sha).tree

    def has_commit(self, sha: str) -> bool:
        try:
            return isinstance(self.repo[sha], pygit2.Commit)
        except (KeyError, ValueError):
            return False

    def resolve(self, spec: str) -> pygit2.Commit:
        """A full or abbreviated (4+ hex) commit id, among the commits the store's refs reach."""
        if not HEX_RE.match(spec):
            raise ConfigError(NOT_A_COMMIT_ID.format(spec=spec, digits=MIN_PREFIX))
        if len(spec) < MIN_PREFIX:
            raise ConfigError(TOO_SHORT.format(spec=spec, digits=MIN_PREFIX))
        spec = spec.lower()
        if len(spec) == 40 and self.has_commit(spec):
            return self.commit(spec)
        found = sorted({str(c.id) for c in self._all_commits() if str(c.id).startswith(spec)})
        if not found:
            raise GitError(NOT_IN_FORK.format(spec=spec))
        if len(found) > 1:
            listing = "; ".join(f"{s[:12]} {self._subject(s)}" for s in found[:10])
            raise ConfigError(AMBIGUOUS.format(spec=spec, matches=len(found), listing=listing))
        return self.commit(found[0])

    def _all_commits(self) -> Iterator[pygit2.Commit]:
        walker = self.repo.walk(None, SortMode.NONE)
        for name in self.repo.references:
            if name.startswith("refs/onebit/"):
                walker.push(self.repo.references[name].target)
        return iter(walker)

    def _subject(self, sha: str) -> str:
        commit = self.commit(sha)
        return commit.message.splitlines()[0] if commit.message else ""

    def on_branch(self, sha: str, branch: str) -> bool:
        tip = self.branch_tip(branch)
        return str(tip) == sha or self.repo.descendant_of(tip, sha)

    def branches_containing(self, sha: str) -> list[str]:
        out = []
        for name in self.repo.references:
            if name.startswith(("refs/onebit/heads/", "refs/onebit/pull/")):
                tip = self.repo.references[name].target
                if str(tip) == sha or self.repo.descendant_of(tip, sha):
                    out.append(name.replace(HEADS, "").replace(PULLS, "pull/"))
        return by_main_first(out)

    def move(self, old: str, new: str) -> Move:
        if old == new:
            return Move(Relation.SAME, 0, 0)
        if not self.has_commit(old):
            return Move(Relation.UNRELATED, 0, 0)
        ahead, behind = self.repo.ahead_behind(new, old)
        if behind == 0:
            return Move(Relation.AHEAD, ahead, 0)
        if ahead == 0:
            return Move(Relation.ROLLBACK, 0, behind)
        return Move(Relation.SIDEWAYS, ahead, behind)

    def subjects_between(self, old: str, new: str) -> list[tuple[str, str]]:
        """(short sha, subject) of the commits in ``new`` that ``old`` lacks, newest first."""
        walker = self.repo.walk(new, SortMode.TOPOLOGICAL)
        if self.has_commit(old):
            walker.hide(old)
        return [(str(c.id)[:7], c.message.splitlines()[0] if c.message else "") for c in walker]


def _take_objects(src: Path, dest: Path, depth: int = 0) -> None:
    """Every object file of ``src`` (packs, their indexes, loose objects) present in ``dest``: a hard link where the
    file system allows, else a copy; the mirror's own alternates too (as git follows them, 5 deep)."""
    if depth > 5 or not src.is_dir():
        return
    for sub in sorted(src.iterdir()):
        if sub.name == "pack" or (len(sub.name) == 2 and HEX_RE.match(sub.name)):
            for f in sorted(sub.iterdir()):
                if not f.is_file() or f.is_symlink() or f.name.startswith("tmp") or f.suffix in (".keep", ".lock"):
                    continue
                target = dest / sub.name / f.name
                if target.exists():
                    continue
                target.parent.mkdir(parents=True, exist_ok=True)
                tmp = target.with_name(f".{f.name}.onebit-tmp")
                try:
                    os.link(f, tmp)
                except OSError:
                    shutil.copyfile(f, tmp)
                os.replace(tmp, target)
    alt = src / "info" / "alternates"
    if alt.is_file():
        for line in read_regular(alt, CONFIG_LIMIT).decode("utf-8", errors="replace").splitlines():
            if line.strip() and not line.startswith("#"):
                more = Path(line) if Path(line).is_absolute() else src / line
                _take_objects(more.resolve(), dest, depth + 1)


def _local_repo_path(remote: str) -> Path | None:
    if "://" in remote:
        return None
    if re.match(r"^[\w.-]+@[\w.-]+:", remote):  # scp-like ssh address
        return None
    p = Path(remote).expanduser()
    if not p.exists():
        raise ConfigError(f"--remote {remote}: no such directory (give a local mirror path or a URL)")
    return p.resolve()


def by_main_first(names: Iterable[str]) -> list[str]:
    """Branch names sorted, the fork's main line first: the branch a person most likely means is never cut off."""
    return sorted(names, key=lambda name: (MAIN_LINES.index(name) if name in MAIN_LINES else len(MAIN_LINES), name))
