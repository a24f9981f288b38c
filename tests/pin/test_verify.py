from __future__ import annotations

import pygit2

from ci import cli, schema
from ci.pin import pins, verify
from tests.support.project import FORK_URL, Project

SUBMODULE = "third_party/llama.cpp-rocmfpx"


def test_a_consistent_project_verifies(project: Project) -> None:
    r = project.ci("verify-pin")
    assert r.code == 0, r.err
    assert r.out.startswith(verify.VERIFIED.format(commit=project.fork.c1[:7], reference="ROCmFPX#2", branch="main"))


def test_every_disagreement_is_reported_in_one_run(project: Project) -> None:
    gm = project.root / ".gitmodules"
    gm.write_text(gm.read_text().replace("example.invalid", "example.org").replace("branch = main", "branch = dev"))
    index = project.repo.index
    index.add(pygit2.IndexEntry("third_party/llama.cpp-rocmfpx", pygit2.Oid(hex=project.fork.c2), pygit2.enums.FileMode.COMMIT))
    index.write()
    r = project.ci("verify-pin")
    assert r.code == 2
    lines = [line for line in r.err.splitlines() if line.startswith(cli.ERROR.format(message=""))]
    assert len(lines) == 4, r.err
    assert verify.URL_DISAGREES.format(name=SUBMODULE, url=FORK_URL.replace("example.invalid", "example.org"), pinned=FORK_URL) in lines[0]
    assert verify.BRANCH_DISAGREES.format(name=SUBMODULE, branch="dev", pinned="main") in lines[1]
    assert verify.GITLINK_DISAGREES.format(path=SUBMODULE, gitlink=project.fork.c2[:12], commit=project.fork.c1[:12]) in lines[2]
    assert lines[3] == cli.ERROR.format(message=verify.PROBLEMS.format(count=3))


def test_a_missing_gitlink_and_a_missing_gitmodules(project: Project) -> None:
    (project.root / ".gitmodules").unlink()
    index = project.repo.index
    index.remove("third_party/llama.cpp-rocmfpx")
    index.write()
    r = project.ci("verify-pin")
    assert r.code == 2
    assert verify.GITMODULES_MISSING.format(path=SUBMODULE) in r.err
    assert verify.NO_GITLINK.format(path=SUBMODULE, commit=project.fork.c1) in r.err


def test_a_checkout_at_another_commit_is_reported(project: Project) -> None:
    assert project.ci("bump-pin", project.fork.c2[:8], "--remote", str(project.fork.path)).code == 0
    import subprocess

    assert project.ci("patches").code == 0
    subprocess.run(["git", "switch", "-q", "--detach", project.fork.c3], cwd=project.submodule, check=True)
    r = project.ci("verify-pin")
    assert r.code == 2
    assert verify.CHECKED_OUT_ELSEWHERE.format(path=SUBMODULE, head=project.fork.c3[:12], commit=project.fork.c2[:12]) in r.err


def test_a_broken_pins_yaml_is_one_clear_line(project: Project) -> None:
    project.pins.write_text(project.pins.read_text().replace("commit: ", "commit: b82c8b8 #"))
    r = project.ci("verify-pin")
    assert r.code == 2
    problem = schema.VALUE_PROBLEM.format(value=schema.describe("b82c8b8"), problem=pins.NOT_A_FULL_SHA)
    assert cli.ERROR.format(message=schema.AT_KEY.format(file="pins.yaml", key="fork.commit", problem=problem)) in r.err


def test_a_section_without_url_or_branch_says_it_is_missing(project: Project) -> None:
    """Before: 'submodule....branch is "None"', as if the branch were named None."""
    gm = project.root / ".gitmodules"
    gm.write_text("".join(line for line in gm.read_text().splitlines(keepends=True) if not line.strip().startswith(("url", "branch"))))
    r = project.ci("verify-pin")
    assert r.code == 2
    assert '"None"' not in r.err
    assert verify.URL_MISSING.format(name=SUBMODULE, pinned=FORK_URL) in r.err
    assert verify.BRANCH_MISSING.format(name=SUBMODULE, pinned="main") in r.err
