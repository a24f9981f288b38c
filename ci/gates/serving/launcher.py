"""The launcher the gates start and ship puts in the wheel: where it is, one digest of its files, and the fresh
bytecode folder every Python that runs it gets (so the tree's __pycache__ is neither read nor written)."""

from __future__ import annotations

import atexit
import contextlib
import hashlib
import shutil
import tempfile
import threading
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path

SOURCE_ROOT = Path(__file__).resolve().parents[3]  # the onebit-ci checkout: the launcher and its route tests
LAUNCHER_SKIPS = ("__pycache__", "*.pyc")  # what neither the digest nor the wheel holds (shutil.ignore_patterns)
BYTECODE_FOLDER = "PYTHONPYCACHEPREFIX"


def launcher_dir() -> Path:
    """The serve package ship puts in the wheel: the one this Python imports (this checkout's, in nox's sessions)."""
    import serve

    return Path(serve.__file__).resolve().parent


def launcher_sha256(directory: Path | None = None) -> str:
    """One digest of the launcher's files (paths and contents), as ship would copy them: the route and equivalence
    records are bound to it, so a launcher edited after the gates ran is not shipped on their evidence."""
    root = directory or launcher_dir()
    return files_sha256(root, files_under(root))


def files_under(root: Path) -> list[Path]:
    skipped = shutil.ignore_patterns(*LAUNCHER_SKIPS)  # the very filter ship's copytree applies, name by name
    return [p for p in root.rglob("*") if p.is_file() and not any(skipped("", [part]) for part in p.relative_to(root).parts)]


def files_sha256(root: Path, files: Iterable[Path]) -> str:
    digest = hashlib.sha256()
    for path in sorted(files):
        digest.update(path.relative_to(root).as_posix().encode() + b"\0" + hashlib.sha256(path.read_bytes()).digest())
    return digest.hexdigest()


@contextlib.contextmanager
def own_bytecode() -> Iterator[dict[str, str]]:
    """The environment for a Python a gate starts on the launcher (its tests, ``python -m serve``): its bytecode in a
    fresh folder, removed afterwards, so the __pycache__ folders of the tree are neither read nor written. Python
    checks a .pyc only by its source's mtime and size: a good module's .pyc left in serve/__pycache__ beside a bad
    source of the same size, its mtime put back, was what the tests judged, while the digest and the wheel held the
    source."""
    with tempfile.TemporaryDirectory(prefix="onebit-bytecode-", ignore_cleanup_errors=True) as folder:
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
    fresh folder for this process, made on first use and removed when it exits, so serve/ is compiled once per
    command, not once per server. Made here, it holds nothing planted before the command ran, as a folder per server
    would not either. What it costs, the equivalence and serve tests (256) on 2 cores: 22.3-24.3 s with the tree's
    __pycache__, 30.1-36.8 s with this folder, 37.1 s with a folder per server; most of it is the standard library and
    the packages each command compiles again, not serve/."""
    with _LAUNCHERS_LOCK:
        if not _LAUNCHERS_BYTECODE:
            folder = tempfile.mkdtemp(prefix="onebit-bytecode-")
            atexit.register(shutil.rmtree, folder, ignore_errors=True)
            _LAUNCHERS_BYTECODE.append(folder)
        return {BYTECODE_FOLDER: _LAUNCHERS_BYTECODE[0]}
