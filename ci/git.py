"""git itself, through :func:`ci.command.run`, on the fork store: apply, check, reverse, patch-id, read-tree.

The store is the submodule's git directory. A command on the checkout names it with ``GIT_DIR`` and the work
tree with ``GIT_WORK_TREE``; a command on a scratch index (classification) names a temporary ``GIT_INDEX_FILE``
and no work tree, so nothing the user sees is touched. Messages are read in the C locale.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from ci.command import Completed, run
from ci.errors import CommandFailed, GitError

# variables a calling git (a hook, a git alias) may have set, which would point our commands elsewhere
_INHERITED = ("GIT_DIR", "GIT_WORK_TREE", "GIT_INDEX_FILE", "GIT_OBJECT_DIRECTORY", "GIT_ALTERNATE_OBJECT_DIRECTORIES", "GIT_PREFIX")
_OFFSET_RE = re.compile(r"^Hunk #(\d+) succeeded at (\d+) \(offset (-?\d+) lines?\)\.$", re.MULTILINE)
_FAILED_AT_RE = re.compile(r"^error: patch failed: (.+):(\d+)$", re.MULTILINE)
_OBJECT_RE = re.compile(r"\A(?:[0-9a-f]{40}|[0-9a-f]{64})\Z")
_LOCK_RE = re.compile(r"Unable to create '([^']+\.lock)': File exists")
# Every git this tool starts runs git's own housekeeping in the foreground. A command that writes objects (commit, am,
# fetch, merge) then starts ``git gc --auto`` (``git maintenance run --auto`` since git 2.29), which by default
# (gc.autoDetach; maintenance.autoDetach from git 2.47, falling back to it) forks itself off and outlives the command:
# a ``git gc`` left running in the fork store, or, where the command layer adopts orphans (ci.command), ended with the
# command's tree half-way through a repack. In the foreground it is part of the command, and over when the command is.
# Not gc.auto=0: the loose objects the tool writes itself (write-tree, apply --cached, a bisect's steps) would then
# pile up with nothing to pack them. Given as ``-c``, git hands the settings on to each git it starts
# (GIT_CONFIG_PARAMETERS); a git that does not know maintenance.autoDetach ignores it.
AUTO_GC_IN_THE_FOREGROUND = ("-c", "gc.autoDetach=false", "-c", "maintenance.autoDetach=false")

# Messages, shared with the tests that match on them (tests/support/messages.py)
LOCKED = "{lock} exists: another git is working in {where}; wait for it, or remove the lock if none runs"
HUNK_AT_OFFSET = "{path}: hunk {number} at offset {offset:+d} lines"
HUNK_DOES_NOT_MATCH = "{path}: hunk {number} ({header}) does not match"


@dataclass(frozen=True)
class Git:
    """One repository as git sees it: a git dir, and optionally a work tree and an index of its own."""

    gitdir: Path
    worktree: Path | None = None
    index: Path | None = None

    def env(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if k not in _INHERITED}
        env |= {"GIT_DIR": str(self.gitdir), "LC_ALL": "C", "LANGUAGE": "C"}
        if self.worktree is not None:
            env["GIT_WORK_TREE"] = str(self.worktree)
        if self.index is not None:
            env["GIT_INDEX_FILE"] = str(self.index)
        return env

    def run(self, *args: str | os.PathLike[str], check: bool = True, stdin: Path | None = None) -> Completed:
        given = [os.fspath(a) for a in args]
        argv = ["git", *AUTO_GC_IN_THE_FOREGROUND, *given]
        cwd = self.worktree if self.worktree is not None else self.gitdir
        try:
            return run(argv, env=self.env(), cwd=cwd, check=check, quiet=True, stdin=stdin, what=f"git {given[0]}")
        except CommandFailed as exc:
            lock = _LOCK_RE.search(exc.tail)
            if lock:
                raise GitError(LOCKED.format(lock=lock.group(1), where=self.worktree or self.gitdir)) from None
            raise GitError(f"git {' '.join(given[:2])} failed in {self.worktree or self.gitdir}: {first_error(exc.tail)}") from None

    def text(self, *args: str | os.PathLike[str]) -> str:
        return self.run(*args).output.strip()

    def object_name(self, *args: str | os.PathLike[str]) -> str:
        """The object id a command prints; its warnings (stderr, in the same output) are never taken for one."""
        output = self.run(*args).output
        names = [ln.strip() for ln in output.splitlines() if _OBJECT_RE.match(ln.strip())]
        if len(names) != 1:
            raise GitError(
                f"git {' '.join(os.fspath(a) for a in args[:2])} in {self.worktree or self.gitdir}: no object id in its output: {first_error(output)}"
            )
        return names[0]

    def tree_of(self, rev: str) -> str:
        return self.object_name("rev-parse", f"{rev}^{{tree}}")

    def write_tree(self) -> str:
        return self.object_name("write-tree")

    def changed_between(self, a: str, b: str) -> list[str]:
        """Paths that differ between two trees (or commits)."""
        out = self.run("diff-tree", "-r", "-z", "--no-renames", "--name-only", a, b).output
        return [p for p in out.split("\0") if p]


def first_error(output: str) -> str:
    """The first ``error:``/``fatal:`` line of git's output, without its prefix; else the last line."""
    lines = [ln.strip() for ln in output.splitlines() if ln.strip()]
    for ln in lines:
        for prefix in ("error: ", "fatal: "):
            if ln.startswith(prefix):
                return ln[len(prefix) :]
    return lines[-1] if lines else "no output"


