from __future__ import annotations

import errno
import os
import subprocess
from pathlib import Path

import pygit2
import pytest

from ci import cli
from ci import git as ci_git
from ci.commands import bump_pin
from ci.errors import ConfigError
from ci.pin.project import Project as CiProject
from ci.source import series, sync
from ci.source.classify import IN_THE_TREE, NOT_APPLYING, VERDICT, VERDICT_DETAILED, Fate
from ci.source.series import load_series
from tests.support.fixtures import MakePatch
from tests.support.messages import said
from tests.support.project import DELTA_AT_C1, DELTA_C, Project

AT_PIN = DELTA_AT_C1
FIX = {"ggml/src/delta.c": AT_PIN.replace("x + 1;", "x + 100;")}
FIX_AGAIN = {"ggml/src/delta.c": AT_PIN.replace("x + 1;", "x + 100;").replace("x + 2;", "x + 200;")}
SUBMODULE = "third_party/llama.cpp-rocmfpx"


def remote(project: Project) -> tuple[str, str]:
    return ("--remote", str(project.fork.path))


def git(project: Project, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=project.submodule, capture_output=True, text=True, check=True).stdout


def staged(project: Project) -> list[str]:
    """What the series changed (staged against HEAD, the pin), as ``git diff --cached`` lists it."""
    return git(project, "diff", "--cached", "--name-status").splitlines()


def applied_series(project: Project, patches: str) -> str:
    """How the sync names the series in patches/ now: its size and digest."""
    return sync.SERIES_WHAT.format(patches=patches, digest=load_series(project.root / "patches").digest[:12])


def verdict_lines(*verdicts: str) -> str:
    return "".join(sync.VERDICT_LINE.format(verdict=v) + "\n" for v in verdicts)


def unstaged(project: Project) -> list[str]:
    """Work made on top of pin + series: what ``git status`` shows besides the staged series."""
    return [ln for ln in git(project, "status", "--porcelain", "--untracked-files=all").splitlines() if ln[1] != " "]


def test_the_series_applies_to_a_fresh_checkout_at_the_pin(project: Project, add_patch: MakePatch) -> None:
    add_patch("fix-delta.patch", FIX)
    r = project.ci("patches", *remote(project))
    assert r.code == 0, r.err
    checked_out = sync.CHECKED_OUT.format(name=SUBMODULE, commit=project.fork.c1[:7], omitted="models/, docs/", series=applied_series(project, "1 patch"))
    assert r.out.startswith(checked_out)
    assert (project.submodule / "ggml/src/delta.c").read_text() == FIX["ggml/src/delta.c"]
    assert not (project.submodule / "models").exists()
    repo = pygit2.Repository(str(project.submodule))
    assert str(repo.head.target) == project.fork.c1
    assert staged(project) == ["M\tggml/src/delta.c"]  # the series is the index's; the user's work shows unstaged
    assert unstaged(project) == []


def test_dependent_patches_apply_in_series_order(project: Project, add_patch: MakePatch, fork_patch_on: MakePatch) -> None:
    add_patch("one.patch", FIX)
    fork_patch_on("two.patch", FIX_AGAIN, FIX)
    r = project.ci("patches", "--check", *remote(project))
    assert r.code == 0, r.out
    assert verdict_lines(VERDICT.format(patch="one.patch", fate=Fate.APPLIES.value), VERDICT.format(patch="two.patch", fate=Fate.APPLIES.value)) in r.out
    assert project.ci("patches").code == 0
    assert (project.submodule / "ggml/src/delta.c").read_text() == FIX_AGAIN["ggml/src/delta.c"]


def test_a_second_run_is_a_no_op(project: Project, add_patch: MakePatch) -> None:
    add_patch("fix-delta.patch", FIX)
    assert project.ci("patches", *remote(project)).code == 0
    r = project.ci("patches")
    assert r.code == 0
    assert sync.ALREADY_APPLIED.format(series=applied_series(project, "1 patch"), commit=project.fork.c1[:7]) in r.out
    assert (project.submodule / "ggml/src/delta.c").read_text() == FIX["ggml/src/delta.c"]


