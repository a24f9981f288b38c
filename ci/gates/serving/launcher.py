"""The launcher the gates start and ship puts in the wheel: where it is, its digest (:func:`ci.digests.tree_sha256`
of ``serve/``), and the fresh bytecode folder every Python that runs it gets (so the tree's __pycache__ is neither
read nor written)."""

from __future__ import annotations

import atexit
import contextlib
import os
import shutil
import sys
import tempfile
import threading
from collections.abc import Iterator, Mapping
from pathlib import Path

from ci import digests, scratch

SOURCE_ROOT = digests.PROJECT_ROOT  # the onebit-ci checkout: the launcher and its route tests
LAUNCHER_SKIPS = ("__pycache__", "*.pyc")  # a copy of a clean tree for a test (shutil.ignore_patterns): no bytecode
BYTECODE_FOLDER = "PYTHONPYCACHEPREFIX"


def safe_path() -> tuple[str, ...]:
    """``-P`` (Python 3.11+) for a Python the gates start on the launcher, when ``serve`` is importable without the
    working directory (installed, as nox's sessions install the project; else nothing can be left out). ``python -m``
    puts the working directory first on sys.path, ahead of the standard library: a ``json.py`` that a fork's build
    wrote into the job's folder ran inside every launcher, as the launcher's code, unread by ``launcher_sha256``."""
    import importlib.machinery

    if sys.version_info < (3, 11):
        return ()
    here = os.path.realpath(os.curdir)
    rest = [p for p in sys.path if os.path.realpath(p or os.curdir) != here]
    finders = [f for f in sys.meta_path if f is not importlib.machinery.PathFinder]
    found = any(getattr(f, "find_spec", lambda *_: None)("serve", None) for f in finders)
    return ("-P",) if found or importlib.machinery.PathFinder.find_spec("serve", rest) is not None else ()


def launcher_dir() -> Path:
    """The serve package ship puts in the wheel and the gates run: the checkout's serve/, whatever sys.path says
    (ci.environment refuses a PYTHONPATH entry that would put another in its place)."""
    return digests.package_dir("serve")


def launcher_sha256(directory: Path | None = None) -> str:
    """One digest of the launcher's files (paths and contents), as ship copies them: the route and equivalence
    records are bound to it, so a launcher edited after the gates ran is not shipped on their evidence."""
    return digests.tree_sha256(directory or launcher_dir())  # through the module: benchmarks/hermetic_cost.py counts it


@contextlib.contextmanager
def own_bytecode() -> Iterator[dict[str, str]]:
    """The environment for a Python a gate starts on the launcher (its tests, ``python -m serve``): its bytecode in a
    fresh folder, removed afterwards, so the __pycache__ folders of the tree are neither read nor written. Python
    checks a .pyc only by its source's mtime and size: a good module's .pyc left in serve/__pycache__ beside a bad
    source of the same size, its mtime put back, was what the tests judged, while the digest and the wheel held the
    source."""
    with tempfile.TemporaryDirectory(prefix=scratch.prefix("bytecode"), ignore_cleanup_errors=True) as folder:
        yield {BYTECODE_FOLDER: folder}


def with_bytecode(env: Mapping[str, str], folder: Mapping[str, str]) -> dict[str, str]:
    """``env`` with the bytecode ``folder`` (:func:`own_bytecode`, :func:`process_bytecode`) and bytecode written there:
    under PYTHONDONTWRITEBYTECODE (set on this machine) nothing was written, and every launcher compiled the standard
    library and its packages again, 0.34-0.36 s a start against 0.10 s."""
    return {**{k: v for k, v in env.items() if k != "PYTHONDONTWRITEBYTECODE"}, **folder}


_LAUNCHERS_BYTECODE: list[str] = []  # this process's folder for process_bytecode, once made
_LAUNCHERS_LOCK = threading.Lock()


def process_bytecode() -> dict[str, str]:
    """:func:`own_bytecode` for the launchers a command starts (``python -m serve`` under a gate's llama-servers): one
    fresh folder for this process, made on first use and removed at exit, so serve/ is compiled once per command (the
    equivalence and serve tests on 2 cores: 30.1-36.8 s so, 37.1 s with a folder per server)."""
    with _LAUNCHERS_LOCK:
        if not _LAUNCHERS_BYTECODE:
            folder = scratch.folder("bytecode")
            atexit.register(shutil.rmtree, folder, ignore_errors=True)
            _LAUNCHERS_BYTECODE.append(folder)
        return {BYTECODE_FOLDER: _LAUNCHERS_BYTECODE[0]}


