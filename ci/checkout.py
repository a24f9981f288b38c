"""The submodule's working tree: is it there, where is it, what differs from a commit, and moving it.

A checkout may leave out paths a build never needs (``checkout.omit`` in pins.yaml: the fork's ``models/`` and
``docs/``). libgit2 has no sparse checkout, so the index keeps the whole tree and the omitted paths, absent on
disk, are not counted as changes.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

import pygit2
from pygit2.enums import CheckoutStrategy

from ci.errors import GitError, Refused
from ci.fork import ForkStore
from ci.pins import Pins
from ci.project import Project

log = logging.getLogger("onebit-ci")


class Checkout:
    def __init__(self, path: Path, repo: pygit2.Repository, omit: tuple[str, ...]) -> None:
        self.path = path
        self.repo = repo
        self.omit = omit

    @classmethod
    def find(cls, path: Path, omit: tuple[str, ...]) -> Checkout | None:
        """The checkout at ``path``, or None when the submodule is not checked out there."""
        if not (path / ".git").exists():
            return None
        try:
            repo = pygit2.Repository(str(path))
        except pygit2.GitError as exc:
            raise GitError(f"{path}: has a .git but is not a usable repository ({exc})") from None
        if repo.head_is_unborn:
            return None
        return cls(path, repo, omit)

    def head(self) -> str:
        return str(self.repo.head.target)

    def move_to(self, sha: str) -> None:
        """Detach HEAD at ``sha`` with index and working tree at its tree (omitted paths left out)."""
        commit = self.repo[sha]
        assert isinstance(commit, pygit2.Commit)
        checkout_commit(self.repo, commit, self.omit)


def checkout_commit(repo: pygit2.Repository, commit: pygit2.Commit, omit: tuple[str, ...]) -> None:
    """HEAD detached at ``commit``, index at its tree, working tree at it but for the omitted paths.

    The index is set first and the checkout then records each file it writes with its stat data: an index
    without stat data makes ``git diff-index HEAD`` (ggml's -dirty test, run at configure time) see every file
    as changed until something refreshes it.
    """
    paths = included_paths(commit.tree, omit)
    if not repo.head_is_unborn:  # files only the old commit has must go too: they are in no path of the new tree
        paths = sorted(set(paths) | set(included_paths(repo.head.peel(pygit2.Tree), omit)))
    index = repo.index
    index.read_tree(commit.tree)
    if omit:
        mark_skip_worktree(index, omit)
    index.write()
    strategy = CheckoutStrategy.FORCE | CheckoutStrategy.REMOVE_UNTRACKED | CheckoutStrategy.DISABLE_PATHSPEC_MATCH
    try:
        repo.checkout_tree(commit, strategy=strategy, paths=paths)
    except pygit2.GitError as exc:
        raise GitError(f"checkout of {str(commit.id)[:12]} failed: {exc}") from None
    repo.set_head(commit.id)
    if omit:
        index = repo.index
        index.read()
        mark_skip_worktree(index, omit)  # the checkout rewrote the index; the flags must survive it
        _sparse_config(repo, omit)
        index.write()


SKIP_WORKTREE = 1 << 14  # GIT_INDEX_ENTRY_SKIP_WORKTREE, an extended index flag (index version 3)


def mark_skip_worktree(index: pygit2.Index, omit: tuple[str, ...]) -> None:
    """Flag omitted entries skip-worktree, as ``git sparse-checkout`` does, so git sees them as present.

    pygit2 has no API for index entry flags, so this goes through its cffi binding. Without the flag
    ``git status`` lists every omitted file as deleted, ``git commit -a`` deletes them, and llama.cpp's build
    info calls the tree ``-dirty`` though no patch is applied. libgit2's own status ignores the flag; the
    checkout's status code filters omitted paths itself.
    """
    from pygit2._libgit2 import ffi, lib

    for entry in index:
        if any(entry.path.startswith(o) for o in omit):
            ptr = lib.git_index_get_bypath(index._index, entry.path.encode(), 0)
            if ptr != ffi.NULL:
                ffi.cast("git_index_entry *", ptr).flags_extended |= SKIP_WORKTREE


def _sparse_config(repo: pygit2.Repository, omit: tuple[str, ...]) -> None:
    """The same omission for git's own commands (a non-cone sparse checkout), so a ``git switch`` keeps it."""
    repo.config["core.sparseCheckout"] = True
    info = Path(repo.path) / "info"
    info.mkdir(exist_ok=True)
    (info / "sparse-checkout").write_text("/*\n" + "".join(f"!/{o}\n" for o in omit))


def included_paths(tree: pygit2.Tree, omit: tuple[str, ...], prefix: str = "") -> list[str]:
    """Paths that cover ``tree`` except the omitted ones, as few as possible (whole directories)."""
    wanted = [o for o in omit if o.startswith(prefix)]
    if not wanted:
        return [prefix.rstrip("/")] if prefix else [str(e.name) for e in tree]
    out: list[str] = []
    for entry in tree:
        full = f"{prefix}{entry.name}"
        if any(o == f"{full}/" or o == full for o in wanted):
            continue
        if isinstance(entry, pygit2.Tree) and any(o.startswith(f"{full}/") for o in wanted):
            out.extend(included_paths(entry, omit, f"{full}/"))
        else:
            out.append(full)
    return out


def materialize(store: ForkStore, workdir: Path, sha: str, omit: tuple[str, ...]) -> Checkout:
    """Check ``sha`` out at ``workdir``, attaching the store (the submodule's git dir) as its repository.

    The layout is the one ``git submodule update`` makes: ``workdir/.git`` is a file naming the git dir, whose
    ``core.worktree`` points back, both relative, so git and pygit2 see the same submodule.
    """
    gitdir = Path(store.repo.path).resolve()
    workdir.mkdir(parents=True, exist_ok=True)
    leftovers = [p.name for p in workdir.iterdir() if p.name != ".git"]
    if leftovers:
        raise Refused(f"{workdir}: not empty ({', '.join(sorted(leftovers)[:5])}); move those files away first")
    config = store.repo.config
    config["core.bare"] = False
    config["core.worktree"] = os.path.relpath(workdir.resolve(), gitdir)
    (workdir / ".git").write_text(f"gitdir: {os.path.relpath(gitdir, workdir.resolve())}\n")
    repo = pygit2.Repository(str(workdir))
    commit = repo[sha]
    assert isinstance(commit, pygit2.Commit)
    checkout_commit(repo, commit, omit)
    found = Checkout.find(workdir, omit)
    if found is None:
        raise GitError(f"{workdir}: checkout of {sha[:12]} left no repository")
    return found


def ensure_store(project: Project, pins: Pins, remote: str | None) -> ForkStore:
    """The fork store, holding the pinned commit (fetched from ``remote`` or pins.yaml's url when asked or missing)."""
    store = ForkStore.open(project.module_gitdir(pins.submodule))
    if not store.has_commit(pins.fork.commit) or remote:
        source = remote or pins.fork.url
        log.info("fetching %s", source)
        log.info("fetched %s", store.sync(source))
        if not store.has_commit(pins.fork.commit):
            raise GitError(f"the pinned commit {pins.fork.commit[:12]} is not in {source}; pass --remote with a mirror that has it")
    return store


def ensure_checkout(project: Project, pins: Pins, store: ForkStore) -> Checkout:
    """The submodule's checkout, made at the pin when absent."""
    workdir = project.root / pins.submodule
    checkout = Checkout.find(workdir, pins.omit)
    if checkout is None:
        log.info("checking out %s at %s (leaving out %s)", pins.submodule, pins.fork.short, ", ".join(pins.omit) or "nothing")
        checkout = materialize(store, workdir, pins.fork.commit, pins.omit)
    return checkout