def test_a_conflicting_patch_names_the_patch_file_and_hunk_and_applies_nothing(project: Project, add_patch: MakePatch) -> None:
    add_patch("fix-delta.patch", FIX)
    add_patch("stale.patch", {"ggml/src/delta.c": DELTA_C.replace("x + 5;", "x + 500;")}, base=project.fork.c0)
    # made on c0 where line 3 was "x + 3": at the pin c1 that line reads "x + 33", so the hunk's context differs
    r = project.ci("patches", *remote(project))
    assert r.code == 4
    hunk = ci_git.HUNK_DOES_NOT_MATCH.format(path="ggml/src/delta.c", number=1, header="@@ -3,7 +3,7 @@")  # the patch's own header
    conflict = VERDICT_DETAILED.format(patch="stale.patch", fate=Fate.CONFLICTS.value, detail=hunk)
    assert sync.SERIES_DOES_NOT_APPLY.format(listing=NOT_APPLYING.format(verdict=conflict)) in r.err
    assert not (project.submodule / ".git").exists()  # refused before the checkout was made
    r = project.ci("patches", "--check")
    assert r.code == 4
    assert verdict_lines(VERDICT.format(patch="fix-delta.patch", fate=Fate.APPLIES.value), conflict) in r.out


def test_a_hand_edit_is_refused_with_the_file_named_and_kept(project: Project, add_patch: MakePatch) -> None:
    assert project.ci("patches", *remote(project)).code == 0  # empty series: a checkout at the pin
    (project.submodule / "README.md").write_text("someone's work\n")
    (project.submodule / "notes.txt").write_text("an untracked file of theirs\n")
    add_patch("fix-delta.patch", FIX)
    r = project.ci("patches")
    assert r.code == 4
    at = sync.AT_COMMIT.format(commit=project.fork.c1[:7])
    assert sync.LOCAL_CHANGES.format(name=SUBMODULE, at=at, listing="README.md, notes.txt") in r.err
    assert (project.submodule / "README.md").read_text() == "someone's work\n"
    assert (project.submodule / "notes.txt").read_text() == "an untracked file of theirs\n"
    assert (project.submodule / "ggml/src/delta.c").read_text() == AT_PIN
    # the same edit on top of an applied series is refused too, and kept
    (project.submodule / "README.md").write_text("fork\n")
    (project.submodule / "notes.txt").unlink()
    assert project.ci("patches").code == 0
    (project.submodule / "ggml/src/delta.c").write_text("edited by hand\n")
    add_patch("readme.patch", {"README.md": "changed\n"})
    r = project.ci("patches")
    assert r.code == 4
    assert sync.LOCAL_CHANGES.format(name=SUBMODULE, at=at, listing="ggml/src/delta.c") in r.err
    assert (project.submodule / "ggml/src/delta.c").read_text() == "edited by hand\n"


def test_reset_discards_the_hand_edit_on_purpose(project: Project, add_patch: MakePatch) -> None:
    assert project.ci("patches", *remote(project)).code == 0
    (project.submodule / "README.md").write_text("someone's work\n")
    (project.submodule / "notes.txt").write_text("untracked\n")
    add_patch("fix-delta.patch", FIX)
    r = project.ci("patches", "--reset")
    assert r.code == 0, r.err
    what = applied_series(project, "1 patch")
    assert sync.DISCARDED.format(files="2 files", listing="README.md, notes.txt", series=what, commit=project.fork.c1[:7], moved="") in r.out
    assert (project.submodule / "README.md").read_text() == "fork\n"
    assert not (project.submodule / "notes.txt").exists()
    assert (project.submodule / "ggml/src/delta.c").read_text() == FIX["ggml/src/delta.c"]


