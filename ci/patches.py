"""The patch series on top of the pinned fork: load and check it, classify it against a commit, apply it.

``patches/series`` gives the order (Electron and quilt use an order file: numbered names conflict); each
``patches/NAME.patch`` is a git format-patch file whose message carries ``Upstream:`` (a URL, or
``not-needed: <reason>``) and ``Drop-when:`` trailers.

Classification never touches the checkout: the series is applied, patch by patch, to the index of a scratch
repository that borrows the fork store's objects (libgit2's ``git_apply`` on an index is ``git apply
--cached``), so the result of the whole series is known before anything is written.
"""

from __future__ import annotations

import contextlib
import hashlib
import re
import shutil
import tempfile
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from enum import Enum
from pathlib import Path, PurePosixPath

import pygit2
from pygit2.enums import ApplyLocation, DeltaStatus, FileMode, FileStatus

from ci.errors import ConfigError, GitError, Refused
from ci.pins import Pins
from ci.project import Project
from ci.words import count

PATCHES_DIR = "patches"
SERIES_FILE = "series"
URL_RE = re.compile(r"^https?://\S+$")
TRAILER_RE = re.compile(r"^(Upstream|Drop-when):[ \t]*(.*)$", re.MULTILINE)
PATH_LINE_RE = re.compile(r"^(?:diff --git a/(\S+) b/(\S+)|--- (?:a/)?(\S+)|\+\+\+ (?:b/)?(\S+)|(?:rename|copy) (?:from|to) (\S+))\s*$", re.MULTILINE)


# -- the series on disk ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Patch:
    name: str
    data: bytes
    subject: str
    upstream: str
    drop_when: str
    diff_text: str

    def diff(self) -> pygit2.Diff:
        return pygit2.Diff.parse_diff(self.diff_text)

    def paths(self) -> set[str]:
        out: set[str] = set()
        for d in self.diff().deltas:
            out |= {d.old_file.path, d.new_file.path}
        return out

    @property
    def upstreamed_url(self) -> str | None:
        return self.upstream if URL_RE.match(self.upstream) else None


@dataclass(frozen=True)
class Series:
    directory: Path
    patches: tuple[Patch, ...]

    @property
    def digest(self) -> str:
        """sha256 over the series in order: each patch's name and bytes. Part of the build identity."""
        h = hashlib.sha256()
        for p in self.patches:
            h.update(p.name.encode() + b"\0" + hashlib.sha256(p.data).digest())
        return h.hexdigest()

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(p.name for p in self.patches)

    def touches(self, prefix: str) -> bool:
        """Whether any patch changes a path under ``prefix`` (ggml/: its build commit turns -dirty)."""
        return any(path.startswith(prefix) for p in self.patches for path in p.paths())

    def without(self, names: Sequence[str]) -> Series:
        return Series(self.directory, tuple(p for p in self.patches if p.name not in names))


def series_text(names: Sequence[str], old_text: str = "") -> str:
    """The series file listing ``names``, keeping the leading comment block of ``old_text``."""
    head = []
    for line in old_text.splitlines():
        if line.startswith("#") or not line.strip():
            head.append(line)
        else:
            break
    while head and not head[-1].strip():
        head.pop()
    return "\n".join([*head, *names]) + "\n" if (head or names) else ""


def load_series(directory: Path) -> Series:
    rel = f"{directory.name}/{SERIES_FILE}"
    path = directory / SERIES_FILE
    if not path.is_file():
        return Series(directory, ())
    names: list[str] = []
    for n, raw in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if "/" in line or not line.endswith(".patch"):
            raise ConfigError(f'{rel}:{n}: "{line}" is not a patch file name (NAME.patch, in {directory.name}/)')
        if line in names:
            raise ConfigError(f'{rel}:{n}: "{line}" is listed twice')
        if not (directory / line).is_file():
            raise ConfigError(f"{rel}:{n}: {line} does not exist in {directory.name}/; add it or remove the line")
        names.append(line)
    return Series(directory, tuple(parse_patch(directory / name, f"{directory.name}/{name}") for name in names))


