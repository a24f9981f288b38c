from __future__ import annotations

from pathlib import Path

import pytest

from ci.tinymodels import TinyModels, write_tiny_models
from tests.project_fixture import Fork, Project, make_fork, make_project


@pytest.fixture(autouse=True)
def _isolated_git(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    """No test sees the developer's git config, HOME or clock-dependent identity (pre-commit's pattern)."""
    home = tmp_path_factory.mktemp("home")
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(home / ".config"))
    monkeypatch.setenv("GIT_CONFIG_NOSYSTEM", "1")
    monkeypatch.setenv("GIT_CONFIG_GLOBAL", str(home / "gitconfig"))
    for var, value in {
        "GIT_AUTHOR_NAME": "Test Author",
        "GIT_AUTHOR_EMAIL": "author@example.invalid",
        "GIT_COMMITTER_NAME": "Test Committer",
        "GIT_COMMITTER_EMAIL": "committer@example.invalid",
        "GIT_AUTHOR_DATE": "2026-01-01T00:00:00Z",
        "GIT_COMMITTER_DATE": "2026-01-01T00:00:00Z",
    }.items():
        monkeypatch.setenv(var, value)
    monkeypatch.delenv("ONEBIT_CI_ROOT", raising=False)


@pytest.fixture(scope="session")
def fork(tmp_path_factory: pytest.TempPathFactory) -> Fork:
    """A fork with main, a merged side branch, an unmerged side branch, a tag and a pull ref (read-only)."""
    return make_fork(tmp_path_factory.mktemp("fork") / "ROCmFPX.git")


@pytest.fixture
def project(tmp_path: Path, fork: Fork) -> Project:
    """An onebit-ci project repository pinned to ``fork.c1``, the submodule not checked out."""
    return make_project(tmp_path / "project", fork, fork.c1)


@pytest.fixture(scope="session")
def tiny_models(tmp_path_factory: pytest.TempPathFactory) -> TinyModels:
    """The gates' tiny GGUF models (target, drafter, other target), written once per run."""
    return write_tiny_models(tmp_path_factory.mktemp("tiny-models"))
