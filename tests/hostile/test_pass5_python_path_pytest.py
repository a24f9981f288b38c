"""Hostile pass 5: a ``pytest`` module on PYTHONPATH was the route gate's pytest.

The gate imports pytest with the checkout taken off the front of sys.path (a ``pytest.py`` in the checkout once ran
in its place), but PYTHONPATH comes before the standard library and site-packages in every Python, and it was passed
to the gate's programs and recorded (only an entry holding ``sitecustomize``/``usercustomize`` was refused). Set for
both gpu_tests and ship, a folder holding a ``pytest.py`` that writes a JUnit of one passing case made the route
record "1/1 route tests passed" on a launcher that fails 18 of its tests, and ship wrote the wheel. An entry that
would replace a module is refused now (ci.environment.REPLACES_MODULE), and nothing starts.
"""

from __future__ import annotations

import zipfile
from pathlib import Path

import pytest

from ci import environment as program_environment
from ci.gates.serving import launcher as launcher_files
from tests.hostile.test_pass5_route_conftest import MARK, checkout_copy, python_ci, secrets
from tests.release.test_ship import GATES, built, record
from tests.support.messages import said
from tests.support.project import Project

FAKE_PYTEST = """\
def main(args):
    junit = next(a.split("=", 1)[1] for a in args if a.startswith("--junitxml="))
    with open(junit, "w") as fh:
        fh.write('<testsuites><testsuite name="pytest" tests="1"><testcase classname="tests.serve.test_it" name="test_it" time="0.1"/></testsuite></testsuites>')
    return 0
"""


def test_a_pytest_on_the_python_path_is_not_the_route_gates_pytest(
    build_project: Project, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    work = checkout_copy(tmp_path)  # its launcher fails 18 route tests (test_pass5_route_conftest's control)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "pytest.py").write_text(FAKE_PYTEST)
    m = built(build_project)
    monkeypatch.setenv("PYTHONPATH", str(elsewhere))  # for gpu_tests and ship
    env = secrets(tmp_path, monkeypatch)
    gated = python_ci(work, build_project, "gpu-tests", "--profile", "cpu", "--gate", "route", env=env)
    assert gated.returncode == 4, gated.stdout[-2000:] + gated.stderr[-2000:]
    assert said(program_environment.REPLACES_MODULE, gated.stderr, entry=elsewhere, module="pytest", held=elsewhere / "pytest.py")

    monkeypatch.setattr(launcher_files, "launcher_dir", lambda: work / "serve")  # as the copy's gates digest it
    record(build_project, m, GATES.backend_ops, GATES.equivalence)
    shipped = python_ci(work, build_project, "ship", "--profile", "cpu", env=env)
    wheels = list((build_project.root / "dist").glob("onebit_serve-*.whl"))
    held = [zipfile.ZipFile(w).read("serve/recipes.py").decode() for w in wheels]
    assert not any(MARK in text for text in held), shipped.stdout[-2000:]
    assert shipped.returncode != 0, shipped.stdout[-2000:] + shipped.stderr[-2000:]
