"""What the release's gates judged: the shipped wheel carries ``serve/release.json`` (ship writes it), with the sha256
of the llama-server every gate ran on and of each library it loads from its build. ``1bit serve`` compares what it is
about to run with it, binary and libraries as one unit (serve.elf): an edited ``libllama.so`` is not gated.

A difference is one line: a warning, or a refusal under ``--require-gated``. Run from a checkout there is no
release.json, so ``--require-gated`` refuses and a plain launch says nothing. ``$ONEBIT_SERVE_RELEASE`` names another
release.json.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path

from serve import elf, strict
from serve.bounded import CONFIG_LIMIT, read_regular
from serve.errors import FileProblem
from serve.server import sha256_of

RELEASE_VAR = "ONEBIT_SERVE_RELEASE"
PROGRAM = "llama-server"
_SHA256 = re.compile(r"[0-9a-f]{64}\Z")
_LIBRARY_NAME = re.compile(r"[A-Za-z0-9_+.-]+\Z")  # a file name ld.so looks up: no directory, nothing to escape

# Messages, shared with the tests that match on them (tests/support/messages.py)
GIVEN_RELEASE = "{variable}={path}"  # where: the release.json named by $ONEBIT_SERVE_RELEASE
NOT_A_SHA256 = "build.binaries.llama-server is not a sha256: not a release manifest ship wrote"
NOT_LIBRARIES = "build.{field} is not {what}: not a release manifest ship wrote"
NO_RELEASE = "no release.json: serve runs from a checkout, and no gate judged this llama-server for a release"
NOT_GATED = "llama-server {program} (sha256 {got}) is not the {want} that the gates of release {release} judged"
NO_LIBRARIES_RECORDED = (
    "llama-server {program} loads {count} libraries from its build ({names}), and release {release} records none "
    "(shipped before releases named them): nothing says they were gated; ship the release again"
)
LIBRARY_MISSING = (
    "{name}, which the gates of release {release} judged llama-server with, is not in its build {root}: "
    "ld.so would load another in its place"
)
LIBRARY_NOT_GATED = "llama-server loads {path} from its build, and the gates of release {release} never judged it"
LIBRARY_DIFFERS = "{path} (sha256 {got}) is not the {want} that the gates of release {release} judged"
NOT_LOADABLE = "llama-server {program}: {problem}"
GATED = "llama-server sha256 {sha} and its {count} libraries are the ones the gates of release {release} judged"


@dataclass(frozen=True)
class Release:
    """What a release.json says was gated, read defensively: each sha256 checked, each library a plain file name."""

    where: str
    key: str
    llama_server: str
    libraries: Mapping[str, str] | None  # name -> sha256; None in a release shipped before libraries were recorded
    loads: tuple[str, ...] | None  # the libraries llama-server loads, by name

    @property
    def short(self) -> str:
        return self.key[:12]


@dataclass(frozen=True)
class Gated:
    """Whether the llama-server about to run, with its libraries, is the release's gated one."""

    state: str  # "gated", "not gated", "no release"
    detail: str
    release: str = ""  # which release.json
    unit: elf.Closure | None = field(default=None, compare=False)  # what was compared: llama-server and its libraries
    judged: Release | None = field(default=None, compare=False)

    @property
    def ok(self) -> bool:
        return self.state == "gated"

    def to_json(self) -> dict[str, str]:
        return {"state": self.state, "detail": self.detail, "release": self.release}


def release_doc(environ: Mapping[str, str]) -> tuple[dict[str, object], str] | None:
    """The release manifest and where it came from: ``$ONEBIT_SERVE_RELEASE``, else the wheel's own; None in a checkout."""
    given = environ.get(RELEASE_VAR)
    if given:
        where = GIVEN_RELEASE.format(variable=RELEASE_VAR, path=given)
        try:
            raw = read_regular(given, CONFIG_LIMIT)
        except OSError as exc:
            raise FileProblem(f"cannot be read: {exc.strerror}", where) from None
    else:
        entry = resources.files("serve").joinpath("release.json")
        if not entry.is_file():
            return None
        raw, where = entry.read_bytes(), "the wheel's serve/release.json"
    try:
        doc = strict.loads(raw)
    except (ValueError, RecursionError) as exc:
        raise FileProblem(f"not a release manifest ({exc})", where) from None
    if not isinstance(doc, dict):
        raise FileProblem("not a release manifest (not a JSON object)", where)
    return doc, where


