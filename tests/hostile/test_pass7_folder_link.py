"""Hostile pass 7: the build's binary folder made a link to a working build while the gate runs.

gpu_tests seals each binary and library by its own path (``build/cpu/bin/libggml.so``: inode, size, mtime, ctime,
all through ``os.stat``, which follows every link on the way), and the watch judges only processes whose executable
is the build's (its real path now, or its sha256) and, in them, libraries of a build library's name (``libggml*``).
None of it looks at the folders on the way. So another process of this user, once gpu_tests has hashed the build,
renames ``build/cpu/bin`` aside and puts a link there to a folder holding a working test-backend-ops and libggml
(the checkout with a benign patch; the library under a name of another family, reached through ``libggml.so`` there).
The gate's program runs from that folder: the kernel names it by its real path, outside the build, and its library
is ``loaded_elsewhere``, never a problem. Once the program is done (here: as the watch is judged; on a GPU gate of
minutes, any time after the program mapped its libraries), the link goes and the folder comes back: no file of the
build was touched, every stamp is as sealed, and the passing record carries the build's digest. ship re-hashes the
build's own (failing) files, finds them as recorded, and writes the wheel.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from ci import loaded
from ci.commands import gpu_tests
from tests.hostile.failing_build import failing, linked_after_seal, not_shipped, prepared
from tests.support.build import BuildFork, add_fixture_patch, build_cpu
from tests.support.messages import said
from tests.support.project import Project


@pytest.mark.skipif(shutil.which("cc") is None, reason="needs a C compiler for the fixture build")
def test_the_builds_folder_linked_to_a_working_one_during_the_gate_does_not_ship_the_builds_own(
    build_project: Project, build_fork: BuildFork, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    prepared(build_project, monkeypatch)
    add_fixture_patch(build_project, build_fork, "benign.patch", "ggml/ggml.c", "return 42;", "return 42; /* patched */")
    assert build_cpu(build_project).code == 0  # a working build, patched as the gate wants (build_commit -dirty)
    build_dir = build_project.root / "build" / "cpu"
    working = tmp_path / "working"
    working.mkdir()
    shutil.copy2(build_dir / "bin" / "test-backend-ops", working / "test-backend-ops")
    shutil.copy2(os.path.realpath(build_dir / "bin" / "libggml.so"), working / "impl.so")  # a name of no build family
    (working / "libggml.so").symlink_to("impl.so")  # what the binary's RUNPATH $ORIGIN finds
    series = build_project.root / "patches" / "series"
    series.write_text(series.read_text().replace("benign.patch\n", ""))  # the benign patch out of the series,
    (build_project.root / "patches" / "benign.patch").unlink()  # and the wrong one in: the build's own fails
    m = failing(build_project, build_fork)  # the wrong patch in: the build's own fails
    assert {a["path"] for a in (*m["binaries"].values(), *m["libraries"].values())} >= {"bin/test-backend-ops", "bin/libggml.so"}

    folder = build_dir / "bin"
    with linked_after_seal(monkeypatch, folder, working, "judge"):  # put back as the gate's watch is judged
        r = build_project.ci("gpu-tests", "--profile", "cpu", "--gate", "backend_ops")

    # started by the build's path it ran another file, or its folder was renamed and put back: the gate is an ERROR
    assert said(loaded.REPLACED_PROGRAM, r.out, program="test-backend-ops") or said(gpu_tests.CHANGED_DURING, r.out, files="bin/"), r.out + r.err
    not_shipped(build_project, m, r.code, r.out + r.err)
