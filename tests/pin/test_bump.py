from __future__ import annotations

import datetime as dt
import errno
import os
from pathlib import Path

import pygit2
import pytest

from ci import cli, files
from ci.commands import bump_pin
from ci.gates.selftest import faults as fault_set
from ci.source import op_cases, store, sync
from tests.support.messages import said
from tests.support.project import Project


def bump(project: Project, *args: str):  # type: ignore[no-untyped-def]
    return project.ci("bump-pin", *args, "--remote", str(project.fork.path))


def test_bump_ahead_writes_the_pin_the_gitlink_and_a_report(project: Project) -> None:
    fork = project.fork
    before = project.pins.read_text()
    r = bump(project, fork.c5[:7], "--reference", "ROCmFPX#4")
    assert r.code == 0, r.err
    how = bump_pin.HOW_AHEAD.format(commits="5 commits")
    moved = bump_pin.MOVED.format(old=fork.c1[:7], new=fork.c5[:7], old_reference="ROCmFPX#2", reference="ROCmFPX#4", how=how, branch="main")
    assert bump_pin.HEADLINE.format(headline=moved) in r.out
    for sha in (fork.c2, fork.s1, fork.c3, fork.c4, fork.c5):
        assert bump_pin.LISTED.format(line=bump_pin.SUBJECT.format(sha=sha[:7], subject=fork.subject(sha))) in r.out
    after = project.pins.read_text()
    changed = [(a, b) for a, b in zip(before.splitlines(), after.splitlines(), strict=True) if a != b]
    assert [b for _, b in changed] == [
        f"  commit: {fork.c5}",
        '  reference: "ROCmFPX#4"  # a name people use for it',
        f"  date: {dt.date.today().isoformat()}        # the day it was pinned",
    ]
    assert project.gitlink() == fork.c5
    staged = project.repo.status()
    assert staged == {"pins.yaml": pygit2.enums.FileStatus.INDEX_MODIFIED, "third_party/llama.cpp-rocmfpx": pygit2.enums.FileStatus.INDEX_MODIFIED}
    report = (project.root / "build" / "bump-report.md").read_text()
    assert report.startswith(bump_pin.REPORT_TITLE.format(old=fork.c1[:7], new=fork.c5[:7]) + "\n")
    assert bump_pin.REPORT_SUBJECT.format(line=bump_pin.SUBJECT.format(sha=fork.c4[:7], subject=fork.subject(fork.c4))) in report
    assert op_cases.COUNTS_HEADING in report
    assert project.ci("verify-pin").code == 0


def test_the_same_commit_says_so_and_changes_nothing(project: Project) -> None:
    before = project.state()
    r = bump(project, project.fork.c1[:10])
    assert r.code == 0
    assert bump_pin.ALREADY_PINNED.format(new=project.fork.c1[:7], reference="ROCmFPX#2", branch="main") in r.out
    assert project.state() == before
    assert not (project.root / "build" / "bump-report.md").exists()


def test_head_is_the_tip_of_the_pinned_branch(project: Project) -> None:
    r = bump(project, "head")
    assert r.code == 0, r.err
    assert said(bump_pin.HEADLINE.format(headline=bump_pin.MOVED), r.out, old=project.fork.c1[:7], new=project.fork.c6[:7])
    assert project.gitlink() == project.fork.c6


def test_head_of_another_branch_is_still_checked_against_the_pin(project: Project) -> None:
    before = project.state()
    r = bump(project, "HEAD", "--branch", "nope")
    assert r.code == 3
    assert said(store.BRANCH_NOT_IN_FORK, r.err, branch="nope")
    assert bump_pin.IF_MEANT.format(command=bump_pin.NEXT_BUMP.format(args=f"HEAD --remote {project.fork.path} --branch main")) in r.err
    assert project.state() == before