def parse_patch(path: Path, display: str) -> Patch:
    data = path.read_bytes()
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise ConfigError(f"{display}: not UTF-8 text; write it with git format-patch") from None
    start = text.find("diff --git ")
    if start < 0:
        raise ConfigError(f"{display}: no diff in it (no 'diff --git' line); write it with git format-patch")
    head, diff_text = text[:start], text[start:]
    diff_text = re.sub(r"\n-- \n[^\n]*\n?\s*\Z", "\n", diff_text)  # format-patch's signature
    if "\r\n" in head:
        raise ConfigError(f"{display}: has CRLF line endings in its headers (an editor or autocrlf rewrote it); restore it with LF endings")
    subject = _subject(head)
    if not subject:
        raise ConfigError(f"{display}: no Subject: line; write it with git format-patch")
    message = head.split("\n---\n", 1)[0]
    trailers = {k: v.strip() for k, v in TRAILER_RE.findall(message)}
    upstream = trailers.get("Upstream", "")
    if not upstream:
        raise ConfigError(f'{display}: no "Upstream:" trailer; add one: the URL where it was sent, or "not-needed: <reason>"')
    if not URL_RE.match(upstream) and not re.match(r"^not-needed:\s*\S", upstream):
        raise ConfigError(f'{display}: Upstream: "{upstream}" is neither a URL nor "not-needed: <reason>"')
    drop_when = trailers.get("Drop-when", "")
    if not drop_when:
        raise ConfigError(f'{display}: no "Drop-when:" trailer; say when the patch can go (e.g. "the pin includes <PR>")')
    try:
        pygit2.Diff.parse_diff(diff_text)
    except pygit2.GitError as exc:
        raise ConfigError(f"{display}: the diff cannot be parsed ({exc})") from None
    return Patch(path.name, data, subject, upstream, drop_when, diff_text)


def _subject(head: str) -> str:
    m = re.search(r"^Subject: (.*(?:\n[ \t].*)*)", head, re.MULTILINE)
    if not m:
        return ""
    subject = re.sub(r"\s*\n[ \t]+", " ", m.group(1)).strip()
    return re.sub(r"^\[PATCH[^\]]*\]\s*", "", subject)


# -- what a patch may touch -----------------------------------------------------------------------------------


def check_paths(series: Series, tree: pygit2.Tree, workdir: Path | None, omit: tuple[str, ...] = ()) -> None:
    """Refuse, before anything is written, a patch that reaches outside the checkout or into ``.git``."""
    for patch in series.patches:
        display = f"patches/{patch.name}"
        raw = {g for m in PATH_LINE_RE.finditer(patch.diff_text) for g in m.groups() if g and g != "/dev/null"}
        parsed: set[str] = set()
        for d in patch.diff().deltas:
            parsed |= {d.old_file.path, d.new_file.path}
            if d.new_file.mode == FileMode.LINK and d.status is not DeltaStatus.DELETED:
                raise Refused(f"{display}: adds a symbolic link {d.new_file.path}; patches may not create links (they could point outside the checkout)")
        for path in sorted(raw | parsed):
            problem = _escape(path, tree, workdir)
            if problem is None and any(path.startswith(o) for o in omit):
                problem = "a path the checkout leaves out (pins.yaml checkout.omit)"
            if problem:
                raise Refused(f"{display}: touches {path}: {problem}; nothing was applied")


def _escape(path: str, tree: pygit2.Tree, workdir: Path | None) -> str | None:
    if path.startswith("/") or re.match(r"^[A-Za-z]:[\\/]", path):
        return "an absolute path"
    parts = PurePosixPath(path).parts
    if ".." in parts or "\\" in path:
        return "a path outside the checkout"
    if any(part.lower() == ".git" for part in parts):
        return "a path inside .git"
    for i in range(1, len(parts)):
        prefix = "/".join(parts[:i])
        try:
            entry = tree[prefix]
        except KeyError:
            entry = None
        if entry is not None and entry.filemode == FileMode.LINK:
            return f"a path through the symbolic link {prefix}"
        if workdir is not None and (workdir / prefix).is_symlink():
            return f"a path through the symbolic link {prefix}"
    return None


