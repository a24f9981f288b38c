"""The bisect tests' fork (32 commits, a planted regression at c21) and a project pinned to its first commit."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.bisect_fork import BisectFork, add_server_patch, make_bisect_fork
from tests.support.build import replay_flags
from tests.support.project import Project, make_project


@pytest.fixture(scope="session")
def bisect_fork(tmp_path_factory: pytest.TempPathFactory) -> BisectFork:
    return make_bisect_fork(tmp_path_factory.mktemp("bisectfork") / "fork.git")


@pytest.fixture
def bisect_project(tmp_path: Path, bisect_fork: BisectFork, monkeypatch: pytest.MonkeyPatch) -> Project:
    """Pinned to the fixture commit (f0), one patch in the series, test-backend-ops replaying the real CPU one's
    output (the failing run from c21 on, where ggml's answer is no longer 42)."""
    project = make_project(tmp_path / "project", bisect_fork.fork.as_fork(), bisect_fork.fork.f0)
    project.pins.write_text(project.pins.read_text().replace("GATED_DELTA_NET: 54", "GATED_DELTA_NET: 36"))
    add_server_patch(project, bisect_fork)
    monkeypatch.setenv("ONEBIT_CMAKE_ARGS", replay_flags())
    return project
