from __future__ import annotations

import pygit2

from tests.support.project import Project


def test_a_consistent_project_verifies(project: Project) -> None:
    r = project.ci("verify-pin")
    assert r.code == 0, r.err
    assert r.out.startswith(f"verify_pin: OK: pins.yaml, .gitmodules and the gitlink agree on {project.fork.c1[:7]}")


def test_every_disagreement_is_reported_in_one_run(project: Project) -> None:
    gm = project.root / ".gitmodules"
    gm.write_text(gm.read_text().replace("example.invalid", "example.org").replace("branch = main", "branch = dev"))
    index = project.repo.index
    index.add(pygit2.IndexEntry("third_party/llama.cpp-rocmfpx", pygit2.Oid(hex=project.fork.c2), pygit2.enums.FileMode.COMMIT))
    index.write()
    r = project.ci("verify-pin")
    assert r.code == 2
    lines = [line for line in r.err.splitlines() if line.startswith("onebit-ci: error: ")]
    assert len(lines) == 4, r.err
    assert '.gitmodules: submodule.third_party/llama.cpp-rocmfpx.url is "https://example.org/' in lines[0]
    assert '.gitmodules: submodule.third_party/llama.cpp-rocmfpx.branch is "dev" but pins.yaml fork.branch is "main"' in lines[1]
    assert f"index: gitlink third_party/llama.cpp-rocmfpx is {project.fork.c2[:12]} but pins.yaml fork.commit is {project.fork.c1[:12]}" in lines[2]
    assert lines[3] == "onebit-ci: error: verify_pin: 3 problem(s)"


def test_a_missing_gitlink_and_a_missing_gitmodules(project: Project) -> None:
    (project.root / ".gitmodules").unlink()
    index = project.repo.index
    index.remove("third_party/llama.cpp-rocmfpx")
    index.write()
    r = project.ci("verify-pin")
    assert r.code == 2
    assert ".gitmodules: missing" in r.err
    assert "index: no gitlink at third_party/llama.cpp-rocmfpx; add it with git update-index --add --cacheinfo 160000," in r.err


def test_a_checkout_at_another_commit_is_reported(project: Project) -> None:
    assert project.ci("bump-pin", project.fork.c2[:8], "--remote", str(project.fork.path)).code == 0
    import subprocess

    assert project.ci("patches").code == 0
    subprocess.run(["git", "switch", "-q", "--detach", project.fork.c3], cwd=project.submodule, check=True)
    r = project.ci("verify-pin")
    assert r.code == 2
    assert f"third_party/llama.cpp-rocmfpx: checked out at {project.fork.c3[:12]} but pins.yaml fork.commit is {project.fork.c2[:12]}" in r.err


def test_a_broken_pins_yaml_is_one_clear_line(project: Project) -> None:
    project.pins.write_text(project.pins.read_text().replace("commit: ", "commit: b82c8b8 #"))
    r = project.ci("verify-pin")
    assert r.code == 2
    assert 'onebit-ci: error: pins.yaml: fork.commit: "b82c8b8" is not a full 40-hex sha' in r.err
