from __future__ import annotations

import subprocess

import pygit2
import pytest

from ci.source import export, sync
from ci.source.series import NO_UPSTREAM, load_series
from tests.support.fixtures import MakePatch
from tests.support.gitrepo import signature
from tests.support.project import DELTA_AT_C1, Project

TRAILERS = "\n\nUpstream: https://github.com/ggml-org/llama.cpp/pull/2\nDrop-when: the pin includes ggml-org/llama.cpp#2\n"


def commit_in_checkout(project: Project, branch: str, message: str, files: dict[str, str]) -> str:
    repo = pygit2.Repository(str(project.submodule))
    for path, text in files.items():
        (project.submodule / path).write_text(text)
        repo.index.add(path)
    repo.index.write()
    tree = repo.index.write_tree()
    ref = f"refs/heads/{branch}"
    parent = repo.references[ref].target if ref in repo.references else repo.head.target
    oid = repo.create_commit(ref, signature(1), signature(1), message, tree, [parent])
    repo.set_head(ref)
    return str(oid)


@pytest.fixture
def checked_out(project: Project) -> Project:
    assert project.ci("patches", "--remote", str(project.fork.path)).code == 0
    return project


def test_export_writes_one_patch_per_commit_in_order_and_they_apply(checked_out: Project, add_patch: MakePatch) -> None:
    project = checked_out
    add_patch("old-fix.patch", {"README.md": "old\n"})
    first = DELTA_AT_C1.replace("x + 1;", "x + 100;")
    second = first.replace("x + 2;", "x + 200;")
    commit_in_checkout(project, "fixes", "ggml: fix delta one" + TRAILERS, {"ggml/src/delta.c": first})
    tip = commit_in_checkout(project, "fixes", "ggml: fix delta two" + TRAILERS, {"ggml/src/delta.c": second})
    r = project.ci("export-patches", "--branch", "fixes")
    assert r.code == 0, r.err
    assert export.WROTE.format(patches="2 patches", branch="fixes") in r.out
    listed = [export.WROTE_PATCH.format(patch="ggml-fix-delta-one.patch"), export.WROTE_PATCH.format(patch="ggml-fix-delta-two.patch")]
    assert "".join(line + "\n" for line in [*listed, export.REMOVED_PATCH.format(patch="old-fix.patch")]) in r.out
    series = (project.root / "patches" / "series").read_text()
    assert series == "# order of the patches\nggml-fix-delta-one.patch\nggml-fix-delta-two.patch\n"
    assert not (project.root / "patches" / "old-fix.patch").exists()
    text = (project.root / "patches" / "ggml-fix-delta-one.patch").read_text()
    assert text.startswith("From 0000000000000000000000000000000000000000 ")  # git format-patch --zero-commit
    assert "Subject: [PATCH] ggml: fix delta one\n" in text
    assert " ggml/src/delta.c | 2 +-\n" in text
    # the checkout is back at the pin with the new series applied, and the branch keeps its commits
    what = sync.SERIES_WHAT.format(patches="2 patches", digest=load_series(project.root / "patches").digest[:12])
    applied = sync.APPLIED.format(series=what, commit=project.fork.c1[:7], moved=sync.MOVED_FROM.format(commit=tip[:7]))
    assert applied in r.out
    assert export.BACK_AT_PIN.format(synced=applied, branch="fixes") in r.out
    repo = pygit2.Repository(str(project.submodule))
    assert repo.head_is_detached
    assert str(repo.head.target) == project.fork.c1
    assert (project.submodule / "ggml/src/delta.c").read_text() == second
    assert "refs/heads/fixes" in repo.references
    assert project.ci("verify-pin").code == 0
    assert sync.ALREADY_APPLIED.format(series=what, commit=project.fork.c1[:7]) in project.ci("patches").out
    subprocess.run(["git", "switch", "-q", "--discard-changes", "--detach", project.fork.c1], cwd=project.submodule, check=True)
    r = project.ci("patches")
    assert r.code == 0, r.err
    assert (project.submodule / "ggml/src/delta.c").read_text() == second


def test_uncommitted_work_keeps_the_checkout_on_the_branch(checked_out: Project) -> None:
    project = checked_out
    tip = commit_in_checkout(project, "fixes", "ggml: fix delta one" + TRAILERS, {"ggml/src/delta.c": DELTA_AT_C1.replace("x + 1;", "x + 100;")})
    (project.submodule / "README.md").write_text("not yet committed\n")
    r = project.ci("export-patches", "--branch", "fixes")
    assert r.code == 0, r.err
    back = export.BACK_TO_SERIES.format(name="third_party/llama.cpp-rocmfpx", commit=project.fork.c1[:7])
    assert export.LEFT_UNCOMMITTED.format(branch="fixes", back=back) in r.out
    repo = pygit2.Repository(str(project.submodule))
    assert str(repo.head.target) == tip
    assert (project.submodule / "README.md").read_text() == "not yet committed\n"