# -- classification -------------------------------------------------------------------------------------------


class Fate(Enum):
    APPLIES = "applies"
    UPSTREAM = "already upstream"
    CONFLICTS = "conflicts"


@dataclass(frozen=True)
class Verdict:
    patch: str
    fate: Fate
    detail: str = ""  # for a conflict: the file and the hunk; for upstream: how it was recognised
    moved: str = ""  # the patch's diff with its hunks moved to where they apply (relocate), when they had to move

    def line(self) -> str:
        return f"{self.patch}: {self.fate.value}" + (f" ({self.detail})" if self.detail else "")


@dataclass(frozen=True)
class SeriesPlan:
    """The series against one base commit: each patch's fate and the tree of base + the applicable patches."""

    base: str
    digest: str
    verdicts: tuple[Verdict, ...]
    tree: str  # base tree + every patch that applies, in order

    @property
    def conflicts(self) -> tuple[Verdict, ...]:
        return tuple(v for v in self.verdicts if v.fate is Fate.CONFLICTS)

    @property
    def upstreamed(self) -> tuple[Verdict, ...]:
        return tuple(v for v in self.verdicts if v.fate is Fate.UPSTREAM)

    @property
    def clean(self) -> bool:
        return all(v.fate is Fate.APPLIES for v in self.verdicts)


@contextlib.contextmanager
def scratch_index(store: pygit2.Repository, commit: pygit2.Commit) -> Iterator[pygit2.Repository]:
    """A throwaway repository with HEAD and index at ``commit`` whose object directory is ``store``'s own.

    Sharing the object directory (not borrowing it through alternates) keeps the trees and blobs the series
    produces in the store, where the checkout finds them afterwards.
    """
    tmp = tempfile.mkdtemp(prefix="onebit-series-")
    try:
        gitdir = Path(tmp) / ".git"
        pygit2.init_repository(tmp)
        shutil.rmtree(gitdir / "objects")
        (gitdir / "objects").symlink_to(Path(store.path).resolve() / "objects", target_is_directory=True)
        repo = pygit2.Repository(tmp)
        repo.set_head(commit.id)
        repo.index.read_tree(commit.tree)
        yield repo
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def classify(store: pygit2.Repository, base: str, series: Series, since: str | None = None) -> SeriesPlan:
    """Each patch in order against ``base`` + the patches before it that apply.

    A patch that does not apply is already upstream when its reverse applies (its change is there), or when its
    patch-id equals that of a commit in ``since..base``; otherwise it conflicts, named with file and hunk.
    """
    commit = store[base]
    if not isinstance(commit, pygit2.Commit):
        raise GitError(f"{base[:12]}: not a commit in the fork store")
    range_ids = _range_patch_ids(store, since, base) if since else {}
    verdicts: list[Verdict] = []
    with scratch_index(store, commit) as repo:
        for patch in series.patches:
            diff = patch.diff()
            applied = _applies_somewhere(repo, patch.diff_text)
            if applied is not None:
                text, notes = applied
                repo.apply(pygit2.Diff.parse_diff(text), ApplyLocation.INDEX)
                verdicts.append(Verdict(patch.name, Fate.APPLIES, "; ".join(notes), text if notes else ""))
                continue
            if _applies_somewhere(repo, reverse_diff(patch.diff_text)) is not None:
                verdicts.append(Verdict(patch.name, Fate.UPSTREAM, "its change is already in the tree"))
                continue
            pid = str(diff.patchid)
            if pid in range_ids:
                verdicts.append(Verdict(patch.name, Fate.UPSTREAM, f"same change as {range_ids[pid]}"))
                continue
            verdicts.append(Verdict(patch.name, Fate.CONFLICTS, _conflict_detail(repo, diff)))
        tree = str(repo.index.write_tree())
    return SeriesPlan(base, series.digest, tuple(verdicts), tree)


