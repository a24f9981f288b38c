"""The one way the submodule's checkout comes to pin + series: fetch first, then decide, then move, all or nothing.

:func:`sync` is the only code that writes the checkout; build, patches, bump and export call it.
:func:`ensure_commit` fetches the pin into the store. :func:`prepare` decides, writing nothing: the series must apply
whole, and changes this tool did not make are refused unless ``reset`` discards them. :func:`execute` moves
(``git read-tree --reset -u``, HEAD detached at the pin, the record written) and, on any failure, puts the checkout
back as it was. The steps: docs/patches.md.
"""

from __future__ import annotations

import json
import logging
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum
from pathlib import Path

from ci.errors import GitError, Refused
from ci.files import write_atomic
from ci.git import Git, head_of, is_checked_out
from ci.schema import parse_json
from ci.source import checkout
from ci.source.classify import SeriesPlan, classify
from ci.source.series import Series, check_paths
from ci.source.store import ForkStore
from ci.words import count, listed

log = logging.getLogger("onebit-ci")

RECORD = "onebit-sync.json"
LISTED = 10  # changed files named in a refusal

# Messages, shared with the tests that match on them (tests/support/messages.py)
SERIES_WHAT = "{patches} ({digest})"
ALREADY_APPLIED = "patches: the series ({series}) is already applied at {commit}: nothing to do"
CHECKED_OUT = "patches: checked out {name} at {commit} (leaving out {omitted}) and applied {series}"
DISCARDED = "patches: discarded changes to {files} ({listing}); applied {series} on {commit}{moved}"
APPLIED = "patches: applied {series} on {commit}{moved}"
MOVED_FROM = " (moved from {commit})"
SERIES_DOES_NOT_APPLY = "the series does not apply at the pin: {listing}; nothing was applied"
LOCAL_CHANGES = (
    "{name}: {at}, holds changes this tool did not make ({listing}); nothing was touched. "
    "If they are your work, commit or stash them (git -C {name} stash -u); to discard them on purpose: nox -s patches -- --reset"
)
AT_COMMIT = "at {commit}"
NO_COMMIT_CHECKED_OUT = "with no commit checked out"
VERDICT_LINE = "  {verdict}"
CHECKING = "patches: {patches} ({digest}) against the pin {commit}:"  # --check, then a VERDICT_LINE a patch
CHECKING_EMPTY = "patches: the series is empty; the checkout is the pin {commit} as it is"
THE_CHECKOUT = "the checkout {name}"  # what the sync's lock guards (ci.locks' HELD)


@dataclass(frozen=True)
class Source:
    """What the checkout must become: a commit of the fork with a series on top, and where both live."""

    name: str  # the submodule's path in the project, for messages
    workdir: Path
    gitdir: Path  # the fork store: the submodule's git dir
    commit: str
    url: str  # fetched when the store lacks the commit and no --remote is given
    omit: tuple[str, ...]
    series: Series

    @property
    def short(self) -> str:
        return self.commit[:7]


class Action(Enum):
    NOTHING = "already there"
    CHECKOUT = "check out"
    MOVE = "move"
    RESET = "discard changes and move"


@dataclass(frozen=True)
class Before:
    """The checkout as it was: HEAD, the index's tree and the work tree's tree (None: no checkout)."""

    head: str | None
    index: str
    worktree: str
    branch: str | None = None  # the branch HEAD was on (refs/heads/...), None when detached


@dataclass(frozen=True)
class SyncPlan:
    source: Source
    series_plan: SeriesPlan
    action: Action
    before: Before | None
    discarded: tuple[str, ...] = ()  # with reset: the paths whose changes go

    def describe(self) -> str:
        s = self.source
        n = len(s.series.patches)
        what = SERIES_WHAT.format(patches=count(n, "patch"), digest=s.series.digest[:12])
        if self.action is Action.NOTHING:
            return ALREADY_APPLIED.format(series=what, commit=s.short)
        if self.action is Action.CHECKOUT:
            return CHECKED_OUT.format(name=s.name, commit=s.short, omitted=", ".join(s.omit) or "nothing", series=what)
        moved = MOVED_FROM.format(commit=self.before.head[:7]) if self.before and self.before.head and self.before.head != s.commit else ""
        if self.action is Action.RESET:
            files = count(len(self.discarded), "file")
            return DISCARDED.format(files=files, listing=", ".join(self.discarded[:LISTED]), series=what, commit=s.short, moved=moved)
        return APPLIED.format(series=what, commit=s.short, moved=moved)


