"""What the release's gates judged: the shipped wheel carries ``serve/release.json`` (ship writes it), and in it the
sha256 of the llama-server every gate ran on. ``1bit serve`` compares the binary it is about to run with it.

A different binary (an upstream build, a local rebuild, any ``--llama-server``) is one line: a warning, or, under
``--require-gated``, a refusal. Run from a checkout there is no release.json: nothing was gated, so ``--require-gated``
refuses and a plain launch says nothing. ``$ONEBIT_SERVE_RELEASE`` names another release.json (the one beside a
wheel in dist/, or a test's).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from serve import strict
from serve.bounded import CONFIG_LIMIT, read_regular
from serve.errors import FileProblem
from serve.server import sha256_of

RELEASE_VAR = "ONEBIT_SERVE_RELEASE"
_SHA256 = re.compile(r"[0-9a-f]{64}\Z")

# Messages, shared with the tests that match on them (tests/support/messages.py)
GIVEN_RELEASE = "{variable}={path}"  # where: the release.json named by $ONEBIT_SERVE_RELEASE
NOT_A_SHA256 = "build.binaries.llama-server is not a sha256: not a release manifest ship wrote"
NO_RELEASE = "no release.json: serve runs from a checkout, and no gate judged this llama-server for a release"
NOT_GATED = "llama-server {program} (sha256 {got}) is not the {want} that the gates of release {release} judged"


@dataclass(frozen=True)
class Gated:
    """Whether the llama-server about to run is the release's gated one."""

    state: str  # "gated", "not gated", "no release"
    detail: str
    release: str = ""  # which release.json

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
    sha = binaries.get("llama-server") if isinstance(binaries, dict) else None
    if not isinstance(sha, str) or not _SHA256.match(sha):
        raise FileProblem(NOT_A_SHA256, where)
    return sha


def judge(program: Path, environ: Mapping[str, str], known_sha256: str | None = None) -> Gated:
    """``program`` (the llama-server about to run) against the release's gated sha256."""
    found = release_doc(environ)
    if found is None:
        return Gated("no release", NO_RELEASE)
    doc, where = found
    want = gated_sha256(doc, where)
    got = known_sha256 or sha256_of(program)
    build = doc.get("build")
    key = str(build.get("key", ""))[:12] if isinstance(build, dict) else ""
    if got == want:
        return Gated("gated", f"llama-server sha256 {got[:12]} is the one the gates of release {key} judged", where)
    return Gated("not gated", NOT_GATED.format(program=program, got=got[:12], want=want[:12], release=key), where)
