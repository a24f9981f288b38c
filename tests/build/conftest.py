from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import pytest

from tests.gitrepo import RepoBuilder
from tests.project_fixture import Fork, Project, make_project

FIXTURE = Path(__file__).parent / "fixture"


@dataclass(frozen=True)
class BuildFork:
    """A fork whose tree is the fixture CMake project (plus the paths a checkout omits)."""

    path: Path
    f0: str
    builder: RepoBuilder


@pytest.fixture(scope="session")
def build_fork(tmp_path_factory: pytest.TempPathFactory) -> BuildFork:
    files: dict[str, Any] = {str(p.relative_to(FIXTURE)): p.read_bytes() for p in FIXTURE.rglob("*") if p.is_file()}
    files |= {"models/ggml-vocab-big.gguf": b"GGUF", "docs/index.md": "# docs\n"}
    b = RepoBuilder(tmp_path_factory.mktemp("buildfork") / "fork.git", bare=True)
    return BuildFork(Path(b.repo.path), b.commit("fixture project", files), b)


@pytest.fixture
def make_build_project(tmp_path: Path, build_fork: BuildFork):  # type: ignore[no-untyped-def]
    """A project pinned to the fixture fork; ``pins_extra`` is appended to its pins.yaml."""

    def make(pins_extra: str = "") -> Project:
        return make_project(tmp_path / "project", cast(Fork, build_fork), build_fork.f0, pins_extra=pins_extra)

    return make


@pytest.fixture
def build_project(make_build_project) -> Project:  # type: ignore[no-untyped-def]
    return make_build_project()  # type: ignore[no-any-return]