@dataclass(frozen=True)
class Record:
    commit: str
    tree: str
    series: str

    @classmethod
    def read(cls, gitdir: Path) -> Record | None:
        path = gitdir / RECORD
        try:
            data = parse_json(path.read_bytes())
            return cls(str(data["commit"]), str(data["tree"]), str(data["series"]))
        except (OSError, ValueError, KeyError, TypeError, RecursionError):
            return None  # no record, or a damaged one: the checkout is then judged as if never synced

    def write(self, gitdir: Path) -> None:
        write_atomic(gitdir / RECORD, json.dumps({"commit": self.commit, "tree": self.tree, "series": self.series}, indent=2) + "\n")


# -- 1. fetch -------------------------------------------------------------------------------------------------------


def ensure_commit(source: Source, remote: str | None, say: Callable[[str], None] = log.info) -> ForkStore:
    """The fork store, holding the commit: fetched from ``remote`` when given, from the pinned URL when missing."""
    # the store's core.worktree names the checkout, and git goes there for every command: a checkout removed by hand
    # (rm -rf) failed every git of the next sync with "cannot chdir"; an empty folder is checked out anew
    source.workdir.mkdir(parents=True, exist_ok=True)
    store = ForkStore.open(source.gitdir)
    if not remote:
        store.check_alternates()  # a mirror an older store borrowed from, moved: one line, not git's own errors
    if remote or not store.has_commit(source.commit):
        where = remote or source.url
        say(f"fetching {where}")
        say(f"fetched {store.sync(where)}")
        if not store.has_commit(source.commit):
            raise GitError(f"the pinned commit {source.commit[:12]} is not in {where}; pass --remote with a mirror that has it")
    return store


# -- 2. decide ------------------------------------------------------------------------------------------------------


def judge_series(source: Source, store: ForkStore, workdir: Path | None, series_plan: SeriesPlan | None = None) -> SeriesPlan:
    """``source.series`` at the pin, as a sync needs it: its paths (no link, nothing outside the fork or omitted) and
    every patch applying; a Refused naming what does not, before anything is written (export_patches asks too)."""
    check_paths(source.series, store.tree_of(source.commit), workdir, source.omit)
    plan = series_plan or classify(source.gitdir, source.commit, source.series)
    if not plan.clean:
        raise Refused(SERIES_DOES_NOT_APPLY.format(listing=plan.not_applying()))
    return plan


def prepare(source: Source, store: ForkStore, *, reset: bool = False, series_plan: SeriesPlan | None = None) -> SyncPlan:
    """What :func:`execute` will do; a Refused (nothing written) when the series does not apply or the checkout
    holds changes this tool did not make."""
    plan = judge_series(source, store, source.workdir if source.workdir.is_dir() else None, series_plan)
    if not is_checked_out(source.workdir):
        return SyncPlan(source, plan, Action.CHECKOUT, None)
    git = Git(source.gitdir, source.workdir)
    head = head_of(git)
    branch = git.run("symbolic-ref", "-q", "HEAD", check=False).output.strip() or None
    before = Before(head, git.write_tree(), checkout.worktree_tree(git), branch)
    target = plan.tree
    if head == source.commit and before.index == target and before.worktree == target:
        return SyncPlan(source, plan, Action.NOTHING, before)
    if head is not None and _ours(git, source, before, head, target):
        return SyncPlan(source, plan, Action.MOVE, before)
    base = _base(git, source, head)
    if head is None and before.worktree == base:  # attached, never checked out (an interrupted first sync): empty
        return SyncPlan(source, plan, Action.MOVE, before)
    changed = sorted(set(git.changed_between(base, before.worktree)) | set(git.changed_between(base, before.index)))
    if reset:
        return SyncPlan(source, plan, Action.RESET, before, tuple(changed))
    listing = listed(changed, LISTED)
    at = AT_COMMIT.format(commit=head[:7]) if head else NO_COMMIT_CHECKED_OUT
    raise Refused(LOCAL_CHANGES.format(name=source.name, at=at, listing=listing))