def test_an_edited_patch_re_applies_without_complaint(project: Project, add_patch: MakePatch) -> None:
    add_patch("fix-delta.patch", FIX)
    assert project.ci("patches", *remote(project)).code == 0
    # edit the patch: the checkout is pin + the series this tool applied, so it moves to the new one
    add_patch("fix-delta.patch", FIX_AGAIN)
    (project.root / "patches" / "series").write_text("fix-delta.patch\n")
    r = project.ci("patches")
    assert r.code == 0, r.err
    assert r.out.startswith(sync.APPLIED.format(series=applied_series(project, "1 patch"), commit=project.fork.c1[:7], moved=""))
    assert (project.submodule / "ggml/src/delta.c").read_text() == FIX_AGAIN["ggml/src/delta.c"]
    # swap it for another patch altogether
    (project.root / "patches" / "series").write_text("readme.patch\n")
    add_patch("readme.patch", {"README.md": "changed\n"})
    (project.root / "patches" / "series").write_text("readme.patch\n")
    r = project.ci("patches")
    assert r.code == 0, r.err
    assert (project.submodule / "ggml/src/delta.c").read_text() == AT_PIN
    assert (project.submodule / "README.md").read_text() == "changed\n"
    assert staged(project) == ["M\tREADME.md"]


def test_a_pin_the_store_never_fetched_is_fetched_before_the_checkout_moves(project: Project, tmp_path: Path) -> None:
    assert project.ci("patches", *remote(project)).code == 0
    # a teammate's bump, pulled: pins.yaml and the gitlink name a commit of a mirror this store has never seen
    mirror = tmp_path / "teammate.git"
    subprocess.run(["git", "clone", "-q", "--bare", str(project.fork.path), str(mirror)], check=True)
    work = tmp_path / "work"
    subprocess.run(["git", "clone", "-q", str(mirror), str(work)], check=True)
    (work / "later.c").write_text("int later;\n")
    subprocess.run(["git", "add", "later.c"], cwd=work, check=True)
    subprocess.run(["git", "commit", "-qm", "the teammate's change"], cwd=work, check=True)
    subprocess.run(["git", "push", "-q", "origin", "HEAD:main"], cwd=work, check=True)
    new = subprocess.run(["git", "rev-parse", "HEAD"], cwd=work, capture_output=True, text=True, check=True).stdout.strip()
    project.pins.write_text(project.pins.read_text().replace(project.fork.c1, new))
    index = project.repo.index
    index.add(pygit2.IndexEntry("third_party/llama.cpp-rocmfpx", pygit2.Oid(hex=new), pygit2.enums.FileMode.COMMIT))
    index.write()
    r = project.ci("patches", "--remote", str(mirror))
    assert r.code == 0, r.err
    assert "Traceback" not in r.err
    assert git(project, "rev-parse", "HEAD").strip() == new
    assert (project.submodule / "later.c").read_text() == "int later;\n"


def test_a_patch_that_adds_and_deletes_files(project: Project, add_patch: MakePatch) -> None:
    add_patch("reshape.patch", {"ggml/src/new.c": "int added;\n", "README.md": None})
    r = project.ci("patches", *remote(project))
    assert r.code == 0, r.err
    assert (project.submodule / "ggml/src/new.c").read_text() == "int added;\n"
    assert not (project.submodule / "README.md").exists()
    assert project.ci("patches").code == 0  # recognised as pin + series


def test_crlf_content_is_patched_byte_for_byte(project: Project, add_patch: MakePatch) -> None:
    add_patch("win.patch", {"tools/win.txt": b"first\r\nSECOND\r\nthird\r\n"})
    r = project.ci("patches", *remote(project))
    assert r.code == 0, r.err
    assert (project.submodule / "tools/win.txt").read_bytes() == b"first\r\nSECOND\r\nthird\r\n"


def test_a_hunk_whose_context_moved_applies_at_its_offset_as_git_apply_does(project: Project, fork_patch_on: MakePatch) -> None:
    # made against a delta.c that lacks its first 5 lines: at the pin the same context sits 5 lines further down,
    # where `git apply` finds it ("Hunk #1 succeeded at 8 (offset 5 lines)") and libgit2 alone does not
    short = "".join(DELTA_AT_C1.splitlines(keepends=True)[5:])
    (project.root / "patches").mkdir()
    (project.root / "patches" / "series").write_text("# order of the patches\n")
    fork_patch_on("moved.patch", {"ggml/src/delta.c": short.replace("x + 9;", "x + 90;")}, on={"ggml/src/delta.c": short})
    assert "@@ -2,6 +2,6 @@" in (project.root / "patches" / "moved.patch").read_text()
    r = project.ci("patches", "--check", *remote(project))
    assert r.code == 0, r.err
    moved = ci_git.HUNK_AT_OFFSET.format(path="ggml/src/delta.c", number=1, offset=5)
    assert verdict_lines(VERDICT_DETAILED.format(patch="moved.patch", fate=Fate.APPLIES.value, detail=moved)) in r.out
    r = project.ci("patches")
    assert r.code == 0, r.err
    assert (project.submodule / "ggml/src/delta.c").read_text() == DELTA_AT_C1.replace("x + 9;", "x + 90;")
    assert sync.ALREADY_APPLIED.format(series=applied_series(project, "1 patch"), commit=project.fork.c1[:7]) in project.ci("patches").out


