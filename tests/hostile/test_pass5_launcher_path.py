"""Hostile pass 5: the launcher the route gate's tests judged was not the one ship put in the wheel.

``PYTHONPATH`` is passed to every program and recorded (docs/release.md: "the launcher's Python path"); only an entry
holding ``sitecustomize``/``usercustomize`` was refused. An entry holding a package ``serve`` made ci's own process
take it for the launcher (``launcher_dir()``: the ``serve`` this Python imports), so ``launcher_sha256`` and ship's
copy read that folder. The route gate's pytest runs in the checkout, where pytest puts the checkout first on
``sys.path`` (``tests`` is a package): its tests import the checkout's ``serve/``. Set for both gpu_tests and ship,
as the foreign library of pass 4 was, the route record passes on the checkout's launcher and is bound to the other's
digest; ship copies the other into the wheel. The route suite run on the launcher so shipped fails 18 of its 242
tests (the recipe refusal tests of tests/hostile/test_recipe_launch_keys.py), 2026-12-06. Now the launcher is the
serve/ beside ci/ whatever sys.path says (ci.digests.package_dir), and an entry that would replace one of the project's
packages is refused (ci.environment.REPLACES_MODULE), so nothing starts.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from ci import environment as program_environment
from ci.gates.serving import launcher as launcher_files
from ci.release import ledger
from ci.release import witness as witness_mod
from tests.release.test_ship import GATES, built, record
from tests.support.messages import said
from tests.support.project import Project

ROOT = Path(__file__).resolve().parents[2]
WEAKENED = "def env_problem(name: str) -> str | None:\n    return None  # hostile pass 5\n\n\ndef _committed_env_problem(name: str) -> str | None:\n"


def weakened_launcher(folder: Path) -> Path:
    """A copy of serve/ whose recipes accept any variable (LD_PRELOAD among them): what the recipe refusal tests of
    the route gate fail on (issue 43's route-reach case)."""
    launcher = folder / "serve"
    shutil.copytree(ROOT / "serve", launcher, ignore=shutil.ignore_patterns(*launcher_files.LAUNCHER_SKIPS))
    recipes = launcher / "recipes.py"
    head = "def env_problem(name: str) -> str | None:\n"
    assert head in recipes.read_text()
    recipes.write_text(recipes.read_text().replace(head, WEAKENED, 1))
    return launcher


def python_ci(project: Project, *args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """``python -P -m ci --root ROOT ARGS``, as nox starts it (a fresh bytecode folder; the working directory off
    sys.path), in the checkout."""
    return subprocess.run(
        [sys.executable, "-P", "-m", "ci", "--root", str(project.root), *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )


def test_a_python_path_launcher_is_not_shipped_on_route_tests_that_judged_the_checkouts(
    build_project: Project, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The route gate runs for real (the checkout's route suite); the backend_ops and equivalence records are written as
    gpu_tests writes them (tests/release's ``record``), their launcher digest the one their ``python -P -m serve``
    would take under the same PYTHONPATH."""
    elsewhere = tmp_path / "elsewhere"
    evil = weakened_launcher(elsewhere)
    witness = tmp_path / "runner-state" / "ledger.witness"
    witness.parent.mkdir()
    monkeypatch.setenv(ledger.KEY_VAR, "pass-5-key")
    monkeypatch.setenv(witness_mod.WITNESS_VAR, str(witness))
    m = built(build_project)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join((str(elsewhere), str(ROOT))))  # ci stays this tree's (-P: no working directory)
    env = {**os.environ, "PYTHONPYCACHEPREFIX": str(tmp_path / "bytecode")}

    probe = "import serve.recipes as r; print(r.__file__, r.env_problem('LD_PRELOAD'))"
    seen = subprocess.run([sys.executable, "-P", "-c", probe], cwd=ROOT, env=env, capture_output=True, text=True, check=True).stdout
    assert seen == f"{evil / 'recipes.py'} None\n"  # what ci imports as the launcher accepts LD_PRELOAD in a recipe

    # the route gate had passed (its tests import the checkout's serve/), its record bound to the other's digest
    gated = python_ci(build_project, "gpu-tests", "--profile", "cpu", "--gate", "route", env=env)
    assert gated.returncode == 4, gated.stdout[-2000:] + gated.stderr[-2000:]
    assert said(program_environment.REPLACES_MODULE, gated.stderr, entry=elsewhere, module="serve", held=evil, theirs=ROOT / "serve")

    monkeypatch.setattr(launcher_files, "launcher_dir", lambda: evil)
    record(build_project, m, GATES.backend_ops, GATES.equivalence)
    shipped = python_ci(build_project, "ship", "--profile", "cpu", env=env)
    wheels = list((build_project.root / "dist").glob("onebit_serve-*.whl"))
    held = [zipfile.ZipFile(w).read("serve/recipes.py").decode() for w in wheels]
    assert not any("hostile pass 5" in text for text in held), shipped.stdout[-2000:]  # the launcher whose tests never ran
    assert shipped.returncode != 0, shipped.stdout[-2000:] + shipped.stderr[-2000:]


def test_the_launcher_is_the_checkouts_whatever_the_python_path_says(tmp_path: Path) -> None:
    """What ci digests and ship copies is the serve/ beside its ci/, even where this Python imports another serve."""
    elsewhere = tmp_path / "elsewhere"
    weakened_launcher(elsewhere)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join((str(elsewhere), str(ROOT))), "PYTHONPYCACHEPREFIX": str(tmp_path / "bytecode")}
    probe = "import serve; from ci.gates.serving import launcher; print(serve.__file__); print(launcher.launcher_dir())"
    seen = subprocess.run([sys.executable, "-P", "-c", probe], cwd=tmp_path, env=env, capture_output=True, text=True, check=True).stdout
    assert seen.splitlines() == [str(elsewhere / "serve" / "__init__.py"), str(ROOT / "serve")]