def _ours(git: Git, source: Source, before: Before, head: str, target: str) -> bool:
    """Whether moving loses nothing: clean at HEAD, exactly what this tool applied at HEAD, or already the target."""
    record = Record.read(source.gitdir)
    known = {git.tree_of(head)}
    if record is not None and record.commit == head:
        known.add(record.tree)
    if before.worktree == before.index and before.index in known:
        return True
    if head == source.commit and before.worktree == target:
        return True
    # HEAD + series in the work tree with the index at HEAD and no record: how earlier versions of this tool
    # applied the series; once synced, the record says it
    return record is None and before.index == git.tree_of(head) and before.worktree == classify(source.gitdir, head, source.series).tree


def _base(git: Git, source: Source, head: str | None) -> str:
    """The tree a refusal lists changes against: what this tool applied at HEAD, else HEAD's tree."""
    record = Record.read(source.gitdir)
    if head is not None and record is not None and record.commit == head:
        return record.tree
    if head is not None:
        return git.tree_of(head)
    return git.run("hash-object", "-t", "tree", "/dev/null").output.strip()  # the empty tree


# -- 3. move --------------------------------------------------------------------------------------------------------


def execute(plan: SyncPlan) -> None:
    """Bring the checkout to the plan's tree with HEAD at the commit; put it back as it was on any failure."""
    if plan.action is Action.NOTHING:
        return
    source = plan.source
    if plan.action is Action.CHECKOUT:
        git = checkout.attach(source.gitdir, source.workdir, source.omit)
    else:
        git = Git(source.gitdir, source.workdir)
        checkout.set_sparse(git, source.omit)
    try:
        git.run("read-tree", "--reset", "-u", plan.series_plan.tree)
        if plan.action is Action.RESET:
            git.run("clean", "-f", "-d", "-q")
        git.run("update-ref", "--no-deref", "HEAD", source.commit)
        Record(source.commit, plan.series_plan.tree, source.series.digest).write(source.gitdir)
    except BaseException:
        _put_back(git, plan)
        raise


def _put_back(git: Git, plan: SyncPlan) -> None:
    before = plan.before
    if before is None:  # a fresh checkout: the directory was empty (attach checked), and is again
        for path in plan.source.workdir.iterdir():
            if path.is_dir() and not path.is_symlink():
                shutil.rmtree(path, ignore_errors=True)
            else:
                path.unlink(missing_ok=True)
        return
    try:
        git.run("read-tree", "--reset", "-u", before.worktree)  # the files as they were, untracked ones included
        git.run("read-tree", before.index)  # the index as it was, the files left alone
        if before.branch is not None:  # on a branch: HEAD names it again (its ref was never moved)
            git.run("symbolic-ref", "HEAD", before.branch)
        elif before.head is not None:
            git.run("update-ref", "--no-deref", "HEAD", before.head)
        if plan.source.omit:  # read-tree --reset drops the omitted paths' skip-worktree bits: git would see them deleted
            git.run("sparse-checkout", "reapply")
    except GitError as exc:
        log.error("%s: could not be put back as it was (%s); its files are in the store as tree %s", plan.source.name, exc.message, before.worktree[:12])


def sync(source: Source, *, remote: str | None = None, reset: bool = False, say: Callable[[str], None] = log.info) -> SyncPlan:
    """Fetch, decide, move: the checkout ends exactly at pin + series, or is refused untouched. One sync at a time per
    checkout (a lock in the fork store; a second refuses, naming the holder)."""
    from ci.locks import LOCK_NAME, command_line, held_lock

    source.gitdir.mkdir(parents=True, exist_ok=True)
    with held_lock(source.gitdir / LOCK_NAME, "patches", THE_CHECKOUT.format(name=source.workdir.name), purpose=command_line()):
        store = ensure_commit(source, remote, say)
        plan = prepare(source, store, reset=reset)
        execute(plan)
        return plan


def check(source: Source, remote: str | None, say: Callable[[str], None]) -> int:
    """``nox -s patches -- --check``: each patch's fate at the pin; nothing is written. 4 when one does not apply."""
    store = ensure_commit(source, remote, say=log.info)
    check_paths(source.series, store.tree_of(source.commit), source.workdir if source.workdir.is_dir() else None, source.omit)
    plan = classify(source.gitdir, source.commit, source.series)
    if not source.series.patches:
        say(CHECKING_EMPTY.format(commit=source.short))
        return 0
    say(CHECKING.format(patches=count(len(source.series.patches), "patch"), digest=source.series.digest[:12], commit=source.short))
    for line in plan.lines():
        say(VERDICT_LINE.format(verdict=line))
    return 0 if plan.clean else Refused.exit_code
