"""Every id and path that names a place (issue 24): hostile fault ids and files, a work directory outside its area,
a lock path that is someone's file, a series that is a directory or a dangling link; and one build or sync at a time."""

from __future__ import annotations

import fcntl
import json
import os
import re
import stat
import sys
from pathlib import Path

import pytest

from ci import cli, commands, files, locks, places, schema
from ci.commands import bench as bench_command
from ci.commands import gate_selftest
from ci.compile import stage
from ci.errors import ConfigError
from ci.gates.selftest import faults as fault_set
from ci.gates.selftest import run as selftest
from ci.gates.serving import bench
from ci.gates.tiny.models import TinyModels
from ci.pin import project as pin_project
from ci.source import series, sync
from ci.source.series import load_series
from serve import bounded
from tests.support.build import build_cpu
from tests.support.messages import pattern, said
from tests.support.project import Project

FAULT = """\
faults:
  - id: {id}
    file: {file}
    search: "a"
    replace: "b"
    gate: backend_ops
    expect: failed
    profiles: [cpu]
    why: "hostile"
"""


@pytest.mark.parametrize("fault_id", ["/tmp/victim", "../../victim", "a/../../victim", "..", "-rf", "x" * 101])
def test_a_fault_id_that_is_a_path_is_refused(tmp_path: Path, fault_id: str) -> None:
    faults = tmp_path / "faults.yaml"
    faults.write_text(FAULT.format(id=f'"{fault_id}"', file="tools/server/server.cpp"))
    with pytest.raises(ConfigError) as exc:
        selftest.load_faults(faults)
    # the self-test's words (ci/gates/selftest/run.py) around the rule for ids
    problem = f'"{fault_id}" is not a fault id ({places.ID_RULE})'
    assert exc.value.message == schema.AT_KEY.format(file=faults, key="faults[0].id", problem=problem)


def test_an_absolute_fault_id_removes_nothing_outside_the_checkout(build_project: Project, tmp_path: Path) -> None:
    r = build_cpu(build_project)
    assert r.code == 0, r.err
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "keep").write_text("mine\n")
    faults = tmp_path / "faults.yaml"
    faults.write_text(FAULT.format(id=f'"{victim}"', file="tools/server/server.cpp"))
    r = build_project.ci("gate-selftest", "--profile", "cpu", "--faults", str(faults))
    assert r.code == 2, r.err
    assert r.err.count("\n") == 1
    problem = fault_set.NOT_A_FAULT_ID.format(id=victim, why=places.ID_RULE)
    assert cli.ERROR.format(message=schema.AT_KEY.format(file=faults, key="faults[0].id", problem=problem)) in r.err
    assert (victim / "keep").read_text() == "mine\n"
    assert sorted(p.name for p in victim.iterdir()) == ["keep"]


@pytest.mark.parametrize(("file", "why"), [("/etc/passwd", places.ABSOLUTE), ("../../../outside.txt", places.HAS_DOTDOT)])
def test_a_fault_file_outside_the_fork_is_refused(tmp_path: Path, file: str, why: str) -> None:
    faults = tmp_path / "faults.yaml"
    faults.write_text(FAULT.format(id="ok", file=file))
    # the self-test's words (ci/gates/selftest/run.py) around the path's problem
    with pytest.raises(ConfigError, match=re.escape(schema.AT_KEY.format(file=faults, key="faults[0].file", problem=f'"{file}": {why}'))):
        selftest.load_faults(faults)


def test_a_faults_file_that_is_a_symlink_or_a_fifo_is_refused(tmp_path: Path) -> None:
    real = tmp_path / "real.yaml"
    real.write_text(FAULT.format(id="ok", file="a.c"))
    link = tmp_path / "link.yaml"
    link.symlink_to(real)
    # the self-test's words (ci/gates/selftest/run.py) around the reader's reason
    with pytest.raises(ConfigError, match=re.escape(fault_set.FAULTS_UNREADABLE.format(path=link, reason=bounded.SYMBOLIC_LINK))):
        selftest.load_faults(link)
    fifo = tmp_path / "fifo.yaml"
    os.mkfifo(fifo)
    fifo_refused = fault_set.FAULTS_UNREADABLE.format(path=fifo, reason=bounded.NOT_REGULAR.format(kind=bounded.A_FIFO))
    with pytest.raises(ConfigError, match=re.escape(fifo_refused)):
        selftest.load_faults(fifo)  # named at once, never waited on


def test_the_inner_selftest_refuses_a_work_directory_outside_its_area(build_project: Project, tmp_path: Path) -> None:
    victim = tmp_path / "victim"
    victim.mkdir()
    r = build_project.ci("selftest-fault", "--profile", "cpu", "--fault", "server-benign", "--work", str(victim))
    assert r.code == 2
    what = gate_selftest.WORK_DIRECTORY.format(area="build/selftest/cpu")
    assert said(cli.ERROR.format(message=places.OUTSIDE), r.err, what=what, path=victim)
    assert r.err.count("\n") == 1
    assert list(victim.iterdir()) == []


