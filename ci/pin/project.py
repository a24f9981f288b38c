"""The project repository: where pins.yaml, .gitmodules and the submodule's gitlink live."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

import pygit2

from ci.errors import ConfigError, GitError
from ci.pin import pins as pins_mod
from serve.bounded import CONFIG_LIMIT, read_regular

GITLINK_MODE = pygit2.enums.FileMode.COMMIT

# Messages, shared with the tests that match on them (tests/support/messages.py)
INCLUDE_SECTION = "{file}:{line}: an [include] section: git ignores it in .gitmodules and libgit2 does not; write the submodule here"
PATH_TWICE = '{file}: declares path {path} twice, in [submodule "{first}"] and [submodule "{second}"]; keep one of the two sections'
NOT_FOUND_ABOVE = "{file}: not found in {here} or above; run from the onebit-ci checkout"


@dataclass(frozen=True)
class Submodule:
    """One ``[submodule "..."]`` section of .gitmodules."""

    name: str
    path: str
    url: str | None
    branch: str | None


@dataclass(frozen=True)
class Project:
    root: Path

    @property
    def pins_path(self) -> Path:
        return self.root / pins_mod.PINS_FILE

    @property
    def gitmodules_path(self) -> Path:
        return self.root / ".gitmodules"

    def repo(self) -> pygit2.Repository:
        try:
            return pygit2.Repository(str(self.root))
        except pygit2.GitError as exc:
            raise GitError(f"{self.root}: not a git repository ({exc}); run from a clone of onebit-ci") from None

    def common_gitdir(self) -> Path:
        gitdir = Path(self.repo().path)
        common = gitdir / "commondir"
        if common.is_file():  # a linked worktree keeps modules in the main repository's git dir
            return (gitdir / common.read_text().strip()).resolve()
        return gitdir

    def module_gitdir(self, submodule_path: str) -> Path:
        """Where git keeps a submodule's repository (``git submodule absorbgitdirs`` layout)."""
        return self.common_gitdir() / "modules" / submodule_path

    def index_path(self) -> Path:
        return Path(self.repo().path) / "index"

    def load_pins(self) -> pins_mod.Pins:
        return pins_mod.load(self.pins_path)


def find_project(start: Path | None = None) -> Project:
    """The nearest directory at or above ``start`` holding pins.yaml; ONEBIT_CI_ROOT overrides."""
    env = os.environ.get("ONEBIT_CI_ROOT")
    if env:
        root = Path(env).resolve()
        if not (root / pins_mod.PINS_FILE).is_file():
            raise ConfigError(f"ONEBIT_CI_ROOT={env}: no {pins_mod.PINS_FILE} there")
        return Project(root)
    here = (start or Path.cwd()).resolve()
    for d in (here, *here.parents):
        if os.path.lexists(d / pins_mod.PINS_FILE):  # a FIFO or a directory there is named by the loader, not skipped
            return Project(d)
    raise ConfigError(NOT_FOUND_ABOVE.format(file=pins_mod.PINS_FILE, here=here))


_INCLUDE_RE = re.compile(r"^\s*\[\s*include(?:if)?\b", re.IGNORECASE)


def read_gitmodules(path: Path) -> dict[str, Submodule]:
    """Submodules by path. A missing file is an empty mapping; a malformed one a ConfigError."""
    if not os.path.lexists(path):
        return {}
    try:
        text = read_regular(path, CONFIG_LIMIT).decode("utf-8", errors="replace")
    except OSError as exc:
        raise ConfigError(f"{path.name}: cannot be read: {exc.strerror}") from None
    for n, line in enumerate(text.splitlines(), 1):
        if _INCLUDE_RE.match(line):  # pygit2 reads the file it names, git ignores it in .gitmodules: they would disagree
            raise ConfigError(INCLUDE_SECTION.format(file=path.name, line=n))
    try:
        config = pygit2.Config(str(path))
        entries = [(e.name, e.value) for e in config if e.value is not None]
    except pygit2.GitError as exc:
        raise ConfigError(f"{path.name}: cannot be parsed ({exc})") from None
    raw: dict[str, dict[str, str]] = {}
    for key, value in entries:
        section, _, rest = key.partition(".")
        if section != "submodule" or "." not in rest:
            continue
        name, _, var = rest.rpartition(".")
        if var in raw.setdefault(name, {}):
            raise ConfigError(f'{path.name}: submodule "{name}": {var} is given twice; keep one')
        raw[name][var] = value
    out: dict[str, Submodule] = {}
    for name, values in raw.items():
        p = values.get("path")
        if p is None:
            raise ConfigError(f'{path.name}: submodule "{name}": has no path')
        if p in out:  # else the second section would stand for the path, its missing keys read as None
            raise ConfigError(PATH_TWICE.format(file=path.name, path=p, first=out[p].name, second=name))
        out[p] = Submodule(name=name, path=p, url=values.get("url"), branch=values.get("branch"))
    return out


def set_gitmodules_value(text: str, name: str, var: str, value: str) -> str:
    """``text`` with ``submodule.<name>.<var>`` set, the rest of the file as it was."""
    out: list[str] = []
    in_section = False
    done = False
    header = f'[submodule "{name}"]'
    for line in text.splitlines(keepends=True):
        stripped = line.strip()
        if stripped.startswith("["):
            if in_section and not done:
                out.append(f"\t{var} = {value}\n")
                done = True
            in_section = stripped == header
        elif in_section and stripped.split("=", 1)[0].strip() == var:
            out.append(f"\t{var} = {value}\n")
            done = True
            continue
        out.append(line)
    if in_section and not done:
        if out and not out[-1].endswith("\n"):
            out[-1] += "\n"
        out.append(f"\t{var} = {value}\n")
        done = True
    if not done:
        raise ConfigError(f'.gitmodules: no [submodule "{name}"] section')
    return "".join(out)


def gitlink(index: pygit2.Index, path: str) -> str | None:
    """The commit the index records for a submodule at ``path``, or None when there is no gitlink."""
    try:
        entry = index[path]
    except KeyError:
        return None
    if entry.mode != GITLINK_MODE:
        return None
    return str(entry.id)
