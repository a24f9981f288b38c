"""The build the hostile passes try to ship: the fixture fork with ``wrong.patch``, whose libggml answers 41 where the
replayed test-backend-ops wants 42, so backend_ops fails it."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from ci import loaded
from ci.commands import gpu_tests
from ci.compile.manifest import Sealed
from ci.compile.stage import CurrentBuild
from tests.release.test_ship import GATES, built, record, ship
from tests.support.build import BuildFork, add_fixture_patch, build_cpu, replay_flags
from tests.support.project import Project


def prepared(project: Project, monkeypatch: pytest.MonkeyPatch) -> None:
    """The fixture's test-backend-ops replaying the real CPU one's 36 GATED_DELTA_NET cases, pins.yaml expecting 36,
    and the checkout built once, unpatched: the build a patch is made against (its libggml answers 42)."""
    monkeypatch.setenv("ONEBIT_CMAKE_ARGS", replay_flags())
    project.pins.write_text(project.pins.read_text().replace("GATED_DELTA_NET: 54", "GATED_DELTA_NET: 36"))
    assert build_cpu(project).code == 0


def failing(project: Project, fork: BuildFork) -> dict[str, Any]:
    """``wrong.patch`` added and built; the build's manifest. Its own backend_ops fails (exit 7)."""
    add_fixture_patch(project, fork, "wrong.patch", "ggml/ggml.c", "return 42;", "return 41;")
    m = built(project)
    assert project.ci("gpu-tests", "--profile", "cpu", "--gate", "backend_ops").code == 7
    return m


@contextlib.contextmanager
def linked_after_seal(monkeypatch: pytest.MonkeyPatch, folder: Path, target: Path, put_back_at: str) -> Iterator[None]:
    """As another process of this user would: ``folder`` renamed aside and a link to ``target`` put in its place once
    gpu_tests has hashed the build, and the folder put back as the watch's ``put_back_at`` (``judge``, ``close``) is
    called (the program done), no file in it touched; at the latest when the block ends."""
    aside = folder.with_name(f".{folder.name}-aside")
    sealed, watch_step = gpu_tests.sealed, getattr(loaded.Watch, put_back_at)

    def put_back() -> None:
        if folder.is_symlink():
            folder.unlink()
            os.rename(aside, folder)

    def then_linked(build: CurrentBuild) -> Sealed:
        seal = sealed(build)
        os.rename(folder, aside)
        folder.symlink_to(target)
        return seal

    def put_back_first(self: loaded.Watch, *args: object, **kwargs: object) -> object:
        put_back()
        return watch_step(self, *args, **kwargs)

    with monkeypatch.context() as patched:
        patched.setattr(gpu_tests, "sealed", then_linked)
        patched.setattr(loaded.Watch, put_back_at, put_back_first)
        try:
            yield
        finally:
            put_back()


def not_shipped(project: Project, m: dict[str, Any], *context: object) -> None:
    """The route and equivalence records that pass added for the build of ``m``; ship must then refuse it and write
    nothing into dist/ (``context``: what to show when it does not)."""
    record(project, m, GATES.route, GATES.equivalence)
    shipped = ship(project)
    assert shipped.code != 0, (*context, shipped.out + shipped.err)
    assert not (project.root / "dist").exists() or not any((project.root / "dist").iterdir())
