"""The judge is what the digest says (issue 36, item 2). The digests of ci/ and serve/ skipped ``__pycache__`` and
``*.pyc``, and the process that judged imported them: a folder holding only ``__init__.pyc`` shadows the module of
its name, and a ``.pyc`` whose header carries its source's mtime and size is taken for that source. A backend_ops
judge weakened that way gave a passing record for a build that fails a case, the digest unchanged, and ship wrote
the wheel.

Each attack runs in a copy of ci/ and serve/ (never in the checkout, which other sessions import), with
``python -m ci`` started in the copy: the working directory comes first on ``sys.path``, before the editable
install's finder, so the copy is what imports.
"""

from __future__ import annotations

import importlib.util
import marshal
import os
import shutil
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from ci import cli, digests
from ci.gates.serving import launcher as launcher_files
from ci.release import binding
from tests.release.test_ship import GATES, built, record, ship
from tests.support.messages import said
from tests.support.project import Project

ROOT = Path(__file__).resolve().parents[2]
PLANTED = "PLANTED"
MATRIX = ("matrix", "--profiles", "cpu")


def tree(tmp_path: Path) -> Path:
    """A copy of ci/ and serve/ as a checkout holds them, without bytecode."""
    work = tmp_path / "work"
    for name in ("ci", "serve"):
        shutil.copytree(ROOT / name, work / name, ignore=shutil.ignore_patterns(*launcher_files.LAUNCHER_SKIPS))
    return work


def plain_env() -> dict[str, str]:
    """This machine's environment with no bytecode folder of its own: Python reads the tree's __pycache__."""
    return {k: v for k, v in os.environ.items() if k not in ("PYTHONPYCACHEPREFIX", "PYTHONSAFEPATH", "PYTHONPATH")}


def python(work: Path, *args: str, env: Mapping[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, *args], cwd=work, env=dict(env or plain_env()), capture_output=True, text=True, timeout=120)


def pyc(code: str, filename: str, header: bytes) -> bytes:
    return importlib.util.MAGIC_NUMBER + header + marshal.dumps(compile(code, filename, "exec"))


def plant_timestamp_pyc(source: Path, code: str) -> Path:
    """``code``'s bytecode in ``source``'s __pycache__, its header carrying ``source``'s mtime and size: Python takes
    it for ``source`` (a timestamp .pyc is checked by those two alone)."""
    st = source.stat()
    header = (0).to_bytes(4, "little") + (int(st.st_mtime) & 0xFFFFFFFF).to_bytes(4, "little") + (st.st_size & 0xFFFFFFFF).to_bytes(4, "little")
    cache = source.parent / "__pycache__" / f"{source.stem}.{sys.implementation.cache_tag}.pyc"
    cache.parent.mkdir(exist_ok=True)
    cache.write_bytes(pyc(code, str(source), header))
    return cache


def weakened_build(work: Path) -> str:
    """ci/commands/build.py with its ``matrix`` saying PLANTED: a stand-in for a weakened judge that dispatch imports."""
    text = (work / "ci" / "commands" / "build.py").read_text()
    head = "def matrix(args: argparse.Namespace) -> int:\n"
    assert head in text
    return text.replace(head, f'{head}    say("{PLANTED}")\n    return 0\n\n\ndef _committed_matrix(args: argparse.Namespace) -> int:\n') + f"\n{PLANTED} = True\n"


def test_a_planted_timestamp_pyc_of_a_module_ci_imports_to_judge_is_not_what_runs(tmp_path: Path) -> None:
    work = tree(tmp_path)
    planted = plant_timestamp_pyc(work / "ci" / "commands" / "build.py", weakened_build(work))
    attack = python(work, "-c", f"import ci.commands.build as b; print(b.{PLANTED}, b.__file__)")
    assert attack.stdout.startswith(f"True {work}"), attack  # a plain import takes the planted bytecode: the attack is real
    done = python(work, "-m", "ci", *MATRIX)
    assert (done.returncode, done.stderr) == (0, ""), done
    assert PLANTED not in done.stdout
    assert done.stdout == python(ROOT, "-m", "ci", *MATRIX).stdout  # what the committed source says
    assert planted.is_file()  # neither read nor replaced


