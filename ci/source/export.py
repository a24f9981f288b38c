"""``nox -s export_patches``: the commits of a local branch of the checkout, from the pin, back into ``patches/``.

Each commit becomes one patch, written by ``git format-patch`` and read back as the series reads it (so a commit
without the ``Upstream:``/``Drop-when:`` trailers is refused before anything is written). ``patches/`` is written
all or nothing; then, when that loses nothing, the checkout goes back to the pin with the new series applied.
"""

from __future__ import annotations

import re
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

from ci.errors import ConfigError, Refused
from ci.files import all_or_nothing, write_atomic
from ci.git import Git, head_of, is_checked_out
from ci.source import sync
from ci.source.series import SERIES_FILE, load_series, parse_patch, series_text
from ci.source.store import ForkStore
from ci.words import count

# Messages, shared with the tests that match on them (tests/support/messages.py)
NO_LOCAL_BRANCH = "{name}: no local branch {branch}; create it with git -C {name} switch -c {branch}"
NOT_FROM_PIN = "branch {branch} does not start from the pin {commit}; rebase it onto {commit} first"
COMMIT_DISPLAY = "commit {commit} ({subject})"
BACK_TO_SERIES = "git -C {name} switch --detach {commit}, then nox -s patches"
LEFT_UNCOMMITTED = "export_patches: the checkout has uncommitted changes, so it was left on {branch}; to build the series: {back}"
BACK_AT_PIN = "{synced} (the checkout is back at the pin; branch {branch} keeps the commits)"
EMPTY_COMMITS = "{branch}: {commits} commits but {patches} patches: a commit that changes nothing has none; drop it (git rebase -i)"
WROTE = "export_patches: wrote {patches} from {branch} into patches/ (series rewritten)"
WROTE_PATCH = "  {patch}"
REMOVED_PATCH = "  removed {patch}"


@dataclass(frozen=True)
class ExportPlan:
    files: tuple[tuple[str, bytes], ...]  # (name, format-patch bytes) in series order
    stale: tuple[str, ...]  # patch files of the old series that the new one no longer lists
    series_text: str


def plan_export(source: sync.Source, directory: Path, branch: str) -> ExportPlan:
    if not is_checked_out(source.workdir):
        raise Refused(f"{source.name}: not checked out; run nox -s patches, commit your changes on a branch there, then export")
    git = Git(source.gitdir, source.workdir)
    ref = f"refs/heads/{branch}"
    if git.run("rev-parse", "--verify", "-q", ref, check=False).returncode != 0:
        raise ConfigError(NO_LOCAL_BRANCH.format(name=source.name, branch=branch))
    if git.run("merge-base", "--is-ancestor", source.commit, ref, check=False).returncode != 0:
        raise Refused(NOT_FROM_PIN.format(branch=branch, commit=source.short))
    commits = git.text("rev-list", "--reverse", "--topo-order", "--parents", f"{source.commit}..{ref}").splitlines()
    for row in commits:
        sha, *parents = row.split()
        if len(parents) != 1:
            raise Refused(f"commit {sha[:12]} on {branch} is a merge; a series is linear: rebase the branch")
    subjects = git.run("log", "--reverse", "--topo-order", "--format=%s", f"{source.commit}..{ref}").output.splitlines()
    files: list[tuple[str, bytes]] = []
    series_file = directory / SERIES_FILE
    old_text = series_file.read_text(encoding="utf-8") if series_file.is_file() else ""
    with tempfile.TemporaryDirectory(prefix="onebit-export-") as tmp:
        # git writes the patches itself, byte for byte, one file a commit in the branch's order (0001-..., a linear
        # range): read through a text pipe, a CR or a byte that is not UTF-8 came back changed (U+FFFD for 0xe9)
        written = Path(tmp) / "format-patch"
        git.run("format-patch", "--no-numbered", "--no-signature", "--zero-commit", "-o", written, f"{source.commit}..{ref}")
        patches = sorted(written.iterdir()) if written.is_dir() else []
        if len(patches) != len(commits):  # format-patch leaves out a commit that changes nothing
            raise Refused(EMPTY_COMMITS.format(branch=branch, patches=len(patches), commits=len(commits)))
        staged = Path(tmp) / directory.name
        staged.mkdir()
        for row, subject, patch in zip(commits, subjects, patches, strict=True):
            data = patch.read_bytes()
            name = _unique(slug(subject), {n for n, _ in files})
            (staged / name).write_bytes(data)
            parse_patch(staged / name, COMMIT_DISPLAY.format(commit=row[:12], subject=subject))
            files.append((name, data))
        names = [n for n, _ in files]
        new_text = series_text(names, old_text)
        (staged / SERIES_FILE).write_text(new_text, encoding="utf-8")
        # the new series as the next sync will judge it, before patches/ is touched: before, this came after the
        # write and left patches/ rewritten with a series that did not apply
        sync.judge_series(replace(source, series=load_series(staged)), ForkStore.open(source.gitdir), None)
    old = load_series(directory)
    return ExportPlan(tuple(files), tuple(n for n in old.names if n not in names), new_text)


def write_export(directory: Path, plan: ExportPlan) -> None:
    touched = [directory / n for n, _ in plan.files] + [directory / n for n in plan.stale] + [directory / SERIES_FILE]
    with all_or_nothing(touched):
        for name, data in plan.files:
            write_atomic(directory / name, data)
        write_atomic(directory / SERIES_FILE, plan.series_text)
        for name in plan.stale:
            (directory / name).unlink()


def back_to_series(source: sync.Source, directory: Path, branch: str) -> str:
    """After an export, put the checkout back at the pin with the new series applied (what every other session
    expects) when that loses nothing: HEAD is the exported branch, which keeps the commits, and nothing is
    uncommitted. Otherwise leave it as it is and say how to go back."""
    git = Git(source.gitdir, source.workdir)
    back = BACK_TO_SERIES.format(name=source.name, commit=source.short)
    on = git.run("symbolic-ref", "-q", "--short", "HEAD", check=False).output.strip()
    if on != branch:
        return f"export_patches: the checkout is not on {branch}, so it was left as it is; to build the series: {back}"
    head = head_of(git)
    if head is None or git.run("status", "--porcelain", "--untracked-files=all").output.strip():
        return LEFT_UNCOMMITTED.format(branch=branch, back=back)
    done = sync.sync(replace(source, series=load_series(directory)))
    return BACK_AT_PIN.format(synced=done.describe(), branch=branch)


def slug(subject: str) -> str:
    s = re.sub(r"[^A-Za-z0-9]+", "-", subject).strip("-").lower()
    return (s[:60].rstrip("-") or "patch") + ".patch"


def _unique(name: str, taken: set[str]) -> str:
    stem, n = name[: -len(".patch")], 2
    while name in taken:
        name, n = f"{stem}-{n}.patch", n + 1
    return name


def session(source: sync.Source, directory: Path, branch: str, say: Callable[[str], None]) -> int:
    """``nox -s export_patches -- --branch B``."""
    plan = plan_export(source, directory, branch)
    write_export(directory, plan)
    say(WROTE.format(patches=count(len(plan.files), "patch"), branch=branch))
    for name, _ in plan.files:
        say(WROTE_PATCH.format(patch=name))
    for name in plan.stale:
        say(REMOVED_PATCH.format(patch=name))
    say(back_to_series(source, directory, branch))
    return 0
