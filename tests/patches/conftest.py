from __future__ import annotations

import itertools
from collections.abc import Callable

import pygit2
import pytest

from ci.patches import format_patch
from tests.gitrepo import Files
from tests.project_fixture import Fork, Project

_counter = itertools.count()

MakePatch = Callable[..., str]


def make_patch_text(
    fork: Fork,
    base: str,
    files: Files,
    subject: str = "ggml: fix the delta kernel",
    upstream: str = "https://github.com/ggml-org/llama.cpp/pull/1",
    drop_when: str = "the pin includes ggml-org/llama.cpp#1",
) -> bytes:
    """A real git format-patch of a commit made on ``base`` in the fork (kept off every branch)."""
    message = f"{subject}\n\nWhat it fixes, in a sentence.\n\nUpstream: {upstream}\nDrop-when: {drop_when}\n"
    sha = fork.builder.commit(message, files, parents=[base], ref=f"refs/scratch/{next(_counter)}")
    commit = fork.builder.repo[sha]
    assert isinstance(commit, pygit2.Commit)
    return format_patch(fork.builder.repo, commit)


@pytest.fixture
def add_patch(project: Project) -> MakePatch:
    """Write patches/NAME from a change on ``base`` and append it to the series."""

    def add(name: str, files: Files, base: str | None = None, **kwargs: str) -> str:
        directory = project.root / "patches"
        directory.mkdir(exist_ok=True)
        (directory / name).write_bytes(make_patch_text(project.fork, base or project.fork.c1, files, **kwargs))
        series = directory / "series"
        old = series.read_text() if series.is_file() else "# order of the patches\n"
        series.write_text(old + name + "\n")
        return name

    return add


@pytest.fixture
def fork_patch_on(project: Project) -> MakePatch:
    """Like add_patch, but the change is made on top of ``on`` files applied to the pin (a dependent patch)."""

    def add(name: str, files: Files, on: Files) -> str:
        base = project.fork.builder.commit("base", on, parents=[project.fork.c1], ref=f"refs/scratch/base-{next(_counter)}")
        directory = project.root / "patches"
        (directory / name).write_bytes(make_patch_text(project.fork, base, files))
        series = directory / "series"
        series.write_text(series.read_text() + name + "\n")
        return name

    return add