def load_noxfile() -> Any:
    spec = importlib.util.spec_from_file_location("onebit_noxfile", ROOT / "noxfile.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_nox_starts_ci_with_a_fresh_bytecode_folder(tmp_path: Path) -> None:
    """What the process imports before it can look (ci/__init__.py, ci/cli.py) is protected only from outside: the
    nox session gives each ``python -m ci`` a bytecode folder made for it, so a planted ci/__pycache__/cli .pyc is
    never read."""
    work = tree(tmp_path)
    cli_source = (work / "ci" / "cli.py").read_text()
    plant_timestamp_pyc(work / "ci" / "cli.py", f"import sys\n\ndef main(argv=None):\n    print('{PLANTED}')\n    return 0\n")
    assert python(work, "-m", "ci", *MATRIX).stdout == f"{PLANTED}\n"  # a Python started plainly runs the planted entry point
    calls: list[tuple[tuple[str, ...], dict[str, Any]]] = []
    folders: list[bool] = []

    def run(*args: str, **kwargs: Any) -> None:
        calls.append((args, kwargs))
        folder = Path((kwargs.get("env") or {}).get("PYTHONPYCACHEPREFIX", tmp_path / "none"))
        folders.append(folder.is_dir() and not any(folder.iterdir()))  # fresh: made for this run, and empty
        done = python(work, *args[1:], env={**plain_env(), **(kwargs.get("env") or {})})
        calls[-1][1]["result"] = done

    session = SimpleNamespace(venv_backend="none", posargs=list(MATRIX[1:]), run=run)
    noxfile = load_noxfile()
    noxfile.NO_VENV = True  # nox --no-venv: the running Python, as the GPU box runs it (the one environment otherwise)
    noxfile._ci(session, MATRIX[0])
    (args, kwargs), = calls
    assert args[1:4] == ("-m", "ci", "matrix")
    assert folders == [True]
    done = kwargs["result"]
    assert (done.returncode, PLANTED in done.stdout) == (0, False), done
    assert (work / "ci" / "cli.py").read_text() == cli_source
    assert not Path(kwargs["env"]["PYTHONPYCACHEPREFIX"]).exists()  # removed once the session's command ended


def sourceless_package(work: Path) -> Path:
    """ci/gates/backend_ops/judge/ holding only __init__.pyc: it shadows judge.py, and no digest read it."""
    folder = work / "ci" / "gates" / "backend_ops" / "judge"
    folder.mkdir()
    (folder / "__init__.pyc").write_bytes(pyc(f"{PLANTED} = True\n", "judge", (0).to_bytes(12, "little")))
    return folder


def orphan_bytecode(work: Path) -> Path:
    gone = work / "ci" / "gates" / "__pycache__" / f"gone.{sys.implementation.cache_tag}.pyc"
    gone.parent.mkdir(exist_ok=True)
    gone.write_bytes(pyc("", "gone", (0).to_bytes(12, "little")))
    return gone


def linked_folder(work: Path) -> Path:
    elsewhere = work.parent / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "__init__.py").write_text(f"{PLANTED} = True\n")
    link = work / "serve" / "extras"
    link.symlink_to(elsewhere, target_is_directory=True)
    return link


def stray_bytecode(work: Path) -> Path:
    stray = work / "serve" / "route.pyc"
    stray.write_bytes(pyc("", "route", (0).to_bytes(12, "little")))
    return stray


def test_a_sourceless_package_shadows_the_judge_of_its_name(tmp_path: Path) -> None:
    work = tree(tmp_path)
    sourceless_package(work)
    attack = python(work, "-c", f"import ci.gates.backend_ops.judge as j; print(j.{PLANTED})")
    assert attack.stdout == "True\n", attack


@pytest.mark.parametrize(
    ("plant", "why"),
    [
        (sourceless_package, digests.SOURCELESS_PACKAGE.format(module="judge")),
        (orphan_bytecode, digests.ORPHAN_BYTECODE.format(source="gone.py")),
        (linked_folder, digests.A_LINK.format(target="{target}")),
        (stray_bytecode, digests.SOURCELESS_BYTECODE),
    ],
)  # fmt: skip
def test_ci_refuses_to_start_beside_bytecode_or_a_link_the_digests_do_not_read(tmp_path: Path, plant: Any, why: str) -> None:
    work = tree(tmp_path)
    assert python(work, "-m", "ci", *MATRIX).returncode == 0
    stray = plant(work)
    done = python(work, "-m", "ci", *MATRIX)
    assert done.returncode == 4, done
    assert done.stdout == ""
    shown = stray.relative_to(work).as_posix()
    assert len(done.stderr.splitlines()) == 1, done.stderr
    assert said(cli.ERROR.format(message=digests.STRAY.format(path=shown, why=why, more="")), done.stderr, target=str(work.parent / "elsewhere")), done.stderr


def test_a_clean_bytecode_cache_is_not_a_stray(tmp_path: Path) -> None:
    work = tree(tmp_path)
    assert python(work, "-m", "compileall", "-q", "ci", "serve").returncode == 0  # every source's .pyc, where Python puts it
    assert digests.strays(work / "ci") == []
    assert digests.strays(work / "serve") == []
    assert python(work, "-m", "ci", *MATRIX).returncode == 0


@pytest.mark.parametrize("plant", [sourceless_package, orphan_bytecode, linked_folder, stray_bytecode])
def test_the_digests_read_every_entry_but_a_cache_of_existing_sources(tmp_path: Path, plant: Any) -> None:
    work = tree(tmp_path)
    before = {name: launcher_files.launcher_sha256(work / name) for name in ("ci", "serve")}
    assert python(work, "-m", "compileall", "-q", "ci", "serve").returncode == 0
    assert {name: launcher_files.launcher_sha256(work / name) for name in ("ci", "serve")} == before
    plant(work)
    after = {name: launcher_files.launcher_sha256(work / name) for name in ("ci", "serve")}
    assert after != before


def test_an_empty_folder_is_in_the_digest(tmp_path: Path) -> None:
    work = tree(tmp_path)
    before = launcher_files.launcher_sha256(work / "serve")
    (work / "serve" / "route").mkdir()
    assert launcher_files.launcher_sha256(work / "serve") != before


def test_records_judged_beside_a_sourceless_judge_do_not_ship(build_project: Project, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The campaign's attack: the records written while the sourceless judge was there are bound to a digest that
    never saw it, and ship (the stray still there, or gone) wrote the wheel."""
    work = tree(tmp_path)
    monkeypatch.setattr(binding, "orchestration_dir", lambda: work / "ci")
    m = built(build_project)
    stray = sourceless_package(work)
    record(build_project, m, GATES.route, GATES.backend_ops, GATES.equivalence)
    r = ship(build_project)
    assert r.code == 4, r.out + r.err
    why = digests.SOURCELESS_PACKAGE.format(module="judge")
    assert r.err == cli.ERROR.format(message=digests.STRAY.format(path=stray.relative_to(work).as_posix(), why=why, more="")) + "\n"
    assert not (build_project.root / "dist").exists()
    shutil.rmtree(stray)  # the judge put back: the records judged another ci/ than this one
    r = ship(build_project)
    assert r.code == 7, r.out + r.err
    assert not (build_project.root / "dist").exists()
