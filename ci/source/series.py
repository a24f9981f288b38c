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
from serve.bounded import CONFIG_LIMIT, MiB, is_regular, read_regular
from serve.identity import series_digest, series_entries

PATCHES_DIR = "patches"
SERIES_FILE = "series"
PATCH_LIMIT = 64 * MiB
DIFF_LINE_RE = re.compile(r"^diff --git a/\S+ b/\S+$")
URL_RE = re.compile(r"^https?://\S+$")
TRAILER_RE = re.compile(r"^(Upstream|Drop-when):[ \t]*(.*)$", re.MULTILINE)
PATH_LINE_RE = re.compile(r"^(?:diff --git a/(\S+) b/(\S+)|--- (?:a/)?(\S+)|\+\+\+ (?:b/)?(\S+)|(?:rename|copy) (?:from|to) (\S+))\s*$", re.MULTILINE)


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
        kind = "a directory" if path.is_dir() else "a symbolic link" if path.is_symlink() else "not a regular file"
        raise ConfigError(f"{rel}: {kind}; the series must be a regular file listing patch names (or absent: no patches)")
    names: list[str] = []
    try:
        raw = read_regular(path, CONFIG_LIMIT)
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        at = raw[: exc.start].count(b"\n") + 1
        raise ConfigError(f"{rel}:{at}: not UTF-8 text (byte 0x{exc.object[exc.start]:02x}); the series file lists patch names, one a line") from None
    except OSError as exc:
        raise ConfigError(f"{rel}: cannot be read ({exc.strerror})") from None
    for n, line in series_entries(text):
        if "/" in line or not line.endswith(".patch"):
            raise ConfigError(f'{rel}:{n}: "{line}" is not a patch file name (NAME.patch, in {directory.name}/)')
        if line in names:
            raise ConfigError(f'{rel}:{n}: "{line}" is listed twice')
        if not is_regular(directory / line):
            what = "is not a regular file" if os.path.lexists(directory / line) else "does not exist"
            raise ConfigError(f"{rel}:{n}: {line} {what} in {directory.name}/; add it or remove the line")
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
        raise ConfigError(f"{display}: has CRLF line endings in its headers (an editor or autocrlf rewrote it); restore it with LF endings")
    subject = _subject(head)
    if not subject:
        raise ConfigError(f"{display}: no Subject: line; write it with git format-patch")
    message = head.split("\n---\n", 1)[0]
    trailers: dict[str, str] = {}
    for k, v in TRAILER_RE.findall(message):
        if k in trailers:
            raise ConfigError(f"{display}: {k}: is given twice; keep one")
        trailers[k] = v.strip()
    for n, line in enumerate(diff_text.splitlines(), head.count("\n") + 1):
        if line.startswith("diff --git ") and not DIFF_LINE_RE.match(line):
            raise ConfigError(f"{display}:{n}: not a diff header (diff --git a/PATH b/PATH); write it with git format-patch")
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
        # libgit2 counts lines from the diff's start; a reader counts them in the file
        before = head.count("\n")
        m = re.search(r"^(.*) at line (\d+)$", str(exc))
        if m:
            raise ConfigError(f"{display}:{int(m.group(2)) + before}: the diff cannot be parsed ({m.group(1)})") from None
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
