"""The patch series on disk: ``patches/series`` gives the order, each ``patches/NAME.patch`` is a git
format-patch file whose message carries ``Upstream:`` (a URL, or ``not-needed: <reason>``) and ``Drop-when:``
trailers. Loading checks every file; :func:`check_paths` refuses, before anything is written, a patch that
reaches outside the checkout.
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

import pygit2
from pygit2.enums import DeltaStatus, FileMode

from ci.errors import ConfigError, Refused
from serve import bounded
from serve.bounded import CONFIG_LIMIT, MiB, is_regular, read_regular
from serve.identity import series_digest, series_entries

PATCHES_DIR = "patches"
SERIES_FILE = "series"
PATCH_LIMIT = 64 * MiB
DIFF_LINE_RE = re.compile(r"^diff --git a/\S+ b/\S+$")
URL_RE = re.compile(r"^https?://\S+$")
TRAILER_RE = re.compile(r"^(Upstream|Drop-when):[ \t]*(.*)$", re.MULTILINE)
PATH_LINE_RE = re.compile(r"^(?:diff --git a/(\S+) b/(\S+)|--- (?:a/)?(\S+)|\+\+\+ (?:b/)?(\S+)|(?:rename|copy) (?:from|to) (\S+))\s*$", re.MULTILINE)

# Messages, shared with the tests that match on them (tests/support/messages.py)
SERIES_NOT_REGULAR = "{series}: {kind}; the series must be a regular file listing patch names (or absent: no patches)"
A_SYMBOLIC_LINK = "a symbolic link"  # SERIES_NOT_REGULAR's kind of a link (its others: serve.bounded's)
SERIES_NOT_UTF8 = "{series}:{line}: not UTF-8 text (byte 0x{byte:02x}); the series file lists patch names, one a line"
BYTE_ORDER_MARK = "{series}:{line}: starts with a byte-order mark (U+FEFF, which some editors add); save the series without one"
NOT_A_PATCH_NAME = '{series}:{line}: "{patch}" is not a patch file name (NAME.patch, in {directory}/)'
LISTED_TWICE = '{series}:{line}: "{patch}" is listed twice'
NOT_IN_DIRECTORY = "{series}:{line}: {patch} {what} in {directory}/; add it or remove the line"
DOES_NOT_EXIST = "does not exist"
NOT_A_REGULAR_FILE = "is not a regular file"
CRLF_HEADERS = "{patch}: has CRLF line endings in its headers (an editor or autocrlf rewrote it); restore it with LF endings"
TRAILER_TWICE = "{patch}: {trailer}: is given twice; keep one"
NO_UPSTREAM = '{patch}: no "Upstream:" trailer; add one: the URL where it was sent, or "not-needed: <reason>"'
UPSTREAM_NOT_URL = '{patch}: Upstream: "{upstream}" is neither a URL nor "not-needed: <reason>"'
NO_DROP_WHEN = '{patch}: no "Drop-when:" trailer; say when the patch can go (e.g. "the pin includes <PR>")'
DIFF_UNPARSABLE_AT = "{patch}:{line}: the diff cannot be parsed ({error})"
ADDS_LINK = "{patch}: adds a symbolic link {path}; patches may not create links (they could point outside the checkout)"
TOUCHES = "{patch}: touches {path}: {problem}; nothing was applied"
ABSOLUTE_PATH = "an absolute path"
OUTSIDE_PATH = "a path outside the checkout"
INSIDE_GIT = "a path inside .git"
THROUGH_LINK = "a path through the symbolic link {link}"
OMITTED_PATH = "a path the checkout leaves out (pins.yaml checkout.omit)"


# -- the series on disk ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Patch:
    path: Path  # the file git applies
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


@dataclass(frozen=True)
class Series:
    directory: Path
    patches: tuple[Patch, ...]

    @property
    def digest(self) -> str:
        """sha256 over the series in order: each patch's name and bytes. Part of the build identity."""
        return series_digest((p.name, p.data) for p in self.patches)

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
    if not os.path.lexists(path):
        return Series(directory, ())
    if not is_regular(path):  # a directory or a dangling link is not "no patches"
        kind = bounded.A_DIRECTORY if path.is_dir() else A_SYMBOLIC_LINK if path.is_symlink() else bounded.NOT_A_REGULAR_FILE
        raise ConfigError(SERIES_NOT_REGULAR.format(series=rel, kind=kind))
    names: list[str] = []
    try:
        raw = read_regular(path, CONFIG_LIMIT)
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        at = raw[: exc.start].count(b"\n") + 1
        raise ConfigError(SERIES_NOT_UTF8.format(series=rel, line=at, byte=exc.object[exc.start])) from None
    except OSError as exc:
        raise ConfigError(f"{rel}: cannot be read ({exc.strerror})") from None
    for n, raw_line in enumerate(text.splitlines(), 1):  # invisible, and no whitespace to strip: "\ufefffix.patch" was a missing patch
        if raw_line.lstrip().startswith("\ufeff"):
            raise ConfigError(BYTE_ORDER_MARK.format(series=rel, line=n))
    for n, line in series_entries(text):
        if "/" in line or not line.endswith(".patch"):
            raise ConfigError(NOT_A_PATCH_NAME.format(series=rel, line=n, patch=line, directory=directory.name))
        if line in names:
            raise ConfigError(LISTED_TWICE.format(series=rel, line=n, patch=line))
        if not is_regular(directory / line):
            what = NOT_A_REGULAR_FILE if os.path.lexists(directory / line) else DOES_NOT_EXIST
            raise ConfigError(NOT_IN_DIRECTORY.format(series=rel, line=n, patch=line, what=what, directory=directory.name))
        names.append(line)
    return Series(directory, tuple(parse_patch(directory / name, f"{directory.name}/{name}") for name in names))


