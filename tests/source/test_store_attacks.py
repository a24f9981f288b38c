"""The fork store keeps no git alternates to a user's path (issue 24): a local mirror's objects are taken in, so the
mirror can move; an older store's alternates to a moved mirror are named in one line, and taken in or dropped on the
next sync; git's warnings are never read as an object name."""

from __future__ import annotations

import shutil
from pathlib import Path

from ci import cli
from ci.pin.project import Project as CiProject
from ci.source import store as store_mod
from ci.source.store import ForkStore
from tests.support.project import Project


def store_dir(project: Project) -> Path:
    return CiProject(project.root).module_gitdir("third_party/llama.cpp-rocmfpx")


def test_a_local_mirror_is_taken_in_and_may_move_afterwards(project: Project, tmp_path: Path) -> None:
    mirror = tmp_path / "mirror.git"
    shutil.copytree(project.fork.path, mirror)
    r = project.ci("patches", "--remote", str(mirror))
    assert r.code == 0, r.err
    assert not (store_dir(project) / "objects" / "info" / "alternates").exists()
    mirror.rename(tmp_path / "moved.git")  # the mirror moves
    r = project.ci("patches", "--check")
    assert r.code == 0, r.err
    assert "normalize alternate" not in r.err


def test_an_older_stores_alternates_to_a_moved_mirror_are_one_line_then_repaired(project: Project, tmp_path: Path) -> None:
    mirror = tmp_path / "mirror.git"
    shutil.copytree(project.fork.path, mirror)
    store = ForkStore.open(store_dir(project))
    alt = store.objects / "info" / "alternates"
    alt.parent.mkdir(parents=True, exist_ok=True)
    alt.write_text(f"{mirror / 'objects'}\n")  # as an older onebit-ci wrote it
    store = ForkStore.open(store_dir(project))
    store.sync(str(mirror))
    alt.write_text(f"{mirror / 'objects'}\n")
    for p in list((store.objects).iterdir()):  # the store holds nothing of its own, as the old one did
        if p.name not in ("info",):
            shutil.rmtree(p)
    (store.objects / "pack").mkdir()
    mirror.rename(tmp_path / "moved.git")
    r = project.ci("patches")
    assert r.code == 3, r.err
    assert r.err == cli.ERROR.format(message=store_mod.ALTERNATE_GONE.format(alternates=alt, mirror=mirror / "objects")) + "\n"
    assert "invalid object name" not in r.err
    r = project.ci("patches", "--remote", str(tmp_path / "moved.git"))
    assert r.code == 0, r.err
    assert not alt.exists()