def test_a_patch_file_rewritten_with_crlf_gets_a_clear_error(project: Project, add_patch: MakePatch) -> None:
    name = add_patch("fix-delta.patch", FIX)
    path = project.root / "patches" / name
    path.write_bytes(path.read_bytes().replace(b"\n", b"\r\n"))
    r = project.ci("patches", *remote(project))
    assert r.code == 2
    assert series.CRLF_HEADERS.format(patch="patches/fix-delta.patch") in r.err


ESCAPES = [
    ("diff --git a/../outside.c b/../outside.c\n--- a/../outside.c\n+++ b/../outside.c\n", "../outside.c", series.OUTSIDE_PATH),
    ("diff --git a//etc/passwd b//etc/passwd\n--- a//etc/passwd\n+++ b//etc/passwd\n", "/etc/passwd", series.ABSOLUTE_PATH),
    ("diff --git a/.git/config b/.git/config\n--- a/.git/config\n+++ b/.git/config\n", ".git/config", series.INSIDE_GIT),
    (
        "diff --git a/ggml-link/src/delta.c b/ggml-link/src/delta.c\n--- a/ggml-link/src/delta.c\n+++ b/ggml-link/src/delta.c\n",
        "ggml-link/src/delta.c",
        series.THROUGH_LINK.format(link="ggml-link"),
    ),
    ("diff --git a/models/x b/models/x\n--- a/models/x\n+++ b/models/x\n", "models/x", series.OMITTED_PATH),
]


@pytest.mark.parametrize(("header", "path", "problem"), ESCAPES)
def test_a_patch_that_escapes_is_refused_before_anything_is_written(project: Project, header: str, path: str, problem: str) -> None:
    directory = project.root / "patches"
    directory.mkdir()
    body = "@@ -1 +1 @@\n-a\n+b\n"
    text = (
        "From 0000000000000000000000000000000000000000 Mon Sep 17 00:00:00 2001\nFrom: A <a@example.invalid>\n"
        "Subject: [PATCH] sneaky\n\nUpstream: not-needed: a test\nDrop-when: never\n---\n" + header + body
    )
    (directory / "sneaky.patch").write_text(text)
    (directory / "series").write_text("sneaky.patch\n")
    r = project.ci("patches", *remote(project))
    assert r.code == 4
    assert series.TOUCHES.format(patch="patches/sneaky.patch", path=path, problem=problem) in r.err
    assert not (project.submodule / ".git").exists()  # refused before the checkout was even made


def test_a_patch_that_adds_a_symlink_is_refused(project: Project, add_patch: MakePatch) -> None:
    from tests.support.gitrepo import Symlink

    add_patch("link.patch", {"escape": Symlink(b"/etc")})
    r = project.ci("patches", *remote(project))
    assert r.code == 4
    assert series.ADDS_LINK.format(patch="patches/link.patch", path="escape") in r.err