def _applies_somewhere(repo: pygit2.Repository, diff_text: str) -> tuple[str, list[str]] | None:
    """The diff text that applies to the index, as given or with its hunks relocated, and where they moved; None
    when neither applies. libgit2 looks for a hunk only where its header says; git apply also tries offsets."""
    if repo.applies(pygit2.Diff.parse_diff(diff_text), ApplyLocation.INDEX):
        return diff_text, []
    moved, notes = relocate(diff_text, lambda path: _index_lines(repo, path))
    if notes and repo.applies(pygit2.Diff.parse_diff(moved), ApplyLocation.INDEX):
        return moved, notes
    return None


def _index_lines(repo: pygit2.Repository, path: str) -> list[str] | None:
    if path not in repo.index:
        return None
    blob = repo[repo.index[path].id]
    assert isinstance(blob, pygit2.Blob)
    return blob.data.decode("utf-8", "surrogateescape").splitlines(keepends=True)


HUNK_RE = re.compile(r"^@@ -(\d+)(,\d+)? \+(\d+)(,\d+)? @@")


def relocate(diff_text: str, read: Callable[[str], list[str] | None]) -> tuple[str, list[str]]:
    """Move each hunk to where its preimage (context and removed lines) is in the file ``read`` returns: the place
    its header says, else the nearest one after the hunk before it, forward first, with the offset of the hunk
    before it as the starting point (git apply's search, without fuzz). Returns the rewritten diff and a note per
    hunk that moved; a hunk found nowhere is left as it is, for the apply to fail on."""
    lines = diff_text.splitlines(keepends=True)
    notes: list[str] = []
    path: str | None = None
    content: list[str] | None = None
    offset = floor = number = 0
    i = 0
    while i < len(lines):
        line = lines[i]
        if line.startswith("diff --git "):
            path, content, offset, floor, number = None, None, 0, 0, 0
        elif line.startswith("--- ") and path is None:
            old = line[4:].rstrip("\r\n")
            path = old[2:] if old.startswith("a/") else None
            content = read(path) if path is not None else None
        elif (m := HUNK_RE.match(line)) is not None:
            number += 1
            end = i + 1
            while end < len(lines) and not lines[end].startswith(("@@ ", "diff --git ")):
                end += 1
            pre = _preimage(lines[i + 1 : end])
            start = int(m.group(1)) - 1
            at = _find(content, pre, start + offset, floor) if content is not None and pre else None
            if at is not None and path is not None:
                shift = at - start
                if shift:
                    new_start = int(m.group(3)) + shift
                    lines[i] = f"@@ -{at + 1}{m.group(2) or ''} +{new_start}{m.group(4) or ''} @@{line[m.end() :]}"
                    notes.append(f"{path}: hunk {number} at offset {shift:+d} lines")
                offset, floor = shift, at + len(pre)
            i = end
            continue
        i += 1
    return "".join(lines), notes


def _preimage(body: list[str]) -> list[str]:
    out: list[str] = []
    for k, line in enumerate(body):
        if line[:1] in (" ", "-"):
            text = line[1:]
            if k + 1 < len(body) and body[k + 1].startswith("\\"):  # "\ No newline at end of file"
                text = text[:-1] if text.endswith("\n") else text
            out.append(text)
    return out


def _find(content: list[str], pre: list[str], hint: int, floor: int) -> int | None:
    n = len(pre)

    def fits(at: int) -> bool:
        return floor <= at <= len(content) - n and content[at : at + n] == pre

    if fits(hint):
        return hint
    for d in range(1, len(content) + 1):
        for at in (hint + d, hint - d):
            if fits(at):
                return at
    return None


def _range_patch_ids(store: pygit2.Repository, since: str, until: str) -> dict[str, str]:
    out: dict[str, str] = {}
    walker = store.walk(until)
    with contextlib.suppress(KeyError, ValueError, pygit2.GitError):
        walker.hide(since)
    for c in walker:
        if len(c.parents) != 1:
            continue
        diff = store.diff(c.parents[0], c)
        out[str(diff.patchid)] = f"{str(c.id)[:7]} {c.message.splitlines()[0] if c.message else ''}"
    return out