def parse_patch(path: Path, display: str) -> Patch:
    try:
        data = read_regular(path, PATCH_LIMIT)
    except OSError as exc:
        raise ConfigError(f"{display}: {exc.strerror}") from None
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
        raise ConfigError(CRLF_HEADERS.format(patch=display))
    subject = _subject(head)
    if not subject:
        raise ConfigError(f"{display}: no Subject: line; write it with git format-patch")
    message = head.split("\n---\n", 1)[0]
    trailers: dict[str, str] = {}
    for k, v in TRAILER_RE.findall(message):
        if k in trailers:
            raise ConfigError(TRAILER_TWICE.format(patch=display, trailer=k))
        trailers[k] = v.strip()
    for n, line in enumerate(diff_text.splitlines(), head.count("\n") + 1):
        if line.startswith("diff --git ") and not DIFF_LINE_RE.match(line):
            raise ConfigError(f"{display}:{n}: not a diff header (diff --git a/PATH b/PATH); write it with git format-patch")
    upstream = trailers.get("Upstream", "")
    if not upstream:
        raise ConfigError(NO_UPSTREAM.format(patch=display))
    if not URL_RE.match(upstream) and not re.match(r"^not-needed:\s*\S", upstream):
        raise ConfigError(UPSTREAM_NOT_URL.format(patch=display, upstream=upstream))
    drop_when = trailers.get("Drop-when", "")
    if not drop_when:
        raise ConfigError(NO_DROP_WHEN.format(patch=display))
    try:
        pygit2.Diff.parse_diff(diff_text)
    except pygit2.GitError as exc:
        # libgit2 counts lines from the diff's start; a reader counts them in the file
        before = head.count("\n")
        m = re.search(r"^(.*) at line (\d+)$", str(exc))
        if m:
            raise ConfigError(DIFF_UNPARSABLE_AT.format(patch=display, line=int(m.group(2)) + before, error=m.group(1))) from None
        raise ConfigError(f"{display}: the diff cannot be parsed ({exc})") from None
    return Patch(path, path.name, data, subject, upstream, drop_when, diff_text)


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
                raise Refused(ADDS_LINK.format(patch=display, path=d.new_file.path))
        for path in sorted(raw | parsed):
            problem = _escape(path, tree, workdir)
            if problem is None and any(path.startswith(o) for o in omit):
                problem = OMITTED_PATH
            if problem:
                raise Refused(TOUCHES.format(patch=display, path=path, problem=problem))


def _escape(path: str, tree: pygit2.Tree, workdir: Path | None) -> str | None:
    if path.startswith("/") or re.match(r"^[A-Za-z]:[\\/]", path):
        return ABSOLUTE_PATH
    parts = PurePosixPath(path).parts
    if ".." in parts or "\\" in path:
        return OUTSIDE_PATH
    if any(part.lower() == ".git" for part in parts):
        return INSIDE_GIT
    for i in range(1, len(parts)):
        prefix = "/".join(parts[:i])
        try:
            entry = tree[prefix]
        except KeyError:
            entry = None
        if entry is not None and entry.filemode == FileMode.LINK:
            return THROUGH_LINK.format(link=prefix)
        if workdir is not None and (workdir / prefix).is_symlink():
            return THROUGH_LINK.format(link=prefix)
    return None
