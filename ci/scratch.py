"""The temporary folders this tool makes outside the checkout, and the sweep of those a killed process left.

Each is named after the process that made it (``onebit-<kind>-<pid>-<random>``), so that a later command can tell one
whose maker is gone (SIGKILL runs no clean-up: a killed ``python -m ci`` left its ``/tmp/onebit-bytecode-*``) from one
in use, and removes the first at its start.
"""

from __future__ import annotations

import os
import re
import shutil
import stat
import tempfile
from pathlib import Path

KINDS = ("bytecode", "cwd", "ship", "tiny")
PATTERN = re.compile(rf"onebit-(?:{'|'.join(KINDS)})-(\d+)-[^/]+")


def prefix(kind: str) -> str:
    """The name a folder of ``kind`` made by this process starts with."""
    return f"onebit-{kind}-{os.getpid()}-"


def folder(kind: str) -> str:
    """A fresh folder of ``kind`` (mode 0700) in the temporary folder, named after this process."""
    return tempfile.mkdtemp(prefix=prefix(kind))


def sweep(where: Path | None = None) -> list[Path]:
    """Remove this user's folders of :data:`KINDS` in ``where`` (default: the temporary folder) whose maker is gone;
    the ones removed. A folder whose process still runs, or of another user, is left."""
    where = Path(where or tempfile.gettempdir())
    removed: list[Path] = []
    try:
        entries = list(os.scandir(where))
    except OSError:
        return removed
    for entry in entries:
        m = PATTERN.fullmatch(entry.name)
        if m is None:
            continue
        try:
            st = entry.stat(follow_symlinks=False)
        except OSError:
            continue
        if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid() or _alive(int(m.group(1))):
            continue
        shutil.rmtree(entry.path, ignore_errors=True)
        removed.append(Path(entry.path))
    return removed


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process of that pid: in use
        return True
    return True
