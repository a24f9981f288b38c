"""Hostile pass 5: a conftest.py beside the launcher's attacks decided which route tests ran, and no digest read it.

The route gate runs ``tests/route``, ``tests/serve`` and three files of ``tests/hostile``; pytest then loads every
``conftest.py`` of those folders, ``tests/hostile/conftest.py`` among them, and its ``pytest_collection_modifyitems``
holds every item of the run. ``route_tests_sha256`` read the two folders whole but of ``tests/hostile`` only the three
files (not its ``conftest.py``, not its ``__init__.py``, which pytest imports as the package of those three): a
conftest added for the gate run that drops the failing tests, taken out afterwards, left a route record that counted.
Now the digest reads every conftest and ``__init__`` on the way from the root to each path the gate runs
(ci.gates.route.run.route_test_files).

Run in a copy of the checkout (ci/, serve/, tests/, pyproject.toml) with ``python -m ci`` started there, as
tests/hostile/test_judge_bytecode.py does: the gate's pytest runs in the copy, never in the checkout others import.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from ci.gates.serving import launcher as launcher_files
from ci.release import ledger
from ci.release import witness as witness_mod
from tests.release.test_ship import GATES, built, record
from tests.support.project import Project

ROOT = Path(__file__).resolve().parents[2]
MARK = "# hostile pass 5"
WEAKENED = f"def env_problem(name: str) -> str | None:\n    return None  {MARK}\n\n\ndef _committed_env_problem(name: str) -> str | None:\n"
DROP_FAILING = """\
def pytest_collection_modifyitems(config, items):
    items[:] = [item for item in items if "test_recipe_launch_keys" not in item.nodeid]
"""


def checkout_copy(tmp_path: Path) -> Path:
    """ci/, serve/ (its recipes accepting any variable: the route gate's recipe refusal tests fail on it), tests/ and
    pyproject.toml of this checkout, without bytecode."""
    work = tmp_path / "work"
    for name in ("ci", "serve", "tests"):
        shutil.copytree(ROOT / name, work / name, ignore=shutil.ignore_patterns(*launcher_files.LAUNCHER_SKIPS))
    shutil.copy2(ROOT / "pyproject.toml", work / "pyproject.toml")
    recipes = work / "serve" / "recipes.py"
    head = "def env_problem(name: str) -> str | None:\n"
    assert head in recipes.read_text()
    recipes.write_text(recipes.read_text().replace(head, WEAKENED, 1))
    return work


def python_ci(work: Path, project: Project, *args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """``python -m ci --root ROOT ARGS`` in ``work``: the working directory first on sys.path, so the copy's ci runs."""
    argv = [sys.executable, "-m", "ci", "--root", str(project.root), *args]
    return subprocess.run(argv, cwd=work, env=env, capture_output=True, text=True, timeout=600)


def secrets(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    witness = tmp_path / "runner-state" / "ledger.witness"
    witness.parent.mkdir()
    monkeypatch.setenv(ledger.KEY_VAR, "pass-5-key")
    monkeypatch.setenv(witness_mod.WITNESS_VAR, str(witness))
    return {**os.environ, "PYTHONPYCACHEPREFIX": str(tmp_path / "bytecode")}


def test_the_route_gate_fails_on_a_launcher_whose_recipe_refusals_are_gone(
    build_project: Project, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The control: in the copy as it is, the weakened launcher fails the route gate."""
    work = checkout_copy(tmp_path)
    env = secrets(tmp_path, monkeypatch)
    built(build_project)
    gated = python_ci(work, build_project, "gpu-tests", "--profile", "cpu", "--gate", "route", env=env)
    assert gated.returncode == 7, gated.stdout[-2000:] + gated.stderr[-2000:]
    (route,) = ledger.read(build_project.root / "build" / "results" / "ledger.jsonl", ledger.signing_key()).records
    assert route.verdict == "failed"


def test_a_conftest_beside_the_launcher_attacks_added_for_the_gate_run_does_not_ship(
    build_project: Project, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    work = checkout_copy(tmp_path)
    env = secrets(tmp_path, monkeypatch)
    m = built(build_project)
    conftest = work / "tests" / "hostile" / "conftest.py"
    conftest.write_text(DROP_FAILING)
    python_ci(work, build_project, "gpu-tests", "--profile", "cpu", "--gate", "route", env=env)
    conftest.unlink()  # taken out after the gate run

    monkeypatch.setattr(launcher_files, "launcher_dir", lambda: work / "serve")  # as the copy's gates digest it
    record(build_project, m, GATES.backend_ops, GATES.equivalence)
    shipped = python_ci(work, build_project, "ship", "--profile", "cpu", env=env)
    wheels = list((build_project.root / "dist").glob("onebit_serve-*.whl"))
    held = [zipfile.ZipFile(w).read("serve/recipes.py").decode() for w in wheels]
    assert not any(MARK in text for text in held), shipped.stdout[-2000:]  # a launcher that fails its route tests
    assert shipped.returncode != 0, shipped.stdout[-2000:] + shipped.stderr[-2000:]
    assert "route_tests_sha256" in shipped.stdout, shipped.stdout[-2000:]  # the route record judged other route tests
