"""Hostile pass 7: a library of the build written in place through a shared mapping made writable before the seal.

gpu_tests hashes the build's files before the gates and holds each to the (inode, size, mtime, ctime) it had then
(``Sealed``): a write, a rename over it or a file put back moves the ctime, which no user can set back. But the kernel
updates a file's times on the *write fault* of a shared mapping, not on every store: a page already mapped writable
and dirty takes stores without a fault until writeback cleans it (ext4: ~30 s; tmpfs: never). So another process of
this user maps the build's ``libggml.so`` MAP_SHARED and touches each page before gpu_tests starts (the times move
then, before the seal), lets gpu_tests hash the build's own bytes, then stores a working library's bytes (the
checkout's before the patch, the same size) through the mapping: no fault, no new ctime. The gate's program maps the
sealed inode, reads the working bytes from the page cache, and passes; the build's own bytes are stored back before
gpu_tests' end, the stamp is as sealed, and the record carries the build's digest. ship re-hashes the build's own
(failing) library, finds it as recorded, and writes the wheel.
"""

from __future__ import annotations

import mmap
import os
import shutil
from pathlib import Path

import pytest

from ci.commands import gpu_tests
from ci.compile.manifest import Sealed, stamp_of
from ci.compile.stage import CurrentBuild
from tests.hostile.failing_build import failing, not_shipped, prepared
from tests.support.build import BuildFork, manifest
from tests.support.messages import said
from tests.support.project import Project


@pytest.mark.skipif(shutil.which("cc") is None, reason="needs a C compiler for the fixture build")
def test_a_library_written_through_a_mapping_made_writable_before_the_seal_does_not_ship_the_builds_own(
    build_project: Project, build_fork: BuildFork, monkeypatch: pytest.MonkeyPatch
) -> None:
    prepared(build_project, monkeypatch)
    build_dir = build_project.root / "build" / "cpu"
    name = next(n for n in manifest(build_project)["libraries"] if "ggml" in n)
    working = Path(os.path.realpath(build_dir / manifest(build_project)["libraries"][name]["path"])).read_bytes()
    m = failing(build_project, build_fork)

    real = Path(os.path.realpath(build_dir / m["libraries"][name]["path"]))
    own = real.read_bytes()
    assert len(own) == len(working)  # stored in place: the same size
    assert own != working

    fd = os.open(real, os.O_RDWR)  # another process of this user, before gpu_tests starts
    view = mmap.mmap(fd, len(own), mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
    for at in range(0, len(own), mmap.PAGESIZE):
        view[at] = view[at]  # each page faulted writable and dirty now: the times move here, before the seal
    checked = gpu_tests.sealed
    stamps: list[object] = []

    def then_stored(build: CurrentBuild) -> Sealed:
        seal = checked(build)
        stamps.append(stamp_of(real))
        view[:] = working  # stores through the writable pages: no fault, no new mtime or ctime
        stamps.append(stamp_of(real))
        return seal

    monkeypatch.setattr(gpu_tests, "sealed", then_stored)
    try:
        r = build_project.ci("gpu-tests", "--profile", "cpu", "--gate", "backend_ops")
    finally:
        monkeypatch.setattr(gpu_tests, "sealed", checked)
        view[:] = own  # the build's own bytes back, the same way
        view.close()
        os.close(fd)
    assert real.read_bytes() == own
    # the first store after the seal faulted (its pages written back then) and moved the ctime: the gate is an ERROR
    assert said(gpu_tests.CHANGED_DURING, r.out, gate="backend_ops"), (stamps, r.out + r.err)

    not_shipped(build_project, m, stamps, r.code, r.out + r.err)
