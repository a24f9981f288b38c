"""Which llama-server binary: ``--llama-server PATH``, or the build manifest of the chosen profile.

A build writes ``build/<profile>/build.json`` under the onebit-ci root (the nearest directory upwards with
pins.yaml, or ``$ONEBIT_CI_ROOT``)::

    {"binaries": {"llama-server": {"path": "<relative to the manifest's directory>", "sha256": "<64 hex>"}}}

serve checks the binary's sha256 against it before it runs anything: a rebuilt or replaced binary is refused.
There is no fallback to a llama-server on PATH: that one is upstream's, which cannot read ROCmFPX's formats.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from serve import strict
from serve.bounded import CONFIG_LIMIT, not_a_file, read_text
from serve.errors import FLAG_PATH, LLAMA_SERVER, FileProblem, NoBuild, NoServer, Refused
from serve.identity import staleness

ROOT_VAR = "ONEBIT_CI_ROOT"
ROOT_MARKER = "pins.yaml"
MANIFEST = "build.json"
BINARY = "llama-server"
_SHA256 = re.compile(r"[0-9a-f]{64}\Z")

# Messages, shared with the tests that match on them (tests/support/messages.py)
NOT_EXECUTABLE = "not executable (chmod +x it)"
NOT_ON_PATH = "{name}: not found on PATH; give its path"
NO_BUILD = "there is no build for profile {profile} ({why}): make one with `nox -s build -- --profile {profile}`, or pass --llama-server PATH"
NO_ROOT = "no {marker} above {cwd} and no ${variable}"  # why there is no build
NO_MANIFEST = "no {manifest}"  # why there is no build
MANIFEST_NOT_JSON = "not JSON: {error} at line {line} column {column}; rebuild with `nox -s build -- --profile {profile}`"
NO_BINARY_ENTRY = "has no binaries.{binary}; rebuild with `nox -s build -- --profile {profile}`"
NO_BINARY_PATH = "binaries.{binary}.path is not a path"
NO_BINARY_SHA256 = "binaries.{binary}.sha256 is not 64 lowercase hex digits"
BINARY_MISSING = "{manifest} records {path}, which is not there; rebuild with `nox -s build -- --profile {profile}`"
BINARY_REPLACED = (
    "sha256 {got}... is not the {want}... that {manifest} records: the binary was replaced or the build is stale; "
    "rebuild with `nox -s build -- --profile {profile}`"
)
STALE = "the {profile} build no longer matches {what}"  # what: serve.identity's PIN_MOVED, SERIES_MOVED, ...
STALE_REFUSED = "{stale}; rebuild with `nox -s build -- --profile {profile}`, or pass --allow-stale to run it anyway"


@dataclass(frozen=True)
class Server:
    """The program for argv[0], and where it came from."""

    program: str
    source: str
    warning: str = ""  # a stale build run anyway (--allow-stale)


def display(path: Path, cwd: Path) -> str:
    """``path`` relative to the working directory where it is below it, as people type it."""
    try:
        return str(path.relative_to(cwd))
    except ValueError:
        return str(path)


def find_root(cwd: Path, environ: Mapping[str, str]) -> Path | None:
    """The onebit-ci root: ``$ONEBIT_CI_ROOT``, else the nearest directory from ``cwd`` upwards with pins.yaml."""
    given = environ.get(ROOT_VAR)
    if given:
        root = (cwd / given).resolve()
        if not root.is_dir():
            raise FileProblem("is not a directory (it should name the onebit-ci checkout)", f"{ROOT_VAR}={given}")
        return root
    for directory in (cwd, *cwd.parents):
        if (directory / ROOT_MARKER).is_file():
            return directory
    return None


def manifest_path(root: Path, profile: str) -> Path:
    return root / "build" / profile / MANIFEST


def is_path(value: str) -> bool:
    """Whether ``--llama-server`` was given a path (else a name to look up on PATH)."""
    return os.sep in value or bool(os.altsep and os.altsep in value)


def from_option(value: str, environ: Mapping[str, str]) -> Server:
    """``--llama-server PATH`` (or a name on PATH): it must be there, a file and executable."""
    if is_path(value):
        where = FLAG_PATH.format(flag="--llama-server", path=value)
        problem = not_a_file(value, LLAMA_SERVER)
        if problem is not None:
            raise NoServer(problem, where)
        if not os.access(value, os.X_OK):
            raise NoServer(NOT_EXECUTABLE, where)
        return Server(program=value, source="--llama-server")
    if shutil.which(value, path=environ.get("PATH", os.defpath)) is None:
        raise NoServer(NOT_ON_PATH.format(name=value), "--llama-server")
    return Server(program=value, source="--llama-server")


def no_build(profile: str, why: str) -> NoBuild:
    return NoBuild(NO_BUILD.format(profile=profile, why=why))


def from_manifest(profile: str, cwd: Path, environ: Mapping[str, str], allow_stale: bool = False) -> Server:
    """The llama-server that the build of ``profile`` recorded, its sha256 checked, and the build checked against
    pins.yaml and patches/ (a stale build is refused, or run with a warning under ``allow_stale``)."""
    root = find_root(cwd, environ)
    if root is None:
        raise no_build(profile, NO_ROOT.format(marker=ROOT_MARKER, cwd=cwd, variable=ROOT_VAR))
    manifest = manifest_path(root, profile)
    shown = display(manifest, cwd)
    try:
        text = read_text(manifest, CONFIG_LIMIT)  # a regular file of bounded size: a FIFO or /dev/zero is named
    except FileNotFoundError:
        raise no_build(profile, NO_MANIFEST.format(manifest=shown)) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise FileProblem(f"cannot be read ({exc})", shown) from None
    try:
        doc = strict.loads(text)
    except ValueError as exc:
        if not isinstance(exc, json.JSONDecodeError):
            raise FileProblem(f"{exc}; rebuild with `nox -s build -- --profile {profile}`", shown) from None
        raise FileProblem(MANIFEST_NOT_JSON.format(error=exc.msg, line=exc.lineno, column=exc.colno, profile=profile), shown) from None
    except RecursionError:
        raise FileProblem(f"nested too deeply to be a build manifest; rebuild with `nox -s build -- --profile {profile}`", shown) from None
    entry = doc.get("binaries", {}).get(BINARY) if isinstance(doc, dict) and isinstance(doc.get("binaries", {}), dict) else None
    if not isinstance(entry, dict):
        raise FileProblem(NO_BINARY_ENTRY.format(binary=BINARY, profile=profile), shown)
    rel, want = entry.get("path"), entry.get("sha256")
    if not isinstance(rel, str) or not rel:
        raise FileProblem(NO_BINARY_PATH.format(binary=BINARY), shown)
    if not isinstance(want, str) or not _SHA256.match(want):
        raise FileProblem(NO_BINARY_SHA256.format(binary=BINARY), shown)
    binary = manifest.parent / rel
    binary_shown = display(binary, cwd)
    if not binary.is_file():
        raise NoServer(BINARY_MISSING.format(manifest=shown, path=rel, profile=profile), binary_shown)
    got = sha256_of(binary)
    if got != want:
        raise Refused(BINARY_REPLACED.format(got=got[:12], want=want[:12], manifest=shown, profile=profile), binary_shown)
    if not os.access(binary, os.X_OK):
        raise NoServer("is not executable; rebuild it", binary_shown)
    stale = staleness(root, (doc.get("pin") or {}).get("commit"), (doc.get("patches") or {}).get("digest"))
    if stale is None:
        return Server(program=str(binary.resolve()), source=shown)
    why = STALE.format(profile=profile, what=stale)
    if not allow_stale:
        raise Refused(STALE_REFUSED.format(stale=why, profile=profile), shown)
    return Server(program=str(binary.resolve()), source=f"{shown} (STALE: {why})", warning=why)


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()
