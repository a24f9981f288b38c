"""Production's environment is the judged one (issue 43, item 1). ``LD_LIBRARY_PATH`` naming a folder with a working
``libggml.so``, set for both gpu_tests and ship, had every gate pass on a build whose own libggml fails, and ship
wrote the wheel: the record's environment was compared with ship's, never with what ``1bit serve`` runs under (it
drops LD_LIBRARY_PATH), and release.json named no environment.

Now a library path outside the system's folders is refused before anything starts; the libraries each gate's programs
mapped are read from the running processes and held to the build's sha256; release.json records the environment.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from ci import cli, command, loaded
from ci import environment as program_environment
from ci.errors import Refused
from ci.release import ledger
from tests.release.test_ship import GATES, built, record, ship
from tests.support.binaries import llama_bin_dir
from tests.support.build import BuildFork, add_fixture_patch, build_cpu, replay_flags
from tests.support.project import Project

FIXTURE_GGML = Path(__file__).resolve().parents[1] / "compile" / "fixture" / "ggml" / "ggml.c"


def working_libggml(folder: Path) -> Path:
    """The fixture's libggml with the right answer (42), built apart from the build: a working library elsewhere."""
    folder.mkdir(parents=True, exist_ok=True)
    target = folder / "libggml.so"
    subprocess.run(["cc", "-shared", "-fPIC", '-DFIXTURE_GREETING="elsewhere"', "-o", str(target), str(FIXTURE_GGML)], check=True, capture_output=True)
    return target


