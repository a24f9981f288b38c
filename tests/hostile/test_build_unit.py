"""The build records its binaries and the libraries they load as one unit (issue 36, item 3), with a real CMake build
of the fixture project.

Before, ``nox -s build`` recorded each regular ``lib*.so*`` of bin/ by its file name and nothing of what each binary
loads; a ``libggml-*.so`` planted beside the binaries after a build (ggml opens every one in every gate) left the
build "up to date"; a build.json of schema 3 (no ``loads``) was kept for good; and the build's binaries found their
libraries by the build directory's absolute path, which serve's private copy cannot follow.
"""

from __future__ import annotations

import json
from pathlib import Path

from ci.compile import cmake, profiles
from ci.compile.manifest import SCHEMA
from serve import elf
from tests.support.build import build_cpu, manifest
from tests.support.messages import said
from tests.support.project import Project


def test_every_profile_links_its_binaries_by_origin() -> None:
    """By the install RPATH $ORIGIN: CMAKE_BUILD_RPATH_USE_ORIGIN gave the fork's targets "$ORIGIN:", CMake's padding,
    whose empty entry ld.so reads as the current directory."""
    assert profiles.EVERY_PROFILE == ("-DCMAKE_BUILD_WITH_INSTALL_RPATH=ON", "-DCMAKE_INSTALL_RPATH=$ORIGIN")
    assert [p.name for p in profiles.PROFILES.values() if not set(profiles.EVERY_PROFILE) <= set(p.flags)] == []


def test_the_build_records_what_each_binary_loads_and_finds_it_by_origin(build_project: Project) -> None:
    r = build_cpu(build_project)
    assert r.code == 0, r.err
    m = manifest(build_project)
    assert m["schema"] == SCHEMA
    assert m["loads"] == {"test-backend-ops": ["libggml.so"], "llama-server": ["libggml.so"]}
    assert sorted(m["libraries"]) == ["libggml.so"]
    server = build_project.root / "build" / "cpu" / m["binaries"]["llama-server"]["path"]
    assert elf.read_dynamic(server).runpath == ("$ORIGIN",)


def test_a_stray_libggml_planted_after_the_build_makes_it_stale_and_the_build_removes_it(build_project: Project) -> None:
    assert build_cpu(build_project).code == 0
    planted = build_project.root / "build" / "cpu" / "bin" / "libggml-evil.so"
    planted.write_bytes(b"\x7fELF planted")
    r = build_cpu(build_project)
    assert r.code == 0, r.err
    assert said(cmake.STRAY_FOUND, r.out, name="libggml-evil.so")
    assert not planted.exists()


def test_a_build_json_that_does_not_say_what_each_binary_loads_is_built_again(build_project: Project) -> None:
    assert build_cpu(build_project).code == 0
    path: Path = build_project.root / "build" / "cpu" / "build.json"
    old = json.loads(path.read_text())
    old["schema"] = 3
    old.pop("loads", None)
    path.write_text(json.dumps(old))
    r = build_cpu(build_project)
    assert r.code == 0, r.err
    assert said(cmake.OLD_SCHEMA, r.out, schema=3)
    assert manifest(build_project)["schema"] == SCHEMA
