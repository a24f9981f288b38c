"""Hostile pass 6: a library of the build swapped while gpu_tests runs, after its check of the build.

gpu_tests checks the build's files once, before any gate runs, and never again: the record's ``manifest_sha256`` is
build.json's digest, not that of the files the gate's programs ran. Its watch of the mapped libraries counts a mapped
file as the build's when the inode at the build's path is the mapped one, without hashing it. So another process of
this user that renames a working ``libggml.so`` over the build's once gpu_tests has checked the build (here: right
after ``current`` returns, as a process polling for gpu_tests' first line would), and puts the build's own back after
gpu_tests ends, gets a passing backend_ops record for the build's digest; ship re-hashes the build's own (failing)
library, finds it as recorded and writes the wheel. The models are hashed again after each run; the build's files
are not.
"""

from __future__ import annotations

import hashlib
import os
import shutil
from pathlib import Path

import pytest

from ci import command, loaded
from ci.commands import gpu_tests
from ci.errors import Refused
from tests.hostile.failing_build import failing, not_shipped, prepared
from tests.hostile.test_foreign_library import working_libggml
from tests.support.binaries import llama_bin_dir
from tests.support.build import BuildFork
from tests.support.messages import said
from tests.support.project import Project


@pytest.mark.skipif(shutil.which("cc") is None, reason="needs a C compiler for the working library")
@pytest.mark.parametrize("after", ["current", "sealed"])
def test_a_library_swapped_after_gpu_tests_checked_the_build_does_not_ship_the_builds_own(
    build_project: Project, build_fork: BuildFork, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, after: str
) -> None:
    """``current``: swapped after the build's key was checked, before its files are hashed (refused before any gate);
    ``sealed``: after they are hashed, so the gate's program maps another inode than the one hashed (an ERROR)."""
    prepared(build_project, monkeypatch)
    m = failing(build_project, build_fork)

    build_dir = build_project.root / "build" / "cpu"
    lib = next(a for n, a in m["libraries"].items() if "ggml" in n)
    path = build_dir / lib["path"]
    aside = path.with_name(".own-aside")
    working = working_libggml(tmp_path / "elsewhere")
    checked = getattr(gpu_tests, after)

    def then_swapped(*args: object, **kwargs: object) -> object:
        done = checked(*args, **kwargs)
        os.rename(path, aside)  # another process of this user, once gpu_tests has checked the build
        shutil.copyfile(working, path)
        return done

    monkeypatch.setattr(gpu_tests, after, then_swapped)
    r = build_project.ci("gpu-tests", "--profile", "cpu", "--gate", "backend_ops")
    monkeypatch.setattr(gpu_tests, after, checked)
    os.rename(aside, path)  # the build's own back, its stat data as before
    if after == "current":
        assert r.code == Refused.exit_code, r.out + r.err
        assert said(gpu_tests.NOT_AS_BUILT, r.err, profile="cpu"), r.err
    else:  # the program mapped the file put there, not the one hashed: the gate is an ERROR, and it names the swap
        assert r.code != 0, r.out + r.err
        assert said(gpu_tests.CHANGED_DURING, r.out, gate="backend_ops"), r.out + r.err

    not_shipped(build_project, m, r.out + r.err)


@pytest.mark.slow
def test_a_program_or_library_of_the_build_mapped_from_another_inode_than_the_one_hashed_is_named(tmp_path: Path) -> None:
    """The real test-backend-ops and its libraries copied as a build, their inodes taken as they are hashed: a library
    or the program itself put at the same path afterwards (the same bytes, another file) is named by the watch, however
    the path reads when the gate ends."""
    source = llama_bin_dir()
    build = tmp_path / "build"
    build.mkdir()
    names = ["test-backend-ops", *sorted(p.name for p in source.glob("lib*.so*"))]
    for name in names:
        shutil.copy2(source / name, build / name, follow_symlinks=False)
    versioned = sorted(p.name for p in build.glob("lib*.so.[0-9]"))  # the names ld.so looks for
    libraries = [loaded.Library(n, build / n, hashlib.sha256((build / n).read_bytes()).hexdigest()) for n in versioned]
    tbo = build / "test-backend-ops"
    binaries = [loaded.Library(tbo.name, tbo, hashlib.sha256(tbo.read_bytes()).hexdigest())]
    argv = [str(tbo), "-o", "SUM", "-b", "CPU"]

    def watched(sealed: dict[str, tuple[str, int]]) -> loaded.Judged:
        with loaded.watching() as watch:
            assert command.run(argv, quiet=True).returncode == 0
        return watch.judge(build, libraries, binaries, loaded.system_folders(), sealed)

    def inodes() -> dict[str, tuple[str, int]]:  # as Sealed.inodes gives them: by path and by real path
        return {k: (os.path.realpath(p), os.stat(p).st_ino) for p in build.iterdir() for k in (os.path.normpath(p), os.path.realpath(p))}

    assert watched(inodes()).problems == []
    base = Path(os.path.realpath(build / "libggml-base.so.0"))
    sealed = inodes()
    shutil.copy2(base, tmp_path / "copy")
    os.replace(tmp_path / "copy", base)  # the same bytes, another file
    assert watched(sealed).problems == [loaded.REPLACED_LIBRARY.format(program="test-backend-ops", path=base, name="libggml-base.so.0")]
    sealed = inodes()
    shutil.copy2(tbo, tmp_path / "copy")
    os.replace(tmp_path / "copy", tbo)
    assert watched(sealed).problems == [loaded.REPLACED_PROGRAM.format(program="test-backend-ops", path=tbo)]
    # the build's folder swapped for a link to a copy while the program starts by the build's path, then put back:
    # the kernel names the copy, which is no file of the seal, though the path reads as the build's again
    sealed = inodes()
    copy = tmp_path / "copy-of-build"
    shutil.copytree(build, copy, symlinks=True)
    os.rename(build, tmp_path / "aside")
    build.symlink_to(copy)
    try:
        with loaded.watching() as watch:
            assert command.run(argv, quiet=True).returncode == 0
    finally:
        build.unlink()
        os.rename(tmp_path / "aside", build)
    judged = watch.judge(build, libraries, binaries, loaded.system_folders(), sealed)
    assert judged.problems == [loaded.REPLACED_PROGRAM.format(program="test-backend-ops", path=copy / "test-backend-ops")]