def _conflict_detail(repo: pygit2.Repository, diff: pygit2.Diff) -> str:
    """The first file and hunk of ``diff`` whose preimage is not in the index (libgit2 says only "hunk at line")."""
    index = repo.index
    for p in diff:
        if p is None:  # libgit2 made no patch for this delta (binary): nothing to locate
            continue
        path = p.delta.old_file.path
        if p.delta.status is DeltaStatus.ADDED:
            if path in index:
                return f"{path}: the file it adds already exists"
            continue
        lines = _index_lines(repo, path)
        if lines is None:
            return f"{path}: the file does not exist"
        for n, hunk in enumerate(p.hunks, 1):
            pre = [ln.content for ln in hunk.lines if ln.origin in (" ", "-")]
            if not _contains(lines, pre):
                m = re.match(r"@@[^@]*@@", hunk.header)
                return f"{path}: hunk {n} ({m.group(0) if m else hunk.header.strip()}) does not match"
    try:
        repo.applies(diff, ApplyLocation.INDEX, raise_error=True)
    except pygit2.GitError as exc:
        return str(exc)
    return "does not apply"


def _contains(lines: list[str], block: list[str]) -> bool:
    if not block:
        return True
    n = len(block)
    return any(lines[i : i + n] == block for i in range(len(lines) - n + 1))


def reverse_diff(text: str) -> str:
    """The unified diff that undoes ``text`` (what ``git apply -R`` applies)."""
    out: list[str] = []
    lines = text.splitlines(keepends=True)
    i = 0
    while i < len(lines):
        line = lines[i]
        if line.startswith("diff --git "):
            m = re.match(r"diff --git a/(\S+) b/(\S+)(\r?\n?)", line)
            out.append(f"diff --git a/{m.group(2)} b/{m.group(1)}{m.group(3)}" if m else line)
        elif line.startswith("--- ") and i + 1 < len(lines) and lines[i + 1].startswith("+++ "):
            old, new = line[4:], lines[i + 1][4:]
            out.append("--- " + _swap_prefix(new, "b/", "a/"))
            out.append("+++ " + _swap_prefix(old, "a/", "b/"))
            i += 1
        elif line.startswith("new file mode "):
            out.append("deleted file mode " + line[len("new file mode ") :])
        elif line.startswith("deleted file mode "):
            out.append("new file mode " + line[len("deleted file mode ") :])
        elif line.startswith("old mode "):
            out.append("new mode " + line[len("old mode ") :])
        elif line.startswith("new mode "):
            out.append("old mode " + line[len("new mode ") :])
        elif line.startswith("rename from "):
            out.append("rename to " + line[len("rename from ") :])
        elif line.startswith("rename to "):
            out.append("rename from " + line[len("rename to ") :])
        elif line.startswith("index "):
            m = re.match(r"index ([0-9a-f]+)\.\.([0-9a-f]+)(.*)", line, re.DOTALL)
            out.append(f"index {m.group(2)}..{m.group(1)}{m.group(3)}" if m else line)
        elif line.startswith("@@ "):
            m = re.match(r"@@ -(\S+) \+(\S+) @@(.*)", line, re.DOTALL)
            out.append(f"@@ -{m.group(2)} +{m.group(1)} @@{m.group(3)}" if m else line)
        elif line.startswith("+") :
            out.append("-" + line[1:])
        elif line.startswith("-"):
            out.append("+" + line[1:])
        else:
            out.append(line)
        i += 1
    return "".join(_reorder_hunk_lines(out))


def _swap_prefix(path: str, old: str, new: str) -> str:
    return new + path[len(old) :] if path.startswith(old) else path


def _reorder_hunk_lines(lines: list[str]) -> list[str]:
    """After swapping +/-, each run of changed lines must list removals before additions, as diff writes them."""
    out: list[str] = []
    run: list[str] = []

    def flush() -> None:
        minus = [ln for ln in run if ln.startswith("-")]
        plus = [ln for ln in run if ln.startswith("+")]
        out.extend(minus + plus)
        run.clear()

    in_hunk = False
    for ln in lines:
        if ln.startswith("@@ "):
            flush()
            in_hunk = True
            out.append(ln)
        elif in_hunk and ln[:1] in ("+", "-") and not ln.startswith(("--- ", "+++ ")):
            run.append(ln)
        elif in_hunk and ln.startswith("\\") and run:
            run[-1] = run[-1] + ln  # "\ No newline at end of file" belongs to the line before it
        else:
            flush()
            if ln.startswith("diff --git "):
                in_hunk = False
            out.append(ln)
    flush()
    return out


