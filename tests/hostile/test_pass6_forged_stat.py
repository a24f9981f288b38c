"""Hostile pass 6: build.json's stat data is the attacker's to write, and gpu_tests takes it on trust.

ship hashes every binary and library again whatever build.json's stat data says; gpu_tests does not: a file whose
(size, mtime, inode, ctime) equals build.json's is not read (``Artifact.check``), and a library a gate program maps
from the build's path with the inode found there now is counted as the build's without being hashed
(``loaded.Watch.judge``). The stat data is no part of ``manifest_sha256``. So between the build and gpu_tests an
attacker puts a working ``libggml.so`` at the build's name, writes that file's stamp into build.json (its sha256 left
as the build's), runs the gates (they run the working library and record the build's digest), puts the build's own
library back, and ship re-hashes the build's own bytes, finds them as recorded, and writes the wheel for a build
whose own library fails backend_ops.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from ci.commands import gpu_tests
from ci.compile import manifest as manifest_mod
from ci.errors import Refused
from tests.hostile.failing_build import failing, not_shipped, prepared
from tests.hostile.test_foreign_library import working_libggml
from tests.support.build import BuildFork
from tests.support.messages import partly, said
from tests.support.project import Project


@pytest.mark.skipif(shutil.which("cc") is None, reason="needs a C compiler for the working library")
def test_a_working_library_run_under_forged_stat_data_does_not_ship_the_builds_own(
    build_project: Project, build_fork: BuildFork, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    prepared(build_project, monkeypatch)
    m = failing(build_project, build_fork)

    build_dir = build_project.root / "build" / "cpu"
    name, lib = next((n, a) for n, a in m["libraries"].items() if "ggml" in n)
    path = build_dir / lib["path"]
    own = tmp_path / "own-libggml.so"
    shutil.copy2(os.path.realpath(path), own)
    working = working_libggml(tmp_path / "elsewhere")
    os.unlink(path)
    shutil.copyfile(working, path)  # a working library at the build's name
    doc = json.loads((build_dir / "build.json").read_text())
    doc["libraries"][name]["stat"] = list(manifest_mod.stat_stamp(os.stat(path)))  # its stamp; the sha256 the build's
    (build_dir / "build.json").write_text(json.dumps(doc, indent=2) + "\n")

    r = build_project.ci("gpu-tests", "--profile", "cpu", "--gate", "backend_ops")
    # every file hashed before the gates, whatever build.json's stat data says: refused, and no gate ran
    assert r.code == Refused.exit_code, r.out + r.err
    assert said(partly(gpu_tests.NOT_AS_BUILT, files=f"{name} {manifest_mod.DIFFERS}"), r.err, profile="cpu"), r.err

    os.unlink(path)
    shutil.copyfile(own, path)  # the build's own library back; ship hashes it, whatever its stat data
    not_shipped(build_project, m, r.out + r.err)
