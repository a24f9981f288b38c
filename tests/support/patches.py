"""Patch files for tests: a real ``git format-patch`` of a commit made in a fixture fork, and a series that lists it."""

from __future__ import annotations

import itertools
import subprocess
from pathlib import Path

from tests.support.gitrepo import Files, RepoBuilder

_counter = itertools.count()


def format_patch(builder: RepoBuilder, sha: str) -> bytes:
    """``git format-patch -1 --stdout`` of ``sha`` in the builder's repository."""
    return subprocess.run(
        ["git", "--git-dir", builder.repo.path, "format-patch", "-1", "--stdout", sha], capture_output=True, check=True
    ).stdout


def make_patch_text(
    builder: RepoBuilder,
    base: str,
    files: Files,
    subject: str = "ggml: fix the delta kernel",
    upstream: str = "https://github.com/ggml-org/llama.cpp/pull/1",
    drop_when: str = "the pin includes ggml-org/llama.cpp#1",
) -> bytes:
    """A real git format-patch of a commit made on ``base`` in the fork (kept off every branch)."""
    message = f"{subject}\n\nWhat it fixes, in a sentence.\n\nUpstream: {upstream}\nDrop-when: {drop_when}\n"
    sha = builder.commit(message, files, parents=[base], ref=f"refs/scratch/{next(_counter)}")
    return format_patch(builder, sha)


def add_to_series(root: Path, name: str, data: bytes) -> str:
    """Write ``patches/NAME`` and append it to ``patches/series``."""
    directory = root / "patches"
    directory.mkdir(exist_ok=True)
    (directory / name).write_bytes(data)
    series = directory / "series"
    old = series.read_text() if series.is_file() else "# order of the patches\n"
    series.write_text(old + name + "\n")
    return name