# -- the checkout ---------------------------------------------------------------------------------------------


class State(Enum):
    AT_PIN = "clean at the pin"
    PATCHED = "pin + series"
    OTHER = "changed"


@dataclass(frozen=True)
class CheckoutState:
    state: State
    differences: tuple[str, ...] = ()


def checkout_state(repo: pygit2.Repository, pin: str, plan: SeriesPlan, omit: tuple[str, ...]) -> CheckoutState:
    """Is the checkout clean at the pin, exactly pin + series, or something else (with what differs)?

    Built on status (work tree against the index, which stays at the pin) and hashes of the files the series
    changes: a diff of the work tree against a tree would read the blobs of omitted files, which a mirror may lack.
    """
    head = str(repo.head.target) if not repo.head_is_unborn else ""
    if head != pin:
        return CheckoutState(State.OTHER, (f"HEAD is {head[:12] or 'unborn'}, not the pin {pin[:12]}",))
    pin_tree = repo[pin].peel(pygit2.Tree)
    staged = [d.delta.new_file.path for d in repo.index.diff_to_tree(pin_tree)]
    if staged:
        return CheckoutState(State.OTHER, tuple(f"staged {p}" for p in staged[:10]))
    changed = changed_paths(repo, omit)
    if not changed:
        return CheckoutState(State.AT_PIN)
    differences = _against(repo, repo[plan.tree].peel(pygit2.Tree), pin_tree, changed)
    if not differences:
        return CheckoutState(State.PATCHED)
    return CheckoutState(State.OTHER, tuple(differences[:10]))


def changed_paths(repo: pygit2.Repository, omit: tuple[str, ...]) -> set[str]:
    """Paths where the work tree differs from the index (the pin), omitted paths' absence aside."""
    out = set()
    for path, flags in repo.status(untracked_files="all").items():
        if flags == FileStatus.IGNORED:
            continue
        if flags == FileStatus.WT_DELETED and any(path.startswith(o) for o in omit):
            continue
        out.add(path)
    return out


def _against(repo: pygit2.Repository, expected: pygit2.Tree, pin_tree: pygit2.Tree, changed: set[str]) -> list[str]:
    """How the work tree (pin + ``changed``) differs from ``expected``; empty when it is exactly that tree."""
    series_paths: dict[str, str | None] = {}
    for d in pin_tree.diff_to_tree(expected).deltas:
        if d.status is DeltaStatus.DELETED:
            series_paths[d.old_file.path] = None
        else:
            series_paths[d.new_file.path] = str(d.new_file.id)
            if d.status is DeltaStatus.RENAMED:
                series_paths[d.old_file.path] = None
    workdir = Path(repo.workdir)
    out = []
    for path in sorted(changed | set(series_paths)):
        want = series_paths.get(path, "pin")
        file = workdir / path
        if want == "pin":
            out.append(f"differs {path}")
        elif want is None:
            if file.exists() or file.is_symlink():
                out.append(f"extra {path}")
        elif not file.is_file():
            out.append(f"missing {path}")
        elif str(pygit2.hashfile(str(file))) != want:
            out.append(f"differs {path}")
    return out


def apply_to_workdir(repo: pygit2.Repository, series: Series, plan: SeriesPlan, pin: str, omit: tuple[str, ...]) -> None:
    """Apply the series to a checkout clean at the pin; on any failure put it back exactly at the pin."""
    from ci.checkout import checkout_commit

    try:
        for patch, verdict in zip(series.patches, plan.verdicts, strict=True):
            if verdict.fate is Fate.APPLIES:
                repo.apply(pygit2.Diff.parse_diff(verdict.moved) if verdict.moved else patch.diff(), ApplyLocation.WORKDIR)
        pin_tree = repo[pin].peel(pygit2.Tree)
        after = _against(repo, repo[plan.tree].peel(pygit2.Tree), pin_tree, changed_paths(repo, omit))
        if after:
            raise GitError(f"after applying the series the checkout differs from the expected tree: {', '.join(after[:5])}")
    except BaseException:
        commit = repo[pin]
        assert isinstance(commit, pygit2.Commit)
        checkout_commit(repo, commit, omit)
        raise