def test_bench_lock_never_truncates_an_existing_file(tmp_path: Path) -> None:
    precious = tmp_path / "results.csv"
    precious.write_text("a,b\n1,2\n")
    with pytest.raises(ConfigError) as exc, bench.box_lock(precious, print):
        pass
    assert exc.value.message == locks.NOT_A_LOCK_FILE.format(what="--lock", path=precious, size=8)
    assert precious.read_text() == "a,b\n1,2\n"
    link = tmp_path / "link.lock"
    link.symlink_to(precious)
    with pytest.raises(ConfigError, match=re.escape(locks.IS_A_LINK.format(what="--lock", path=link))), bench.box_lock(link, print):
        pass
    assert precious.read_text() == "a,b\n1,2\n"


def test_a_second_build_of_one_build_directory_is_refused_naming_the_holder(build_project: Project) -> None:
    lock = build_project.root / "build" / ".cpu.onebit.lock"
    lock.parent.mkdir(parents=True, exist_ok=True)
    with locks.held_lock(lock, "test", "the build directory", purpose="the first build"):
        r = build_project.ci("build", "--profile", "cpu", "--remote", str(build_project.fork.path))
    assert r.code == 4, r.err
    holder = locks.WITH_PURPOSE.format(holder=locks.HOLDER, purpose="the first build")
    what = stage.BUILD_DIRECTORY.format(directory="build/cpu")
    held = cli.ERROR.format(message=locks.HELD.format(who="build", what=what, holder=holder, path=lock))
    assert pattern(held, pid=os.getpid()).match(r.err), r.err
    assert not (build_project.root / "build" / "cpu" / "build.json").exists()


def test_a_second_sync_of_one_checkout_is_refused(build_project: Project) -> None:
    build_project.ci("patches", "--remote", str(build_project.fork.path))
    gitdir = build_project.root / ".git" / "modules" / "third_party" / "llama.cpp-rocmfpx"
    if not gitdir.is_dir():
        gitdir = next(p.parent for p in (build_project.root / ".git").rglob("HEAD") if "llama.cpp-rocmfpx" in str(p))
    fd = os.open(gitdir / locks.LOCK_NAME, os.O_RDWR | os.O_CREAT)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        r = build_project.ci("patches", "--remote", str(build_project.fork.path))
    finally:
        os.close(fd)
    assert r.code == 4, r.err
    what = sync.THE_CHECKOUT.format(name="llama.cpp-rocmfpx")
    assert said(locks.HELD, r.err, who="patches", what=what, holder=locks.UNKNOWN_HOLDER)


def test_a_lock_held_by_a_killed_run_holds_nothing(tmp_path: Path) -> None:
    lock = tmp_path / "x.lock"
    lock.write_text("pid 999999 on elsewhere since 2026-01-01T00:00:00Z\n")  # the line stays; the flock went with it
    with locks.held_lock(lock, "test", "x"):
        assert pattern(locks.HOLDER, pid=os.getpid()).match(lock.read_text())


def test_a_series_that_is_a_directory_or_a_dangling_link_is_an_error(tmp_path: Path) -> None:
    patches = tmp_path / "patches"
    patches.mkdir()
    assert load_series(patches).patches == ()  # absent: no patches
    (patches / "series").mkdir()
    with pytest.raises(ConfigError, match=re.escape(series.SERIES_NOT_REGULAR.format(series="patches/series", kind=bounded.A_DIRECTORY))):
        load_series(patches)
    (patches / "series").rmdir()
    (patches / "series").symlink_to(tmp_path / "gone")
    with pytest.raises(ConfigError, match=re.escape(series.SERIES_NOT_REGULAR.format(series="patches/series", kind=series.A_SYMBOLIC_LINK))):
        load_series(patches)