def test_an_ambiguous_prefix_lists_the_candidates(project: Project) -> None:
    a, b = project.fork.ambiguous
    before = project.state()
    r = bump(project, a[:4])
    assert r.code == 2
    assert said(store.AMBIGUOUS, r.err, spec=a[:4], matches=2)
    assert a[:12] in r.err
    assert b[:12] in r.err
    assert project.state() == before


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("zzzzzzz", cli.ERROR.format(message=store.NOT_A_COMMIT_ID.format(spec="zzzzzzz", digits=4))),
        ("abc", cli.ERROR.format(message=store.TOO_SHORT.format(spec="abc", digits=4))),
        ("0000000", cli.ERROR.format(message=store.NOT_IN_FORK.format(spec="0000000"))),
    ],
)
def test_bad_commit_ids_get_a_clear_error(project: Project, spec: str, message: str) -> None:
    before = project.state()
    r = bump(project, spec)
    assert r.code != 0
    assert message in r.err
    assert project.state() == before


@pytest.mark.parametrize("flag", ["--branch", "--reference"])
def test_an_empty_branch_or_reference_is_refused_not_taken_as_the_default(project: Project, flag: str) -> None:
    before = project.state()
    r = bump(project, "head", flag, "")
    assert (r.code, r.err) == (2, cli.ERROR.format(message=bump_pin.EMPTY_OPTION.format(flag=flag)) + "\n")
    assert project.state() == before


def test_a_commit_only_on_a_side_branch_is_refused(project: Project) -> None:
    before = project.state()
    r = bump(project, project.fork.w1[:8])
    assert r.code == 4
    assert bump_pin.NOT_ON_BRANCH.format(commit=project.fork.w1[:12], branch="main", where=bump_pin.ONLY_ON.format(branches="wip")) in r.err
    assert bump_pin.IF_MEANT.format(command=bump_pin.NEXT_BUMP.format(args=f"{project.fork.w1[:8]} --remote {project.fork.path} --branch wip")) in r.err
    r = bump(project, project.fork.p1[:8])
    assert r.code == 4
    assert bump_pin.NOT_ON_BRANCH.format(commit=project.fork.p1[:12], branch="main", where=bump_pin.ONLY_ON.format(branches="pull/7")) in r.err
    assert r.err.rstrip().endswith(bump_pin.NO_BRANCH_HAS_IT.format(branch="main"))  # a pull request's head is no branch
    assert project.state() == before


def test_a_rollback_is_refused_unless_allowed(project: Project) -> None:
    before = project.state()
    r = bump(project, project.fork.c0[:8])
    assert r.code == 4
    why = bump_pin.WHY_ROLLBACK.format(new=project.fork.c0[:12], old=project.fork.c1[:12], commits="1 commit")
    again = bump_pin.NEXT_BUMP.format(args=f"{project.fork.c0[:8]} --remote {project.fork.path} --allow-rollback")
    assert bump_pin.BUMP_REFUSED.format(reasons=why) + bump_pin.IF_MEANT.format(command=again) in r.err
    assert project.state() == before
    r = bump(project, project.fork.c0[:8], "--allow-rollback")
    assert r.code == 0, r.err
    assert bump_pin.HOW_ROLLBACK.format(commits="1 commit") in r.out
    assert project.gitlink() == project.fork.c0


def test_a_sideways_move_is_refused(project: Project) -> None:
    assert bump(project, project.fork.s1[:8]).code == 0  # s1 is on main through the merge c3
    r = bump(project, project.fork.c2[:8])
    assert r.code == 4
    assert bump_pin.BUMP_REFUSED.format(reasons=bump_pin.WHY_SIDEWAYS.format(new=project.fork.c2[:12], old=project.fork.s1[:12])) in r.err


def test_a_fetch_error_changes_nothing(project: Project, tmp_path: Path) -> None:
    before = project.state()
    r = project.ci("bump-pin", project.fork.c5[:7], "--remote", f"file://{tmp_path}/no-such-fork.git")
    assert r.code == 3
    assert said(store.FETCH_FAILED, r.err, url=f"file://{tmp_path}/no-such-fork.git")
    assert project.state() == before


