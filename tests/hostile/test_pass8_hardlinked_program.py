"""Hostile pass 8: the build's own folder made a link, during the gate, to a folder whose program is a hard link of
the build's (the same inode) and whose library is another.

Pass 7 closed ``bin/`` swapped for a link: the seal stamps the folders *inside* the build that hold its files, and the
watch holds a process started by a build path (its argv[0]) to the inode sealed there. Neither covers this: the build's
folder itself (``build/cpu``) is not stamped, and a hard link of the build's test-backend-ops, made before the seal, is
the inode sealed at ``build/cpu/bin/test-backend-ops``. So another process of this user, before gpu_tests starts,
hard-links the build's program into a folder of its own beside a working library (reached through ``libggml.so``
there, under a name of no build family); once gpu_tests has hashed the build it renames ``build/cpu`` aside and puts a
link there to that folder. The gate starts ``build/cpu/bin/test-backend-ops``: the kernel runs the sealed inode
(argv[0] check passed), from the other folder, so ld.so's ``$ORIGIN`` is that folder and the working library is loaded;
it is only ``loaded_elsewhere``. The library sleeps 0.2 s as it loads, so the watch sees the program: this is no
program that ends before the watch's first look (docs/release.md's out-of-scope case). The folder is put back once the
program is done: every sealed file and folder has its stamp, the record passes with the build's digest, and ship
re-hashes the build's own (failing) files and writes the wheel.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from ci import loaded
from tests.hostile.failing_build import failing, linked_after_seal, not_shipped, prepared
from tests.support.build import BuildFork
from tests.support.messages import said
from tests.support.project import Project

WORKING = r"""
#include <unistd.h>
const char * ggml_fixture_greeting(void) { return "fixture"; }
int ggml_fixture_answer(void) { return 42; }
__attribute__((constructor)) static void slow(void) { usleep(200000); }  /* seen by the watch: no sub-ms program */
"""


@pytest.mark.skipif(shutil.which("cc") is None, reason="needs a C compiler for the fixture build")
def test_the_builds_own_folder_linked_to_a_hard_link_of_its_program_does_not_ship_the_builds_own(
    build_project: Project, build_fork: BuildFork, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    prepared(build_project, monkeypatch)
    m = failing(build_project, build_fork)  # the build's own backend_ops fails (exit 7)
    build_dir = build_project.root / "build" / "cpu"
    program = build_dir / m["binaries"]["test-backend-ops"]["path"]
    name = next(n for n in m["libraries"] if "ggml" in n)

    working = tmp_path / "working"  # another process of this user, before gpu_tests starts
    (working / program.parent.relative_to(build_dir)).mkdir(parents=True)
    os.link(program, working / program.relative_to(build_dir))  # the sealed inode itself, under another folder
    source = tmp_path / "impl.c"
    source.write_text(WORKING)
    lib_dir = working / Path(m["libraries"][name]["path"]).parent
    subprocess.run(["cc", "-shared", "-fPIC", "-o", str(lib_dir / "impl.so"), str(source)], check=True)
    (lib_dir / name).symlink_to("impl.so")  # what the program's RUNPATH $ORIGIN finds; mapped as impl.so

    with linked_after_seal(monkeypatch, build_dir, working, "close"):  # put back once the program is done
        r = build_project.ci("gpu-tests", "--profile", "cpu", "--gate", "backend_ops")

    last = json.loads((build_project.root / "build" / "results" / "ledger.jsonl").read_text().splitlines()[-1])
    elsewhere = str((last.get("properties") or {}).get("loaded_elsewhere", ""))
    # started by the build's path, it ran the sealed inode from another folder (its $ORIGIN there): an ERROR
    assert said(loaded.REPLACED_PROGRAM, r.out, program="test-backend-ops"), r.out + r.err
    # the watch saw the program run the working library (named in loaded_elsewhere): ship must still refuse the build
    not_shipped(build_project, m, r.code, elsewhere, r.out + r.err)