def test_bench_recipe_refuses_a_recipe_that_does_not_apply_to_the_launch(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from ci.cli import main
    from tests.support.gguf_files import make

    recipes = tmp_path / "recipes.json"
    recipes.write_text(
        json.dumps({"recipes": [{"id": "vk-ub", "match": {"device": ["vulkan"]}, "args": ["-ub", "64"], "why": "w", "measured": "m"}]})
    )
    server = tmp_path / "llama-server"
    server.write_text("#!/bin/sh\nexit 0\n")
    server.chmod(0o755)
    model = tmp_path / make("plain", tmp_path)
    code = main(
        [
            "bench",
            "--recipe",
            "vk-ub",
            "--recipes",
            str(recipes),
            "-m",
            str(model),
            "--llama-server",
            str(server),
            "--device",
            "cpu",
            "--logs",
            str(tmp_path / "logs"),
        ]
    )
    err = capsys.readouterr().err
    assert code == 2, err
    refused = bench_command.DOES_NOT_APPLY.format(recipe="vk-ub", applied=bench_command.APPLIES_NONE)
    assert err.startswith(cli.ERROR.format(message=refused))
    assert not (tmp_path / "logs").exists()  # nothing measured


def test_gitmodules_include_is_refused(project: Project, tmp_path: Path) -> None:
    other = tmp_path / "elsewhere"
    other.write_text('[submodule "third_party/llama.cpp-rocmfpx"]\n\turl = https://evil.example/fork.git\n')
    gm = project.root / ".gitmodules"
    gm.write_text(gm.read_text() + f"[include]\n\tpath = {other}\n")
    r = project.ci("verify-pin")
    assert r.code == 2
    include = pin_project.INCLUDE_SECTION.format(file=".gitmodules", line=5)
    assert r.err.splitlines()[0] == cli.ERROR.format(message=include)
    assert "evil.example" not in r.err + r.out


def test_an_atomic_write_never_replaces_a_link_a_folder_a_device_or_a_pipe(tmp_path: Path) -> None:
    """The rename would replace whatever is there: bench --json /dev/full (as root) left a regular file in place of
    the device (a hostile pass). Each is refused naming the path, and stays what it was."""
    precious = tmp_path / "precious.json"
    precious.write_text("{}")
    link = tmp_path / "link.json"
    link.symlink_to(precious)
    fifo = tmp_path / "fifo.json"
    os.mkfifo(fifo)
    folder = tmp_path / "folder.json"
    folder.mkdir()
    for path, why in (
        (link, bounded.SYMBOLIC_LINK),
        (fifo, bounded.NOT_REGULAR.format(kind=bounded.A_FIFO)),
        (folder, bounded.NOT_REGULAR.format(kind=bounded.A_DIRECTORY)),
        (Path("/dev/null"), bounded.NOT_REGULAR.format(kind=bounded.A_CHARACTER_DEVICE)),
    ):
        with pytest.raises(OSError, match=re.escape(why)) as exc:
            files.write_atomic(path, "{}\n")
        assert exc.value.filename == str(path)
    assert (link.is_symlink(), stat.S_ISFIFO(fifo.lstat().st_mode), folder.is_dir(), stat.S_ISCHR(os.stat("/dev/null").st_mode)) == (True,) * 4
    assert precious.read_text() == "{}"


def test_bench_names_an_output_it_cannot_write_before_any_round(tiny_models: TinyModels, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    fifo = tmp_path / "fifo.json"
    os.mkfifo(fifo)
    a_file = tmp_path / "logs"
    a_file.write_text("not a folder")
    base = ["bench", "-m", str(tiny_models.target), "--llama-server", sys.executable, "--device", "cpu", "--config", "base=", "--config", "b="]
    fifo_why = bench_command.NOT_WRITABLE.format(what="--json", path=fifo, why=bounded.NOT_REGULAR.format(kind=bounded.A_FIFO))
    for extra, message in (
        (["--json", str(fifo)], fifo_why),
        (["--logs", str(a_file)], commands.NOT_A_FOLDER.format(flag="--logs", path=a_file, above="", what="the servers' logs")),
    ):
        assert cli.main([*base, *extra]) == 2
        assert capsys.readouterr().err == cli.ERROR.format(message=message) + "\n"
    assert stat.S_ISFIFO(fifo.lstat().st_mode)
    assert a_file.read_text() == "not a folder"


@pytest.mark.parametrize(
    "command",
    [
        ["equivalence", "--model", "{target}", "--drafter", "{target}", "--llama-server", sys.executable, "--device", "cpu"],
        ["backend-ops", "--device", "CPU", "--expect", "GATED_DELTA_NET=36", "--pinned-commit", "none", "--from-log", "{log}"],
        ["tiny-models"],
    ],
    ids=["equivalence", "backend-ops", "tiny-models"],
)
@pytest.mark.parametrize("below", [False, True], ids=["the-file", "below-it"])
def test_an_out_folder_that_is_a_file_is_named_before_anything_runs(
    tiny_models: TinyModels, tmp_path: Path, capsys: pytest.CaptureFixture[str], command: list[str], below: bool
) -> None:
    log = tmp_path / "saved.console.txt"
    log.write_text("not judged\n")
    a_file = tmp_path / "out.txt"
    a_file.write_text("someone's file")
    out = a_file / "gates" if below else a_file
    argv = [part.format(target=tiny_models.target, log=log) for part in command]
    assert cli.main([*argv, "--out", str(out)]) == 2
    err = capsys.readouterr().err
    above = commands.ABOVE.format(file=a_file) if below else ""
    assert said(cli.ERROR.format(message=commands.NOT_A_FOLDER), err, flag="--out", path=out, above=above), err
    assert len(err.splitlines()) == 1, err
    assert a_file.read_text() == "someone's file"


def test_gpu_tests_names_an_out_folder_that_is_a_file_before_the_log_is_judged(project: Project, tmp_path: Path) -> None:
    log = tmp_path / "saved.console.txt"
    log.write_text("not judged\n")
    a_file = tmp_path / "out.txt"
    a_file.write_text("someone's file")
    r = project.ci("gpu-tests", "--profile", "cpu", "--from-log", str(log), "--out", str(a_file))
    assert r.code == 2, r.err
    assert said(cli.ERROR.format(message=commands.NOT_A_FOLDER), r.err, flag="--out", path=a_file, above="")
    assert not (project.root / "build" / "results" / "ledger.jsonl").exists()
    assert a_file.read_text() == "someone's file"