@pytest.mark.parametrize(
    ("listing", "message"),
    [
        ("a.patch\na.patch\n", series.LISTED_TWICE.format(series="patches/series", line=2, patch="a.patch")),
        (
            "missing.patch\n",
            series.NOT_IN_DIRECTORY.format(series="patches/series", line=1, patch="missing.patch", what=series.DOES_NOT_EXIST, directory="patches"),
        ),
        ("sub/a.patch\n", series.NOT_A_PATCH_NAME.format(series="patches/series", line=1, patch="sub/a.patch", directory="patches")),
    ],
)
def test_series_file_errors(tmp_path: Path, listing: str, message: str) -> None:
    d = tmp_path / "patches"
    d.mkdir()
    (d / "a.patch").write_text("x")
    (d / "series").write_text(listing)
    with pytest.raises(ConfigError) as exc:
        load_series(d)
    assert message in exc.value.message


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"upstream": "somewhere"}, series.UPSTREAM_NOT_URL.format(patch="patches/p.patch", upstream="somewhere")),
        ({"upstream": "not-needed:"}, series.UPSTREAM_NOT_URL.format(patch="patches/p.patch", upstream="not-needed:")),
        ({"drop_when": ""}, series.NO_DROP_WHEN.format(patch="patches/p.patch")),
    ],
)
def test_patch_header_errors(project: Project, add_patch: MakePatch, kwargs: dict[str, str], message: str) -> None:
    add_patch("p.patch", FIX, **kwargs)
    with pytest.raises(ConfigError) as exc:
        load_series(project.root / "patches")
    assert message in exc.value.message


def test_the_header_is_read(project: Project, add_patch: MakePatch) -> None:
    add_patch("p.patch", FIX, subject="ggml: a long subject that git folds", upstream="not-needed: the fork already has it in main")
    (p,) = load_series(project.root / "patches").patches
    assert p.subject == "ggml: a long subject that git folds"
    assert p.upstream == "not-needed: the fork already has it in main"
    assert p.drop_when == "the pin includes ggml-org/llama.cpp#1"


def test_the_series_digest_covers_names_bytes_and_order(project: Project, add_patch: MakePatch) -> None:
    add_patch("a.patch", FIX)
    add_patch("b.patch", {"README.md": "changed\n"})
    d = project.root / "patches"
    first = load_series(d).digest
    (d / "series").write_text("b.patch\na.patch\n")
    assert load_series(d).digest != first
    (d / "series").write_text("a.patch\nb.patch\n")
    assert load_series(d).digest == first
    (d / "b.patch").write_bytes((d / "b.patch").read_bytes() + b"\n")
    assert load_series(d).digest != first


def test_a_patch_already_in_the_tree_is_upstream_by_git_apply_reverse(project: Project, add_patch: MakePatch) -> None:
    add_patch("done.patch", {"README.md": "fork\nserver\n"})  # c2 makes exactly this change
    assert project.ci("bump-pin", project.fork.c2[:8], *remote(project)).code == 4  # refused without the flag
    r = project.ci("patches", "--check")
    assert r.code == 0, r.out  # at c1 it still applies
    (project.root / "patches" / "series").write_text("done.patch\n")
    r = project.ci("bump-pin", project.fork.c2[:8], "--drop-upstreamed", *remote(project))
    assert r.code == 0, r.err
    assert bump_pin.DROPPED_LINE.format(patch="done.patch") in r.out
    report = (project.root / "build" / "bump-report.md").read_text()
    assert bump_pin.REPORT_DROPPED.format(patch="done.patch", fate=Fate.UPSTREAM.value, detail=IN_THE_TREE) in report


def test_git_itself_sees_the_omitted_paths_as_skipped_not_deleted(project: Project) -> None:
    assert project.ci("patches", *remote(project)).code == 0
    # first, before anything refreshes the index: ggml's CMakeLists runs exactly this at configure time
    clean = subprocess.run(["git", "diff-index", "--quiet", "HEAD", "--"], cwd=project.submodule, check=False)
    assert clean.returncode == 0  # llama.cpp's build info would not say -dirty
    status = subprocess.run(["git", "status", "--porcelain"], cwd=project.submodule, capture_output=True, text=True, check=True)
    assert status.stdout == ""
    listed = subprocess.run(["git", "ls-files", "-v", "models", "docs"], cwd=project.submodule, capture_output=True, text=True, check=True)
    assert listed.stdout.splitlines() == ["S docs/build.md", "S models/ggml-vocab-tiny.gguf"]


