"""The checkout as a build saw it (ci.source.view), on real files: times put back where the content is the same,
the current time where it differs but looks older, nothing that would hide a change from ninja."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from ci.source import view
from tests.support.build import count_calls

OLD = 1_700_000_000_000_000_000  # a time well before the views below are taken


def tree(root: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        os.utime(path, ns=(OLD, OLD))
    return root


def rewrite(path: Path, text: str) -> None:
    """Written again, as a checkout does: a new file (inode, time) in its place."""
    path.unlink()
    path.write_text(text)


def test_same_content_gets_its_time_back_and_other_content_keeps_its_new_one(tmp_path: Path) -> None:
    work = tree(tmp_path / "work", {"a.c": "a\n", "sub/b.h": "b\n", "c.c": "c\n"})
    seen = view.scan(work)
    rewrite(work / "a.c", "a\n")  # the same content, written again
    rewrite(work / "sub" / "b.h", "B\n")  # an edit
    r = view.restore(work, seen)
    assert r.put_back == ("a.c",)
    assert (work / "a.c").stat().st_mtime_ns == OLD
    assert r.changed == ("sub/b.h",)
    assert r.touched == ()
    assert (work / "sub" / "b.h").stat().st_mtime_ns > seen.taken_ns  # newer than anything built from the view
    assert r.view.files["a.c"].sha256 == seen.files["a.c"].sha256
    assert r.view.files["sub/b.h"].sha256 != seen.files["sub/b.h"].sha256


def test_other_content_with_an_older_time_is_given_the_current_time(tmp_path: Path) -> None:
    """A copy that kept times, or ``touch -d``: ninja would have kept the objects of the old content."""
    work = tree(tmp_path / "work", {"a.c": "a\n"})
    seen = view.scan(work)
    (work / "a.c").write_text("A\n")
    os.utime(work / "a.c", ns=(OLD, OLD))
    r = view.restore(work, seen)
    assert r.touched == ("a.c",)
    assert (work / "a.c").stat().st_mtime_ns > seen.taken_ns


def test_a_time_is_not_put_back_where_another_build_directory_saw_other_content(tmp_path: Path) -> None:
    work = tree(tmp_path / "work", {"a.c": "a\n", "b.c": "b\n"})
    seen = view.scan(work)
    other = view.CheckoutView({**seen.files, "a.c": view.FileSeen(2, 5, 5, 5, "0" * 64)}, time.time_ns())
    earlier = view.CheckoutView({**seen.files, "b.c": view.FileSeen(2, 5, 5, 5, "0" * 64)}, OLD - 1)
    rewrite(work / "a.c", "a\n")
    rewrite(work / "b.c", "b\n")
    r = view.restore(work, seen, others=(other, earlier))
    assert r.kept_new == ("a.c",)  # the other directory's objects may be newer than OLD: they would look up to date
    assert r.put_back == ("b.c",)  # the earlier one's objects are older than OLD: it rebuilds either way


def test_a_scan_reads_only_the_files_whose_stat_data_moved(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    work = tree(tmp_path / "work", {f"f{i}.c": f"{i}\n" for i in range(5)})
    first = view.scan(work)
    rewrite(work / "f3.c", "3\n")
    calls = count_calls(monkeypatch, "ci.files.sha256_file")
    second = view.scan(work, first)
    assert calls["ci.files.sha256_file"] == 1
    assert second.files["f3.c"].sha256 == first.files["f3.c"].sha256


def test_the_view_survives_json_and_names_no_git_directory(tmp_path: Path) -> None:
    work = tree(tmp_path / "work", {"a.c": "a\n", ".git/config": "x\n"})
    seen = view.scan(work)
    assert set(seen.files) == {"a.c"}
    assert view.CheckoutView.from_json(json.loads(seen.dumps())) == seen


def store(gitdir: Path, head: str, tree_id: str) -> Path:
    """The files of a fork store that the view reads: HEAD (detached, as a sync leaves it), the sync's record, the
    index."""
    gitdir.mkdir(parents=True, exist_ok=True)
    (gitdir / "HEAD").write_text(head + "\n")
    (gitdir / view.SYNC_RECORD).write_text(json.dumps({"commit": head, "tree": tree_id, "series": "s"}))
    (gitdir / "index").write_bytes(b"DIRC")
    os.utime(gitdir / "index", ns=(OLD, OLD))
    return gitdir


def test_the_index_gets_its_time_back_when_head_and_the_tree_are_as_seen(tmp_path: Path) -> None:
    """The fork's common/CMakeLists.txt makes the store's index a configure dependency: a sync that rewrote it had
    ninja run CMake again."""
    work = tree(tmp_path / "work", {"a.c": "a\n"})
    gitdir = store(tmp_path / "store", "a" * 40, "b" * 40)
    seen = view.scan(work, gitdir=gitdir)
    (gitdir / "index").write_bytes(b"DIRC again")
    r = view.restore(work, seen, gitdir=gitdir, refresh_index=False)
    assert r.index_put_back
    assert (gitdir / "index").stat().st_mtime_ns == OLD
    store(gitdir, "a" * 40, "c" * 40)  # another tree checked out: CMake must see it
    os.utime(gitdir / "index", None)
    r = view.restore(work, seen, gitdir=gitdir, refresh_index=False)
    assert not r.index_put_back


def test_store_of_reads_a_submodules_gitdir_file(tmp_path: Path) -> None:
    work = tmp_path / "project" / "third_party" / "fork"
    work.mkdir(parents=True)
    (work / ".git").write_text("gitdir: ../../.git/modules/third_party/fork\n")
    assert view.store_of(work) == (tmp_path / "project" / ".git" / "modules" / "third_party" / "fork").resolve()
    assert view.store_of(tmp_path) is None