def test_a_commit_without_the_trailers_is_refused_and_nothing_written(checked_out: Project) -> None:
    project = checked_out
    sha = commit_in_checkout(project, "fixes", "ggml: no header", {"README.md": "x\n"})
    r = project.ci("export-patches", "--branch", "fixes")
    assert r.code == 2
    assert NO_UPSTREAM.format(patch=export.COMMIT_DISPLAY.format(commit=sha[:12], subject="ggml: no header")) in r.err
    assert not (project.root / "patches").exists()


def test_a_branch_that_does_not_start_at_the_pin_is_refused(checked_out: Project) -> None:
    project = checked_out
    repo = pygit2.Repository(str(project.submodule))
    repo.references.create("refs/heads/elsewhere", pygit2.Oid(hex=project.fork.c0))
    r = project.ci("export-patches", "--branch", "elsewhere")
    assert r.code == 4
    assert export.NOT_FROM_PIN.format(branch="elsewhere", commit=project.fork.c1[:7]) in r.err
    r = project.ci("export-patches", "--branch", "nope")
    assert r.code == 2
    assert export.NO_LOCAL_BRANCH.format(name="third_party/llama.cpp-rocmfpx", branch="nope") in r.err


def commit_bytes(project: Project, branch: str, message: str, path: str, data: bytes) -> str:
    (project.submodule / path).write_bytes(data)
    repo = pygit2.Repository(str(project.submodule))
    repo.index.add(path)
    repo.index.write()
    ref = f"refs/heads/{branch}"
    parent = repo.references[ref].target if ref in repo.references else repo.head.target
    oid = repo.create_commit(ref, signature(1), signature(1), message, repo.index.write_tree(), [parent])
    repo.set_head(ref)
    return str(oid)


def test_a_crlf_file_comes_back_byte_for_byte_and_one_not_utf8_is_refused_before_patches_is_touched(checked_out: Project) -> None:
    """git format-patch was read through a text pipe: 0xe9 came back as U+FFFD in the checkout (exit 0), and a CRLF
    line lost its CR, so the new series no longer applied after patches/ had been rewritten (a hostile pass). A
    series is UTF-8 text (the series reader), so the latin-1 file is now refused in one line, patches/ untouched."""
    project = checked_out
    crlf = b"one\r\ntwo\r\n"
    commit_bytes(project, "fixes", "docs: a crlf file" + TRAILERS, "crlf.txt", crlf)
    r = project.ci("export-patches", "--branch", "fixes")
    assert r.code == 0, r.err
    assert (project.submodule / "crlf.txt").read_bytes() == crlf
    before = {p.name: p.read_bytes() for p in (project.root / "patches").iterdir()}
    subprocess.run(["git", "switch", "-q", "fixes"], cwd=project.submodule, check=True)
    commit_bytes(project, "fixes", "docs: a latin-1 file" + TRAILERS, "latin.txt", b"caf\xe9\n")
    r = project.ci("export-patches", "--branch", "fixes")
    assert r.code == 2, r.out + r.err
    assert "not UTF-8 text" in r.err
    assert r.err.count("\n") == 1
    assert {p.name: p.read_bytes() for p in (project.root / "patches").iterdir()} == before
    assert (project.submodule / "latin.txt").read_bytes() == b"caf\xe9\n"  # the branch, as it was


def test_a_series_that_would_not_apply_is_refused_before_patches_is_touched(checked_out: Project, add_patch: MakePatch) -> None:
    """A commit adding a symbolic link: the old patches were removed, then the sync refused the new series."""
    project = checked_out
    add_patch("old-fix.patch", {"README.md": "old\n"})
    before = {p.name: p.read_bytes() for p in (project.root / "patches").iterdir()}
    (project.submodule / "evil").symlink_to("../../../../etc/passwd")
    repo = pygit2.Repository(str(project.submodule))
    repo.index.add("evil")
    repo.index.write()
    oid = repo.create_commit("refs/heads/fixes", signature(1), signature(1), "add a link" + TRAILERS, repo.index.write_tree(), [repo.head.target])
    repo.set_head("refs/heads/fixes")
    r = project.ci("export-patches", "--branch", "fixes")
    assert r.code == 4, r.out + r.err
    assert "symbolic link" in r.err
    assert r.err.count("\n") == 1
    assert {p.name: p.read_bytes() for p in (project.root / "patches").iterdir()} == before
    assert str(repo.head.target) == str(oid)


def test_a_commit_that_changes_nothing_is_named_not_a_crash(checked_out: Project) -> None:
    project = checked_out
    commit_in_checkout(project, "fixes", "ggml: fix delta one" + TRAILERS, {"ggml/src/delta.c": DELTA_AT_C1.replace("x + 1;", "x + 100;")})
    repo = pygit2.Repository(str(project.submodule))
    repo.create_commit("refs/heads/fixes", signature(1), signature(1), "nothing" + TRAILERS, repo.head.peel(pygit2.Tree).id, [repo.head.target])
    assert not (project.root / "patches").exists()
    r = project.ci("export-patches", "--branch", "fixes")
    # git writes an empty commit's patch with no diff (the series reader refuses it) or, in older versions, none at all
    # (EMPTY_COMMITS): one line either way, where one format-patch over the range might have lost the order
    assert r.code in (2, 4), r.err
    assert r.err.count("\n") == 1
    assert not (project.root / "patches").exists()  # nothing written
