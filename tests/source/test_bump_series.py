from __future__ import annotations

import pygit2

from ci import git
from ci.commands import bump_pin
from ci.source import classify, sync
from ci.source.classify import Fate
from ci.source.series import load_series
from tests.support.fixtures import MakePatch
from tests.support.project import DELTA_AT_C1, Project

UPSTREAMED = {"ggml/src/delta.c": DELTA_AT_C1.replace("x + 7;", "x + 77;")}  # what c5 does
CONFLICTS_AT_C5 = {"ggml/src/delta.c": DELTA_AT_C1.replace("x + 7;", "x + 70;")}
UNRELATED = {"ggml/src/delta.c": DELTA_AT_C1.replace("x + 11;", "x + 110;")}


def bump(project: Project, *args: str):  # type: ignore[no-untyped-def]
    return project.ci("bump-pin", *args, "--remote", str(project.fork.path))


def series_names(project: Project) -> list[str]:
    lines = (project.root / "patches" / "series").read_text().splitlines()
    return [ln for ln in lines if ln and not ln.startswith("#")]


def test_a_patch_that_still_applies_moves_with_the_pin(project: Project, add_patch: MakePatch) -> None:
    add_patch("tune.patch", UNRELATED)
    r = bump(project, project.fork.c5[:8])
    assert r.code == 0, r.err
    verdict = bump_pin.LISTED.format(line=classify.VERDICT.format(patch="tune.patch", fate=Fate.APPLIES.value))
    assert bump_pin.SERIES_AT.format(commit=project.fork.c5[:7]) + "\n" + verdict + "\n" in r.out
    assert bump_pin.REPORT_VERDICT.format(patch="tune.patch", fate=Fate.APPLIES.value) in (project.root / "build" / "bump-report.md").read_text()


def test_an_upstreamed_patch_is_recognised_and_refused_without_the_flag(project: Project, add_patch: MakePatch) -> None:
    add_patch("offset.patch", UPSTREAMED)
    before = project.state()
    series_before = (project.root / "patches" / "series").read_bytes()
    r = bump(project, project.fork.c5[:8])
    assert r.code == 4
    listing = bump_pin.UPSTREAM_ITEM.format(patch="offset.patch", detail=classify.IN_THE_TREE)
    assert bump_pin.UPSTREAM_REFUSED.format(commit=project.fork.c5[:12], listing=listing) in r.err
    assert "--drop-upstreamed" in r.err
    assert project.state() == before
    assert (project.root / "patches" / "series").read_bytes() == series_before


def test_drop_upstreamed_removes_it_in_the_same_change(project: Project, add_patch: MakePatch) -> None:
    add_patch("tune.patch", UNRELATED)
    add_patch("offset.patch", UPSTREAMED)
    r = bump(project, project.fork.c5[:8], "--drop-upstreamed")
    assert r.code == 0, r.err
    assert bump_pin.DROPPED_LINE.format(patch="offset.patch") in r.out
    assert series_names(project) == ["tune.patch"]
    assert (project.root / "patches" / "series").read_text().startswith("# order of the patches\n")
    assert not (project.root / "patches" / "offset.patch").exists()
    assert bump_pin.REPORT_DROPPED.format(patch="offset.patch", fate=Fate.UPSTREAM.value, detail=classify.IN_THE_TREE) in (
        project.root / "build" / "bump-report.md"
    ).read_text()
    assert project.repo.status()["patches/series"] & pygit2.enums.FileStatus.INDEX_NEW


def test_an_upstreamed_patch_found_by_patch_id_when_upstream_moved_on(project: Project, add_patch: MakePatch) -> None:
    add_patch("offset.patch", UPSTREAMED)
    r = bump(project, project.fork.c6[:8])  # c6 rewrote the line again: neither forward nor reverse applies
    assert r.code == 4
    same = classify.SAME_CHANGE.format(commit=f"{project.fork.c5[:7]} ggml: micro-batch offset of layer inputs")
    assert bump_pin.UPSTREAM_REFUSED.format(commit=project.fork.c6[:12], listing=bump_pin.UPSTREAM_ITEM.format(patch="offset.patch", detail=same)) in r.err


def test_a_conflict_at_the_new_pin_refuses_the_bump_naming_patch_and_hunk(project: Project, add_patch: MakePatch) -> None:
    add_patch("mine.patch", CONFLICTS_AT_C5)
    before = project.state()
    r = bump(project, project.fork.c5[:8])
    assert r.code == 4
    # the hunk's header is the patch's own
    hunk = git.HUNK_DOES_NOT_MATCH.format(path="ggml/src/delta.c", number=1, header="@@ -5,7 +5,7 @@")
    listing = bump_pin.CONFLICT_ITEM.format(patch="mine.patch", detail=hunk)
    assert bump_pin.CONFLICTS_REFUSED.format(commit=project.fork.c5[:12], listing=listing) in r.err
    assert project.state() == before


def test_a_drop_that_fails_half_way_restores_the_series_too(project: Project, add_patch: MakePatch) -> None:
    add_patch("offset.patch", UPSTREAMED)
    before = project.state()
    patch_bytes = (project.root / "patches" / "offset.patch").read_bytes()
    series_bytes = (project.root / "patches" / "series").read_bytes()
    (project.root / ".git" / "index.lock").write_text("")
    r = bump(project, project.fork.c5[:8], "--drop-upstreamed")
    (project.root / ".git" / "index.lock").unlink()
    assert r.code == 3
    assert project.state() == before
    assert (project.root / "patches" / "offset.patch").read_bytes() == patch_bytes
    assert (project.root / "patches" / "series").read_bytes() == series_bytes


def test_a_patched_checkout_follows_the_pin_with_the_series_applied_again(project: Project, add_patch: MakePatch) -> None:
    add_patch("tune.patch", UNRELATED)
    assert project.ci("patches", "--remote", str(project.fork.path)).code == 0
    r = bump(project, project.fork.c5[:8])
    assert r.code == 0, r.err
    text = (project.submodule / "ggml/src/delta.c").read_text()
    assert "x + 110;" in text  # the patch
    assert "x + 77;" in text  # the new pin
    assert str(pygit2.Repository(str(project.submodule)).head.target) == project.fork.c5
    r = project.ci("patches")
    series = sync.SERIES_WHAT.format(patches="1 patch", digest=load_series(project.root / "patches").digest[:12])
    assert sync.ALREADY_APPLIED.format(series=series, commit=project.fork.c5[:7]) in r.out
