"""The pytest fixtures every test directory may use, registered once by tests/conftest.py (``pytest_plugins``)."""

from __future__ import annotations

import signal
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from ci import environment
from ci.gates.tiny.models import TinyModels, write_tiny_models
from tests.support.build import BuildFork, make_build_fork
from tests.support.equivalence import Recorded
from tests.support.gitrepo import Files
from tests.support.patches import add_to_series, make_patch_text
from tests.support.project import Fork, Project, make_fork, make_project

MakePatch = Callable[..., str]


def pytest_configure(config: pytest.Config) -> None:
    """Ctrl-C is Python's KeyboardInterrupt in the suite however it was started: a shell starts a background job
    (``nox -s tests &``, a loop under nohup) with SIGINT ignored, its programs inherit that, and the tests of Ctrl-C
    then saw none (7 failures in a run of the ten-run measurement, 2026-12-05). Handled here, the programs the tests
    start get the default again (execve)."""
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)


@pytest.fixture(autouse=True)
def _isolated_git(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    """No test sees the developer's git config, HOME, clock-dependent identity or machine flags (pre-commit's pattern)."""
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
    for var in ("ONEBIT_CI_ROOT", "ONEBIT_CMAKE_ARGS", "ONEBIT_RESULTS_DIR", "ONEBIT_PROFILE", "GITHUB_STEP_SUMMARY"):
        monkeypatch.delenv(var, raising=False)


@pytest.fixture(autouse=True)
def _no_job_declared() -> Iterator[None]:
    """What a command's job declares (ci.environment.declare) holds for the rest of the process: here, the test's."""
    yield
    environment.declare(())


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


@pytest.fixture(scope="session")
def recorded() -> Recorded:
    return Recorded()


# -- patches on the fixture fork -----------------------------------------------------------------------------------


@pytest.fixture
def add_patch(project: Project) -> MakePatch:
    """Write patches/NAME from a change on ``base`` (default: the pin) and append it to the series."""

    def add(name: str, files: Files, base: str | None = None, **kwargs: str) -> str:
        return add_to_series(project.root, name, make_patch_text(project.fork.builder, base or project.fork.c1, files, **kwargs))

    return add


@pytest.fixture
def fork_patch_on(project: Project) -> MakePatch:
    """Like add_patch, but the change is made on top of ``on`` files applied to the pin (a dependent patch)."""

    def add(name: str, files: Files, on: Files) -> str:
        base = project.fork.builder.commit("base", on, parents=[project.fork.c1], ref=f"refs/scratch/base-{name}")
        return add_to_series(project.root, name, make_patch_text(project.fork.builder, base, files))

    return add


# -- the fixture CMake project as a fork ---------------------------------------------------------------------------


@pytest.fixture(scope="session")
def build_fork(tmp_path_factory: pytest.TempPathFactory) -> BuildFork:
    """A fork whose tree is the fixture CMake project (plus the paths a checkout omits)."""
    return make_build_fork(tmp_path_factory.mktemp("buildfork") / "fork.git")


@pytest.fixture
def make_build_project(tmp_path: Path, build_fork: BuildFork) -> Callable[..., Project]:
    """A project pinned to the fixture fork; ``pins_extra`` is appended to its pins.yaml."""

    def make(pins_extra: str = "") -> Project:
        return make_project(tmp_path / "project", build_fork.as_fork(), build_fork.f0, pins_extra=pins_extra)

    return make


@pytest.fixture
def build_project(make_build_project: Callable[..., Project]) -> Project:
    return make_build_project()
