"""The build the hostile passes try to ship: the fixture fork with ``wrong.patch``, whose libggml answers 41 where the
replayed test-backend-ops wants 42, so backend_ops fails it."""

from __future__ import annotations

from typing import Any

import pytest

from tests.release.test_ship import built
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