def test_a_moved_checkout_is_clean_for_git_too(project: Project) -> None:
    assert project.ci("patches", *remote(project)).code == 0
    assert project.ci("bump-pin", project.fork.c5[:8], *remote(project)).code == 0
    assert (project.submodule / "common.c").is_file()
    assert subprocess.run(["git", "diff-index", "--quiet", "HEAD", "--"], cwd=project.submodule, check=False).returncode == 0
    assert project.ci("bump-pin", project.fork.c1[:8], "--allow-rollback", *remote(project)).code == 0
    assert not (project.submodule / "common.c").exists()
    assert subprocess.run(["git", "diff-index", "--quiet", "HEAD", "--"], cwd=project.submodule, check=False).returncode == 0
    assert not (project.submodule / "models").exists()


def test_a_failure_while_moving_puts_the_checkout_back_as_it_was(project: Project, add_patch: MakePatch, monkeypatch: pytest.MonkeyPatch) -> None:
    add_patch("fix-delta.patch", FIX)
    assert project.ci("patches", *remote(project)).code == 0
    before = (git(project, "rev-parse", "HEAD"), git(project, "write-tree"), (project.submodule / "ggml/src/delta.c").read_text())
    add_patch("readme.patch", {"README.md": "changed\n"})

    def full_disk(self: object, gitdir: Path) -> None:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(gitdir / sync.RECORD))

    monkeypatch.setattr("ci.source.sync.Record.write", full_disk)
    r = project.ci("patches")
    assert r.code == 74
    record = CiProject(project.root).module_gitdir(SUBMODULE) / sync.RECORD
    assert r.err == cli.ERROR.format(message=cli.AT_FILE.format(path=record, reason=os.strerror(errno.ENOSPC))) + "\n"
    assert (git(project, "rev-parse", "HEAD"), git(project, "write-tree"), (project.submodule / "ggml/src/delta.c").read_text()) == before
    assert (project.submodule / "README.md").read_text() == "fork\n"  # the new patch's change was undone
    monkeypatch.undo()
    assert project.ci("patches").code == 0
    assert (project.submodule / "README.md").read_text() == "changed\n"


def test_a_failure_while_moving_keeps_the_branch_and_the_omitted_paths_skipped(project: Project, add_patch: MakePatch, monkeypatch: pytest.MonkeyPatch) -> None:
    """The put-back detached HEAD from the branch the user was on and dropped the omitted paths' skip-worktree bits,
    so git status showed models/ and docs/ deleted and a `git commit -a` would have committed that (a hostile pass)."""
    assert project.ci("patches", *remote(project)).code == 0
    subprocess.run(["git", "switch", "-q", "-c", "fixes"], cwd=project.submodule, check=True)
    add_patch("readme.patch", {"README.md": "changed\n"})

    def full_disk(self: object, gitdir: Path) -> None:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(gitdir / sync.RECORD))

    monkeypatch.setattr("ci.source.sync.Record.write", full_disk)
    assert project.ci("patches", "--reset").code == 74
    assert git(project, "symbolic-ref", "--short", "HEAD").strip() == "fixes"
    assert git(project, "status", "--porcelain") == ""
    listed = subprocess.run(["git", "ls-files", "-v", "models", "docs"], cwd=project.submodule, capture_output=True, text=True, check=True)
    assert listed.stdout.splitlines() == ["S docs/build.md", "S models/ggml-vocab-tiny.gguf"]


def test_an_attached_checkout_that_was_never_filled_is_checked_out(project: Project) -> None:
    from ci.source.checkout import attach
    from ci.source.store import ForkStore

    gitdir = project.root / ".git" / "modules" / "third_party" / "llama.cpp-rocmfpx"
    ForkStore.open(gitdir)  # an empty store, as an interrupted first sync leaves it
    attach(gitdir, project.submodule, ("models/", "docs/"))
    r = project.ci("patches", *remote(project))
    assert r.code == 0, r.err
    assert (project.submodule / "ggml/src/delta.c").read_text() == AT_PIN


def test_check_of_an_empty_series_says_so_in_a_whole_sentence(project: Project) -> None:
    r = project.ci("patches", "--check", *remote(project))
    assert r.code == 0, r.err
    assert said(sync.CHECKING_EMPTY, r.out, commit=project.fork.c1[:7])
    assert not any(line.rstrip().endswith(":") for line in r.out.splitlines()), r.out