def gated_sha256(doc: Mapping[str, object], where: str) -> str:
    build = doc.get("build")
    binaries = build.get("binaries") if isinstance(build, dict) else None
    sha = binaries.get(PROGRAM) if isinstance(binaries, dict) else None
    if not isinstance(sha, str) or not _SHA256.match(sha):
        raise FileProblem(NOT_A_SHA256, where)
    return sha


def read_release(doc: Mapping[str, object], where: str) -> Release:
    """``doc`` as a :class:`Release`. ``build.libraries`` ({name: sha256}) and ``build.loads.llama-server`` ([name])
    are both absent in a release shipped before them; present, every entry must be well formed, and every name
    llama-server loads must have its sha256."""
    sha = gated_sha256(doc, where)
    build = doc.get("build")
    assert isinstance(build, dict)  # gated_sha256 checked it
    key = build.get("key")
    libraries, loads = build.get("libraries"), build.get("loads")
    if libraries is None and loads is None:
        return Release(where, str(key or ""), sha, None, None)
    if not isinstance(libraries, dict) or not all(
        isinstance(k, str) and _LIBRARY_NAME.match(k) and isinstance(v, str) and _SHA256.match(v) for k, v in libraries.items()
    ):
        raise FileProblem(NOT_LIBRARIES.format(field="libraries", what="an object of library names and sha256s"), where)
    server = loads.get(PROGRAM) if isinstance(loads, dict) else None
    if not isinstance(server, list) or not all(isinstance(n, str) and n in libraries for n in server):
        raise FileProblem(NOT_LIBRARIES.format(field="loads.llama-server", what="a list of the libraries it names"), where)
    return Release(where, str(key or ""), sha, dict(libraries), tuple(server))


def root_of(program: Path) -> Path:
    """The build a program belongs to: the directory above the one it is in (build/<profile> for bin/llama-server)."""
    return Path(os.path.realpath(program)).parent.parent


def judge(program: Path, environ: Mapping[str, str], known_sha256: str | None = None) -> Gated:
    """``program`` (the llama-server about to run) and the libraries it loads from its build against the release."""
    found = release_doc(environ)
    if found is None:
        return Gated("no release", NO_RELEASE)
    release = read_release(*found)
    where, key = release.where, release.short
    got = known_sha256 or sha256_of(program)
    if got != release.llama_server:
        return Gated("not gated", NOT_GATED.format(program=program, got=got[:12], want=release.llama_server[:12], release=key), where)
    root = root_of(program)
    try:
        unit = elf.closure(program, root)
    except (elf.NotElf, OSError) as exc:
        return Gated("not gated", NOT_LOADABLE.format(program=program, problem=exc), where)

    def not_gated(detail: str) -> Gated:
        return Gated("not gated", detail, where, unit, release)

    if release.loads is None or release.libraries is None:
        if unit.libraries:
            names = ", ".join(unit.names)
            return not_gated(NO_LIBRARIES_RECORDED.format(program=program, count=len(unit.libraries), names=names, release=key))
        return Gated("gated", GATED.format(sha=got[:12], count=0, release=key), where, unit, release)
    for name in release.loads:
        if name not in unit.names:
            return not_gated(LIBRARY_MISSING.format(name=name, release=key, root=root))
    for lib in unit.libraries:
        want = release.libraries.get(lib.name) if lib.name in release.loads else None
        if want is None:
            return not_gated(LIBRARY_NOT_GATED.format(path=lib.path, release=key))
        have = sha256_of(lib.path)
        if have != want:
            return not_gated(LIBRARY_DIFFERS.format(path=lib.path, got=have[:12], want=want[:12], release=key))
    return Gated("gated", GATED.format(sha=got[:12], count=len(unit.libraries), release=key), where, unit, release)