def test_a_url_remote_is_fetched_with_libgit2(project: Project) -> None:
    r = project.ci("bump-pin", project.fork.c4[:7], "--remote", f"file://{project.fork.path}")
    assert r.code == 0, r.err
    assert project.gitlink() == project.fork.c4


def test_a_locked_index_leaves_every_file_as_it_was(project: Project) -> None:
    before = project.state()
    (project.root / ".git" / "index.lock").write_text("")
    r = bump(project, project.fork.c5[:7])
    assert r.code == 3
    assert said(bump_pin.INDEX_UNWRITABLE, r.err, index=project.root / ".git" / "index")
    (project.root / ".git" / "index.lock").unlink()
    assert project.state() == before


def test_a_write_error_half_way_restores_pins_yaml(project: Project, monkeypatch: pytest.MonkeyPatch) -> None:
    before = project.state()
    real = files.write_atomic
    calls: list[Path] = []

    def failing(path: Path, data: bytes | str, *, mode: int | None = None) -> None:
        calls.append(path)
        if path.name == ".gitmodules" and len(calls) == 2:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(path))
        real(path, data, mode=mode)

    monkeypatch.setattr("ci.commands.bump_pin.write_atomic", failing)
    r = bump(project, project.fork.c5[:7], "--branch", "many")
    assert r.code == 74
    full = cli.AT_FILE.format(path=project.root / ".gitmodules", reason=os.strerror(errno.ENOSPC))
    assert r.err.endswith(cli.ERROR.format(message=full) + "\n")
    assert calls[0].name == "pins.yaml"
    assert project.state() == before


def test_switching_branch_rewrites_gitmodules_too(project: Project) -> None:
    a, _ = project.fork.ambiguous
    r = bump(project, a[:10], "--branch", "many")
    assert r.code == 0, r.err
    assert "branch = many" in (project.root / ".gitmodules").read_text()
    assert "branch: many" in project.pins.read_text()
    assert project.ci("verify-pin").code == 0


def test_a_checked_out_submodule_moves_with_the_pin(project: Project) -> None:
    assert bump(project, project.fork.c2[:8]).code == 0
    assert project.ci("patches").code == 0
    assert (project.submodule / "README.md").read_text() == "fork\nserver\n"
    assert not (project.submodule / "models").exists()
    r = bump(project, project.fork.c4[:8])
    assert r.code == 0, r.err
    assert (project.submodule / "common.c").is_file()
    assert pygit2.Repository(str(project.submodule)).head.target == pygit2.Oid(hex=project.fork.c4)


def test_a_checkout_with_local_changes_is_refused(project: Project) -> None:
    assert bump(project, project.fork.c2[:8]).code == 0
    assert project.ci("patches").code == 0
    (project.submodule / "README.md").write_text("my work\n")
    before = project.state()
    r = bump(project, project.fork.c4[:8])
    assert r.code == 4
    at = sync.AT_COMMIT.format(commit=project.fork.c2[:7])
    assert sync.LOCAL_CHANGES.format(name="third_party/llama.cpp-rocmfpx", at=at, listing="README.md") in r.err
    assert project.state() == before
    assert (project.submodule / "README.md").read_text() == "my work\n"


def test_the_report_lists_the_gate_selftest_faults_that_no_longer_apply(project: Project) -> None:
    r = bump(project, project.fork.c2[:8])
    assert r.code == 0, r.err
    # the committed faults aim at the ROCmFPX fork's files, which the fixture fork does not have
    cuda = fault_set.STALE_LINE.format(fault="cuda-gdn-decay", why=fault_set.STALE_MISSING.format(file="ggml/src/ggml-cuda/gated_delta_net.cu"))
    assert bump_pin.STALE_FAULT.format(fault=cuda) in r.out
    report = (project.root / "build" / "bump-report.md").read_text()
    assert bump_pin.STALE_FAULTS_HEADING in report
    sampling = fault_set.STALE_LINE.format(fault="spec-accept-draft-token", why=fault_set.STALE_MISSING.format(file="common/sampling.cpp"))
    assert bump_pin.REPORT_FAULT.format(fault=sampling) in report