@dataclass(frozen=True)
class Applied:
    """What ``git apply`` said: whether it applied, and the hunks it found at an offset, or why it did not."""

    ok: bool
    offsets: tuple[str, ...] = ()
    error: str = ""


def apply_cached(git: Git, patch: Path, *, reverse: bool = False, check_only: bool = False) -> Applied:
    """``git apply --cached`` of one patch file to ``git``'s index, all or nothing (git's own offset search)."""
    args = ["apply", "--cached", "-v"]
    if reverse:
        args.append("-R")
    if check_only:
        args.append("--check")
    done = git.run(*args, patch, check=False)
    if done.returncode == 0:
        return Applied(True, tuple(_offsets(done.output)))
    return Applied(False, error=_apply_error(done.output, patch))


def _offsets(output: str) -> Iterator[str]:
    path = ""
    for line in output.splitlines():
        if line.startswith("Checking patch ") and line.endswith("..."):
            path = line[len("Checking patch ") : -3]
        elif (m := _OFFSET_RE.match(line)) is not None:
            yield HUNK_AT_OFFSET.format(path=path, number=m.group(1), offset=int(m.group(3)))


def _apply_error(output: str, patch: Path) -> str:
    """git apply's reason, with the failing hunk named by its number and header when git gives the line."""
    m = _FAILED_AT_RE.search(output)
    if m:
        path, line = m.group(1), int(m.group(2))
        for n, header in hunks_of(patch.read_text(encoding="utf-8", errors="replace"), path):
            start = int(header.split()[1].split(",")[0].lstrip("-"))
            if start == line:
                return HUNK_DOES_NOT_MATCH.format(path=path, number=n, header=header)
        return f"{path}: the hunk at line {line} does not match"
    return first_error(output)


def hunks_of(diff_text: str, path: str) -> Iterator[tuple[int, str]]:
    """(number, ``@@ -a,b +c,d @@``) of each hunk of ``path`` in ``diff_text``."""
    current, n = None, 0
    for line in diff_text.splitlines():
        if line.startswith("diff --git "):
            current, n = None, 0
        elif line.startswith("--- "):
            old = line[4:]
            current = old[2:] if old.startswith("a/") else old
        elif line.startswith("@@ ") and current == path:
            n += 1
            m = re.match(r"@@[^@]*@@", line)
            yield n, m.group(0) if m else line


def patch_id(git: Git, patch: Path) -> str | None:
    """``git patch-id --stable`` of a patch file (None for a patch with no change in it)."""
    words = git.run("patch-id", "--stable", stdin=patch).output.split()
    return words[0] if words else None


def range_patch_ids(git: Git, since: str, until: str, scratch: Path) -> dict[str, str]:
    """patch-id -> "sha subject" of every non-merge commit in ``since..until`` (``git log -p | git patch-id``)."""
    log_file = scratch / "range.log"
    with log_file.open("w") as fh:
        fh.write(git.run("log", "--no-merges", "-p", "--format=commit %H%n%s", f"{since}..{until}").output)
    subjects: dict[str, str] = {}
    lines = log_file.read_text().splitlines()
    for i, line in enumerate(lines):
        if line.startswith("commit ") and len(line) == 47 and i + 1 < len(lines):
            subjects[line[7:]] = lines[i + 1]
    out: dict[str, str] = {}
    for row in git.run("patch-id", "--stable", stdin=log_file).output.splitlines():
        pid, _, sha = row.partition(" ")
        out.setdefault(pid, f"{sha[:7]} {subjects.get(sha, '')}".rstrip())
    return out


def is_checked_out(workdir: Path) -> bool:
    return (workdir / ".git").exists()


def head_of(git: Git) -> str | None:
    """The commit HEAD names, None when it is unborn."""
    done = git.run("rev-parse", "--verify", "-q", "HEAD^{commit}", check=False)
    return done.output.strip() if done.returncode == 0 else None