@pytest.mark.skipif(shutil.which("cc") is None, reason="needs a C compiler for the library planted elsewhere")
def test_a_library_path_to_a_working_libggml_is_refused_before_any_gate_runs(
    build_project: Project, build_fork: BuildFork, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ONEBIT_CMAKE_ARGS", replay_flags())
    build_project.pins.write_text(build_project.pins.read_text().replace("GATED_DELTA_NET: 54", "GATED_DELTA_NET: 36"))  # the replayed run's
    assert build_cpu(build_project).code == 0
    add_fixture_patch(build_project, build_fork, "wrong.patch", "ggml/ggml.c", "return 42;", "return 41;")  # the build's own fails
    assert build_cpu(build_project).code == 0
    assert build_project.ci("gpu-tests", "--profile", "cpu", "--gate", "backend_ops").code == 7  # the build's own fails
    foreign = working_libggml(tmp_path / "elsewhere")
    monkeypatch.setenv("LD_LIBRARY_PATH", str(foreign.parent))
    r = build_project.ci("gpu-tests", "--profile", "cpu", "--gate", "backend_ops")
    message = program_environment.LIBRARY_PATH_OUTSIDE.format(entry=foreign.parent, folders=", ".join(loaded.library_folders()))
    assert r.err == cli.ERROR.format(message=message) + "\n", r.out + r.err
    assert r.code == Refused.exit_code
    book = ledger.read(build_project.root / "build" / "results" / "ledger.jsonl")
    assert [(rec.gate, rec.verdict) for rec in book.records] == [("backend_ops", "failed")]  # the build's own run, and no other


def test_a_library_path_in_the_systems_folders_is_passed_and_recorded(monkeypatch: pytest.MonkeyPatch) -> None:
    folder = loaded.system_folders()[-1]
    monkeypatch.setenv("LD_LIBRARY_PATH", folder)
    assert program_environment.environment()["LD_LIBRARY_PATH"] == folder
    assert program_environment.recorded_environment()["LD_LIBRARY_PATH"] == folder


def test_the_python_s_own_library_folder_is_no_foreign_one(monkeypatch: pytest.MonkeyPatch) -> None:
    """GitHub's setup-python exports LD_LIBRARY_PATH=<its Python>/lib for every later step of a job."""
    import sysconfig

    folder = str(sysconfig.get_config_var("LIBDIR"))
    monkeypatch.setenv("LD_LIBRARY_PATH", folder)
    assert program_environment.environment()["LD_LIBRARY_PATH"] == folder


def test_the_system_folders_are_ld_sos_and_those_its_configuration_lists(tmp_path: Path) -> None:
    (tmp_path / "conf.d").mkdir()
    (tmp_path / "conf.d" / "gpu.conf").write_text("# the driver\n/opt/driver/lib\n")
    (tmp_path / "ld.so.conf").write_text(f"include {tmp_path}/conf.d/*.conf\n/usr/local/lib\n")
    found = loaded.system_folders(tmp_path / "ld.so.conf")
    assert {os.path.realpath(f) for f in loaded.DEFAULT_FOLDERS} <= set(found)
    assert "/opt/driver/lib" in found
    assert "/usr/local/lib" in found


def test_a_python_path_holding_a_sitecustomize_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """It runs in every Python a gate starts (the route gate's pytest, the launcher) before anything of theirs."""
    (tmp_path / "sitecustomize.py").write_text("import builtins\n")
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    with pytest.raises(Refused) as refused:
        command.run([sys.executable, "-c", "pass"], quiet=True)
    assert refused.value.message == program_environment.START_UP_CODE.format(entry=tmp_path, name="sitecustomize.py")


@pytest.mark.slow
def test_the_libraries_a_running_gate_program_maps_are_held_to_the_builds(tmp_path: Path) -> None:
    """The real test-backend-ops, its libraries read from the running process: the build's, or a copy elsewhere
    given by a library path the environment check did not see (a system folder, say) is named with its sha256."""
    bin_dir = llama_bin_dir()
    real = Path(os.path.realpath(bin_dir / "libggml-base.so.0"))
    names = sorted(p.name for p in bin_dir.glob("lib*.so.[0-9]") if p.is_symlink())  # the names ld.so looks for
    build = [loaded.Library(n, bin_dir / n, hashlib.sha256((bin_dir / n).read_bytes()).hexdigest()) for n in names]
    base = next(lib for lib in build if lib.name == "libggml-base.so.0")
    tbo = bin_dir / "test-backend-ops"
    binaries = [loaded.Library(tbo.name, tbo, hashlib.sha256(tbo.read_bytes()).hexdigest())]
    argv = [str(bin_dir / "test-backend-ops"), "-o", "SUM", "-b", "CPU"]
    with loaded.watching() as watch:
        command.run(argv, quiet=True)
    judged = watch.judge(bin_dir, build, binaries, loaded.system_folders())
    assert judged.problems == []
    assert judged.loaded["libggml-base.so.0"] == base.sha256

    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "libggml-base.so.0").write_bytes(real.read_bytes() + b"\0")  # loads and works: trailing bytes
    env = {**program_environment.environment(), "LD_LIBRARY_PATH": str(elsewhere)}
    with loaded.watching() as watch:
        assert command.run(argv, env=env, quiet=True).returncode == 0
    judged = watch.judge(bin_dir, build, binaries, loaded.system_folders())
    got = hashlib.sha256((elsewhere / "libggml-base.so.0").read_bytes()).hexdigest()
    want = loaded.OTHER_LIBRARY.format(
        program="test-backend-ops", path=elsewhere / "libggml-base.so.0", name="libggml-base.so.0", want=base.sha256[:12], got=got[:12], hint=loaded.WHERE_FROM
    )
    assert judged.problems == [want]


def test_release_json_records_the_environment_the_gates_ran_in(build_project: Project, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GGML_SCHED_MAX_COPIES", "2")
    m = built(build_project)
    record(build_project, m, GATES.route, GATES.backend_ops, GATES.equivalence)
    r = ship(build_project)
    assert r.code == 0, r.out + r.err
    release = json.loads(next((build_project.root / "dist").glob("onebit_serve-*.release.json")).read_text())
    assert release["environment"] == {"GGML_SCHED_MAX_COPIES": "2"}
