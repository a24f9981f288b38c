"""Rebuilds that cost what changed (issue 45), on the fixture fork with real CMake and ninja: a checkout written
again with the same content rebuilds nothing, and a one-file change after it rebuilds that file. Judged by ninja's own
output (the steps it ran, ``ninja -n``), never by the clock."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from ci.compile import ninja, stage
from ci.gates.results import Status
from ci.gates.selftest import run as selftest
from ci.gates.selftest.faults import Fault
from ci.source.view import CheckoutView
from tests.support.build import BuildFork, add_fixture_patch, build_cpu, manifest, run_binary
from tests.support.messages import said
from tests.support.project import Project

STEP = re.compile(r"^\[\d+/\d+\] (.*)$", re.MULTILINE)


def build_dir(project: Project) -> Path:
    return project.root / "build" / "cpu"


def ninja_steps(text: str) -> list[str]:
    """The steps a ninja run printed (``[n/N] what``), in order."""
    return STEP.findall(text)


def compiled(steps: list[str]) -> list[str]:
    """The objects among the steps: what was compiled, not linked."""
    return sorted(s.rsplit("/", 1)[-1] for s in steps if s.startswith("Building"))


def dry_run(directory: Path) -> str:
    """``ninja -n``: what ninja would still run in ``directory`` (its own say, without running anything)."""
    exe = shutil.which("ninja")
    assert exe is not None
    return subprocess.run([exe, "-C", str(directory), "-n", "test-backend-ops", "llama-server"], capture_output=True, text=True, check=True).stdout


def write_checkout_again(project: Project) -> None:
    """The checkout gone and checked out anew by the next sync (a fresh submodule clone, a CI job's checkout): every
    file the same content, every file new."""
    shutil.rmtree(project.submodule)


def test_a_checkout_written_again_is_up_to_date_and_ninja_agrees(build_project: Project) -> None:
    assert build_cpu(build_project).code == 0
    before = manifest(build_project)
    write_checkout_again(build_project)
    r = build_cpu(build_project)
    assert r.code == 0, r.err
    assert said(stage.UP_TO_DATE, r.out, key=before["key"][:12])
    assert said(ninja.PUT_BACK, r.out, build="build/cpu")
    assert "letting ninja run it" not in r.out
    assert "ninja: no work to do." in dry_run(build_dir(build_project))
    assert manifest(build_project) == before


def test_after_a_checkout_written_again_a_one_file_patch_rebuilds_that_file_alone(build_project: Project, build_fork: BuildFork) -> None:
    """The issue's case: 735 s for a one-line change on the real fork, every step rebuilt and CMake run again."""
    assert build_cpu(build_project).code == 0
    write_checkout_again(build_project)
    assert build_cpu(build_project).code == 0
    add_fixture_patch(build_project, build_fork, "hello.patch", "tools/server/server.cpp", "llama-server %s", "llama-server says %s")
    r = build_cpu(build_project)
    assert r.code == 0, r.err
    steps = ninja_steps((build_dir(build_project) / "build.log").read_text())
    assert compiled(steps) == ["server.cpp.o"], steps  # CMake runs again, rightly: the tree in the index changed
    assert run_binary(build_project, "llama-server") == "llama-server says fixture\n"


def test_an_edit_discarded_with_patches_reset_costs_nothing(build_project: Project) -> None:
    assert build_cpu(build_project).code == 0
    source = build_project.submodule / "ggml" / "ggml.c"
    source.write_text(source.read_text().replace("return 42", "return 46"))
    assert build_project.ci("patches", "--reset").code == 0
    r = build_cpu(build_project)
    assert r.code == 0, r.err
    assert said(ninja.PUT_BACK, r.out, files="1 file", build="build/cpu")
    assert said(stage.UP_TO_DATE, r.out)
    assert "ninja: no work to do." in dry_run(build_dir(build_project))


def test_ninja_disagreeing_with_the_key_is_said_and_ninja_runs(build_project: Project) -> None:
    """With no view to go by (a build directory made before views were kept), the key still matches but ninja would
    rebuild: said, with ninja's own reason, and run now, never silently in a later rebuild."""
    assert build_cpu(build_project).code == 0
    before = manifest(build_project)
    (build_dir(build_project) / ninja.SOURCES).unlink()
    write_checkout_again(build_project)
    r = build_cpu(build_project)
    assert r.code == 0, r.err
    assert said(stage.KEY_BUT_NINJA, r.out, key=before["key"][:12], manifest="build/cpu/build.json")
    assert "older than most recent input" in r.out  # ninja's own explanation, named
    assert said(stage.BUILDING, r.out, profile="cpu", key=before["key"][:12])
    assert manifest(build_project)["key"] == before["key"]
    assert "ninja: no work to do." in dry_run(build_dir(build_project))
    # and the view it kept makes the next rewrite cost nothing
    write_checkout_again(build_project)
    r = build_cpu(build_project)
    assert said(stage.UP_TO_DATE, r.out), r.out
    assert "letting ninja run it" not in r.out


def test_a_ninja_run_by_hand_since_the_view_is_not_trusted(build_project: Project) -> None:
    """An edit built by hand, then undone: the view's old times would have hidden the undo from ninja. The moved
    .ninja_log says a run this tool did not start happened, and no time is put back."""
    assert build_cpu(build_project).code == 0
    source = build_project.submodule / "ggml" / "ggml.c"
    original = source.read_text()
    source.write_text(original.replace("return 42", "return 44"))
    subprocess.run(["ninja", "-C", str(build_dir(build_project)), "test-backend-ops"], check=True, capture_output=True)
    source.write_text(original)
    r = build_cpu(build_project)
    assert r.code == 0, r.err
    assert said(ninja.FOREIGN, r.out, build="build/cpu")
    assert not said(ninja.PUT_BACK, r.out)
    assert run_binary(build_project, "test-backend-ops") == "test-backend-ops fixture 42\n"


def test_another_build_directory_that_saw_other_content_keeps_the_new_time(build_project: Project) -> None:
    """Two build directories share the checkout: the time put back for one must not hide a change from the other."""
    assert build_cpu(build_project).code == 0
    rel = "ggml/ggml.c"
    mine = ninja.SourcesRecord.read(build_dir(build_project))
    assert mine is not None
    theirs = dict(mine.view.files)
    theirs[rel] = type(theirs[rel])(1, 1, 1, 1, "0" * 64)  # other content, seen after this view was taken
    other = build_project.root / "build" / "other"
    other.mkdir()
    ninja.SourcesRecord.write(other, CheckoutView(theirs, mine.view.taken_ns + 10**12))
    write_checkout_again(build_project)
    r = build_cpu(build_project)
    assert r.code == 0, r.err
    assert said(ninja.KEPT_NEW, r.out, listing=rel)
    assert said(stage.KEY_BUT_NINJA, r.out)  # so this directory rebuilds from it


def fault_in(file: str, search: str, replace: str) -> Fault:
    return Fault(id="one-line", file=file, search=search, replace=replace, gate="backend_ops", expect=Status.FAILED, profiles=("cpu",), why="w")


def rebuild_in_namespace(project: Project, trial: selftest.Trial) -> str:
    """What selftest-fault does: the copies bind-mounted over the user's paths in a mount namespace, then ninja."""
    if shutil.which("unshare") is None:
        pytest.skip("unshare (util-linux) is not installed")
    unshare = ["unshare", "--mount", "--propagation", "private", *([] if os.geteuid() == 0 else ["--map-root-user"])]
    script = 'mount --bind "$1" "$2" && mount --bind "$3" "$4" && exec ninja -C "$4" test-backend-ops llama-server'
    argv = [*unshare, "--", "sh", "-c", script, "sh", str(trial.src), str(project.submodule), str(trial.build), str(build_dir(project))]
    done = subprocess.run(argv, capture_output=True, text=True, check=False)
    if done.returncode != 0 and "mount" in done.stderr and not STEP.search(done.stdout):
        pytest.skip(f"no mount namespace here: {done.stderr.strip()}")
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def test_a_fault_planted_after_the_checkout_was_written_again_rebuilds_one_file(build_project: Project, tmp_path: Path) -> None:
    """The self-test's copy keeps the build's view of every file it does not edit, even when the checkout was
    written again since the build and no build ran after it."""
    assert build_cpu(build_project).code == 0
    write_checkout_again(build_project)
    assert build_project.ci("patches", "--remote", str(build_project.fork.path)).code == 0  # a sync, no build
    fault = fault_in("ggml/ggml.c", "return 42;", "return 43;")
    trial = selftest.plant(build_project.submodule, build_dir(build_project), fault, build_project.root / "build" / "selftest" / "cpu")
    steps = ninja_steps(rebuild_in_namespace(build_project, trial))
    assert compiled(steps) == ["ggml.c.o"], steps
    assert not any("Re-running CMake" in s for s in steps), steps


@pytest.mark.skipif(shutil.which("ccache") is None, reason="ccache is not installed (apt-get install ccache)")
def test_ccaches_hit_rate_is_said_and_lands_in_build_json(build_project: Project, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("CCACHE_DIR", str(tmp_path / "ccache"))
    r = build_cpu(build_project)
    assert r.code == 0, r.err
    first = manifest(build_project)["ccache_stats"]
    assert (first["hits"], first["misses"]) == (0, 3), first  # ggml.c, test-backend-ops.cpp, server.cpp: all new
    assert said(ninja.CCACHE_LINE, r.out, hits=0, cacheable=3, rate="0.0%")
    shutil.rmtree(build_dir(build_project))
    r = build_cpu(build_project)
    assert r.code == 0, r.err
    again = manifest(build_project)["ccache_stats"]
    assert (again["hits"], again["misses"], again["hit_rate"]) == (3, 0, 1.0), again
    assert said(ninja.CCACHE_LINE, r.out, hits=3, cacheable=3, rate="100.0%")


@pytest.mark.skipif(shutil.which("ccache") is None, reason="no ccache here: apt-get install ccache (.ci/run does)")
def test_ccache_hits_a_build_of_the_same_sources_in_a_clone_at_another_path(build_fork: BuildFork, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """A checkout at another place (a scratch clone, a runner's new workspace) compiles the same sources with other
    absolute paths; ccache's base_dir, the project's root, makes them the same compile (a real fork's clone hit 1 of 277)."""
    from tests.support.project import make_project

    monkeypatch.setenv("CCACHE_DIR", str(tmp_path / "ccache"))
    first = make_project(tmp_path / "one" / "project", build_fork.as_fork(), build_fork.f0)
    r = build_cpu(first)
    assert r.code == 0, r.err
    other = make_project(tmp_path / "elsewhere" / "project", build_fork.as_fork(), build_fork.f0)
    r = build_cpu(other)
    assert r.code == 0, r.err
    stats = manifest(other)["ccache_stats"]
    assert (stats["hits"], stats["misses"]) == (3, 0), stats
