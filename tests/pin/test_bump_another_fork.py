"""Moving the pin to another fork is refused once, with every reason and one command that does it: before, it took
three refusals in a row (the branch, then the history, then the URL), and the branch's refusal listed 8 of 33 branches,
left out ``main`` and never named ``--branch``."""

from __future__ import annotations

from pathlib import Path

import pytest

from ci.commands import bump_pin
from ci.source import store
from tests.support.gitrepo import RepoBuilder
from tests.support.messages import said
from tests.support.project import Project

OTHER_URL = "https://example.invalid/other/ROCmFPX"


@pytest.fixture
def other_fork(tmp_path: Path) -> tuple[Path, str]:
    """A fork that shares no history with the pin's: its commit on ``trunk``, eight other branches, no ``main``."""
    b = RepoBuilder(tmp_path / "other.git", bare=True)
    root = b.commit("other: root", {"ggml/src/delta.c": "int delta(int x) { return x; }\n"}, branch="trunk")
    tip = b.commit("other: a fix", {"ggml/src/delta.c": "int delta(int x) { return x + 3; }\n"}, branch="trunk")
    for i in range(8):
        b.commit(f"agent {i}", {f"agent{i}.txt": "x\n"}, branch=f"agent/work-{i}", parents=[root])
    return tmp_path / "other.git", tip


def test_one_refusal_names_every_reason_and_the_command_that_does_it(project: Project, other_fork: tuple[Path, str]) -> None:
    mirror, tip = other_fork
    before = project.state()
    r = project.ci("bump-pin", tip[:8], "--remote", str(mirror))
    assert r.code == 4
    (line,) = [line for line in r.err.splitlines() if line.startswith("onebit-ci: error:")]
    assert said(bump_pin.BRANCH_ABSENT, line, branch="main", where=bump_pin.ONLY_ON.format(branches="trunk"))
    assert bump_pin.WHY_UNRELATED.format(old=project.fork.c1[:12], new=tip[:12]) in line
    assert said(bump_pin.ANOTHER_FORK, line, remote=str(mirror))
    command = bump_pin.NEXT_BUMP.format(args=f"{tip[:8]} --remote {mirror} --branch trunk --url {bump_pin.URL_PLACEHOLDER} --allow-rollback")
    assert line.endswith(bump_pin.IF_MEANT.format(command=command)), line
    assert project.state() == before
    r = project.ci("bump-pin", tip[:8], "--remote", str(mirror), "--branch", "trunk", "--url", OTHER_URL, "--allow-rollback")
    assert r.code == 0, r.err
    assert project.gitlink() == tip


def test_a_branch_this_fork_lacks_is_listed_with_main_first_and_names_the_flag(project: Project) -> None:
    r = project.ci("bump-pin", "head", "--remote", str(project.fork.path), "--branch", "nope")
    assert r.code == 3
    assert said(store.BRANCH_NOT_IN_FORK, r.err, branch="nope")
    assert "branches: main, " in r.err
    assert bump_pin.NEXT_BUMP.format(args=f"head --remote {project.fork.path} --branch main") in r.err
