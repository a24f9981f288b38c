"""Every id and path that names a place: checked against the rule recipe ids follow, and resolved inside its area.

A self-test fault's id names a directory under build/selftest/<profile>/ that is removed and refilled: an absolute
id, or one with ``..``, once had a directory outside the checkout deleted. Its ``file`` names the file the fault is
written into, inside a copy of the checkout.
"""

from __future__ import annotations

import os
import re
from pathlib import Path, PurePosixPath

from ci.errors import ConfigError

# the rule of serve/recipes.py's ids: a letter or digit first, then letters, digits, ".", "_", "-"
ID_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,99}\Z")

# Messages, shared with the tests that match on them (tests/support/messages.py)
ID_RULE = "letters, digits, '.', '_', '-', a letter or digit first, at most 100 characters (it names a directory)"
ABSOLUTE = "an absolute path; give it relative to the fork's root"
HAS_DOTDOT = "has '..'; give it relative to the fork's root, inside it"
OUTSIDE = "{what} {path}: resolves to {real}, outside {area}; it must stay inside it"


def id_problem(value: str) -> str | None:
    """Why ``value`` cannot name a directory, or None."""
    if not ID_RE.match(value) or value in (".", ".."):
        return ID_RULE
    return None


def relative_problem(value: str) -> str | None:
    """Why ``value`` is not a relative path that stays where it is joined (no absolute path, no ``..``), or None."""
    if not value or "\0" in value or "\\" in value:
        return "not a relative path"
    p = PurePosixPath(value)
    if p.is_absolute():
        return ABSOLUTE
    if any(part == ".." for part in p.parts):
        return HAS_DOTDOT
    return None


def inside(area: Path, path: Path, what: str) -> Path:
    """``path`` resolved, when it lies inside ``area`` (resolved too); a ConfigError naming ``what`` otherwise."""
    real_area = Path(os.path.realpath(area))
    real = Path(os.path.realpath(path))
    if real != real_area and real_area not in real.parents:
        raise ConfigError(OUTSIDE.format(what=what, path=path, real=real, area=area))
    return real
