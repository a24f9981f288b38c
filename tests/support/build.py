"""The fixture CMake project (tests/compile/fixture) as a fork, and builds of it through the real CLI."""

from __future__ import annotations

import json
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import pytest

from tests.support.gitrepo import RepoBuilder
from tests.support.patches import add_to_series, make_patch_text
from tests.support.project import Fork, Project, Result

FIXTURE = Path(__file__).resolve().parents[1] / "compile" / "fixture"


@dataclass(frozen=True)
class BuildFork:
    """A fork whose tree is the fixture CMake project (plus the paths a checkout omits)."""

    path: Path
    f0: str
    builder: RepoBuilder

    def as_fork(self) -> Fork:
        """For make_project, which only uses a fork's ``path`` and ``builder``."""
        return cast(Fork, self)


def make_build_fork(path: Path) -> BuildFork:
    files: dict[str, Any] = {str(p.relative_to(FIXTURE)): p.read_bytes() for p in FIXTURE.rglob("*") if p.is_file()}
    files |= {"models/ggml-vocab-big.gguf": b"GGUF", "docs/index.md": "# docs\n"}
    b = RepoBuilder(path, bare=True)
    return BuildFork(Path(b.repo.path), b.commit("fixture project", files), b)


def build_cpu(project: Project, *args: str) -> Result:
    return project.ci("build", "--profile", "cpu", "--remote", str(project.fork.path), *args)


def manifest(project: Project, profile: str = "cpu") -> dict[str, Any]:
    return cast(dict[str, Any], json.loads((project.root / "build" / profile / "build.json").read_text()))


def run_binary(project: Project, name: str) -> str:
    path = project.root / "build" / "cpu" / manifest(project)["binaries"][name]["path"]
    return subprocess.run([str(path)], capture_output=True, text=True, check=True).stdout


def add_fixture_patch(project: Project, fork: BuildFork, name: str, path: str, old: str, new: str) -> None:
    """A patch replacing ``old`` with ``new`` in ``path`` of the fixture project, appended to the series."""
    text = (project.submodule / path).read_text().replace(old, new)
    add_to_series(project.root, name, make_patch_text(fork.builder, fork.f0, {path: text}))


def replay_flags() -> str:
    """The machine flags that make the fixture's test-backend-ops replay the real CPU one's output (the failing run
    when ggml's answer is wrong)."""
    data = FIXTURE.parents[1] / "backend_ops" / "data"
    return f"-DFIXTURE_REPLAY_CONSOLE={data / 'cpu.console.txt'} -DFIXTURE_REPLAY_SQL={data / 'cpu.sql.txt'} -DFIXTURE_REPLAY_CONSOLE_FAIL={data / 'cpu-fail.console.txt'}"


def stand_in_server_flags(directory: Path) -> str:
    """For the fast tier: the replaying test-backend-ops, and a llama-server that runs the stand-in server
    (tests/support/stand_in_llama_server.py) in its place."""
    from tests.support.stand_in_llama_server import write_launcher

    return f"{replay_flags()} -DFIXTURE_LLAMA_SERVER={write_launcher(directory)}"


def stand_in_flags() -> str:
    """The machine flags that make the fixture's binaries stand in for the fork's: test-backend-ops replays the real
    CPU one's output (the failing run when ggml's answer is wrong), llama-server runs the real CPU llama-server."""
    from tests.support.binaries import llama_binary

    return f"{replay_flags()} -DFIXTURE_LLAMA_SERVER={llama_binary('llama-server')}"


def count_calls(monkeypatch: pytest.MonkeyPatch, *targets: str) -> dict[str, int]:
    """Count each call of the functions named ``module.function`` (wherever a module imported them from, too):
    the returned dict fills in as they are called."""
    import importlib
    import sys

    calls = dict.fromkeys(targets, 0)
    for target in targets:
        module_name, _, name = target.rpartition(".")
        original = getattr(importlib.import_module(module_name), name)

        def counted(*args: Any, _target: str = target, _original: Any = original, **kwargs: Any) -> Any:
            calls[_target] += 1
            return _original(*args, **kwargs)

        for module in list(sys.modules.values()):
            if module is not None and module.__name__.startswith("ci") and getattr(module, name, None) is original:
                monkeypatch.setattr(module, name, counted)
    return calls