# -- runners --------------------------------------------------------------------------------------------------


def plan_at_pin(project: Project, remote: str | None) -> tuple[Pins, Series, pygit2.Repository, SeriesPlan]:
    """Load the series, make sure the checkout exists, refuse escaping patches, classify against the pin."""
    from ci.checkout import ensure_checkout, ensure_store

    pins = project.load_pins()
    series = load_series(project.root / PATCHES_DIR)
    store = ensure_store(project, pins, remote)
    pin_commit = store.repo[pins.fork.commit]
    assert isinstance(pin_commit, pygit2.Commit)
    workdir = project.root / pins.submodule
    check_paths(series, pin_commit.tree, workdir if workdir.is_dir() else None, pins.omit)
    checkout = ensure_checkout(project, pins, store)
    return pins, series, checkout.repo, classify(store.repo, pins.fork.commit, series)


def apply_series(project: Project, remote: str | None = None) -> str:
    """``nox -s patches``: the checkout ends exactly at pin + series, or is refused untouched."""
    pins, series, repo, plan = plan_at_pin(project, remote)
    if not plan.clean:
        bad = [v for v in plan.verdicts if v.fate is not Fate.APPLIES]
        raise Refused("the series does not apply at the pin: " + "; ".join(f"patches/{v.line()}" for v in bad) + "; nothing was applied")
    state = checkout_state(repo, pins.fork.commit, plan, pins.omit)
    n = len(series.patches)
    if state.state is State.PATCHED or (state.state is State.AT_PIN and n == 0):
        return f"patches: the series ({count(n, 'patch')}, {series.digest[:12]}) is already applied at {pins.fork.short}: nothing to do"
    if state.state is State.OTHER:
        raise Refused(
            f"{pins.submodule}: neither clean at the pin {pins.fork.short} nor exactly pin + series ("
            + ", ".join(state.differences)
            + "); commit or stash that work, or check the pin out again"
        )
    apply_to_workdir(repo, series, plan, pins.fork.commit, pins.omit)
    return f"patches: applied {count(n, 'patch')} ({series.digest[:12]}) on {pins.fork.short}"


def check_lines(plan: SeriesPlan) -> list[str]:
    return [v.line() for v in plan.verdicts]


# -- export: commits on a branch of the checkout back into patches/ ------------------------------------------


@dataclass(frozen=True)
class ExportPlan:
    files: tuple[tuple[str, bytes], ...]  # (name, format-patch bytes) in series order
    stale: tuple[str, ...]  # patch files of the old series that the new one no longer lists
    series_text: str


def plan_export(project: Project, branch: str) -> ExportPlan:
    pins = project.load_pins()
    from ci.checkout import Checkout

    checkout = Checkout.find(project.root / pins.submodule, pins.omit)
    if checkout is None:
        raise Refused(f"{pins.submodule}: not checked out; run nox -s patches, commit your changes on a branch there, then export")
    repo = checkout.repo
    try:
        tip = repo.references[f"refs/heads/{branch}"].target
    except KeyError:
        raise ConfigError(f"{pins.submodule}: no local branch {branch}; create it with git -C {pins.submodule} switch -c {branch}") from None
    pin = pins.fork.commit
    if str(tip) != pin and not repo.descendant_of(tip, pin):
        raise Refused(f"branch {branch} does not start from the pin {pins.fork.short}; rebase it onto {pins.fork.short} first")
    walker = repo.walk(tip, pygit2.enums.SortMode.TOPOLOGICAL | pygit2.enums.SortMode.REVERSE)
    walker.hide(pin)
    files: list[tuple[str, bytes]] = []
    for commit in walker:
        if len(commit.parents) != 1:
            raise Refused(f"commit {str(commit.id)[:12]} on {branch} is a merge; a series is linear: rebase the branch")
        text = format_patch(repo, commit)
        name = _unique(slug(commit.message.splitlines()[0]), {n for n, _ in files})
        tmp = Path(tempfile.mkdtemp(prefix="onebit-export-"))
        try:
            (tmp / name).write_bytes(text)
            parse_patch(tmp / name, f"commit {str(commit.id)[:12]} ({commit.message.splitlines()[0]})")
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        files.append((name, text))
    directory = project.root / PATCHES_DIR
    old = load_series(directory)
    names = [n for n, _ in files]
    old_text = (directory / SERIES_FILE).read_text() if (directory / SERIES_FILE).is_file() else ""
    return ExportPlan(tuple(files), tuple(n for n in old.names if n not in names), series_text(names, old_text))


def write_export(project: Project, plan: ExportPlan) -> None:
    from ci.files import all_or_nothing, write_atomic

    directory = project.root / PATCHES_DIR
    touched = [directory / n for n, _ in plan.files] + [directory / n for n in plan.stale] + [directory / SERIES_FILE]
    with all_or_nothing(touched):
        for name, data in plan.files:
            write_atomic(directory / name, data)
        write_atomic(directory / SERIES_FILE, plan.series_text)
        for name in plan.stale:
            (directory / name).unlink()


def back_to_series(project: Project, branch: str) -> str:
    """After an export, put the checkout back at the pin with the new series applied (what every other session
    expects) when that loses nothing: HEAD is the exported branch, which keeps the commits, and nothing is
    uncommitted. Otherwise leave it as it is and say how to go back."""
    from ci.checkout import Checkout

    pins = project.load_pins()
    checkout = Checkout.find(project.root / pins.submodule, pins.omit)
    back = f"git -C {pins.submodule} switch --detach {pins.fork.short}, then nox -s patches"
    if checkout is None:
        return f"export_patches: {pins.submodule} is not checked out"
    repo = checkout.repo
    if repo.head_is_detached or repo.head.shorthand != branch:
        return f"export_patches: the checkout is not on {branch}, so it was left as it is; to build the series: {back}"
    if changed_paths(repo, pins.omit):
        return f"export_patches: the checkout has uncommitted changes, so it was left on {branch}; to build the series: {back}"
    checkout.move_to(pins.fork.commit)
    return f"{apply_series(project)} (the checkout is back at the pin; branch {branch} keeps the commits)"


def format_patch(repo: pygit2.Repository, commit: pygit2.Commit) -> bytes:
    """``git format-patch -1`` of ``commit``: mbox headers, message, diffstat, diff."""
    import email.utils

    diff = repo.diff(commit.parents[0], commit)
    diff.find_similar()
    a = commit.author
    date = email.utils.format_datetime(_aware(a.time, a.offset))
    subject, _, body = commit.message.partition("\n")
    stats = diff.stats.format(pygit2.enums.DiffStatsFormat.FULL | pygit2.enums.DiffStatsFormat.INCLUDE_SUMMARY, 80)
    text = (
        f"From {commit.id} Mon Sep 17 00:00:00 2001\n"
        f"From: {a.name} <{a.email}>\n"
        f"Date: {date}\n"
        f"Subject: [PATCH] {subject.strip()}\n\n"
        f"{body.strip()}\n"
        "---\n"
        f"{stats}\n"
        f"{diff.patch or ''}"
        "-- \nonebit-ci\n"
    )
    return text.encode()


def _aware(ts: int, offset_minutes: int):  # type: ignore[no-untyped-def]
    import datetime as dt

    return dt.datetime.fromtimestamp(ts, dt.timezone(dt.timedelta(minutes=offset_minutes)))


def slug(subject: str) -> str:
    s = re.sub(r"[^A-Za-z0-9]+", "-", subject).strip("-").lower()
    return (s[:60].rstrip("-") or "patch") + ".patch"


def _unique(name: str, taken: set[str]) -> str:
    stem, n = name[: -len(".patch")], 2
    while name in taken:
        name, n = f"{stem}-{n}.patch", n + 1
    return name
