"""Hostile pass 6: the judge imports serve/, and a backend_ops record binds no digest of it.

Every gate's record carries ``ci_sha256``, the digest of ci/, so that "a judge weakened for the run and put back
afterwards no longer counts" (docs/release.md). But ci imports modules of serve/ as it starts (``serve.bounded`` from
ci/command.py, ci/files.py, ci/digests.py, ...), and only the route, equivalence and perf records bind the launcher's
digest. A line planted in serve/bounded.py for the backend_ops run runs inside the judging process: here it wraps the
backend_ops gate's ``_execute`` so that the build's failing run reads as the passing one. Taken out afterwards, the
route and equivalence records (on the clean launcher) and ship's copy of serve/ agree, the backend_ops record's
``ci_sha256`` is the clean ci/'s, and ship writes the wheel for a build whose own library fails backend_ops.

Run in a copy of the checkout with ``python -m ci`` started there, as tests/hostile/test_pass5_route_conftest.py does.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from ci.gates.serving import launcher as launcher_files
from tests.hostile.failing_build import prepared
from tests.hostile.test_pass5_route_conftest import ROOT, python_ci, secrets
from tests.release.test_ship import GATES, built, record
from tests.support.build import BuildFork, add_fixture_patch
from tests.support.project import Project

PLANTED = """

# planted for the backend_ops run (hostile pass 6): the build's failing run read as the passing one
class _Planted:
    def find_spec(self, name, path=None, target=None):
        if name != "ci.gates.backend_ops.run":
            return None
        import importlib.machinery
        import sys

        sys.meta_path.remove(self)
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        real = spec.loader.exec_module

        def exec_module(module):
            real(module)
            import dataclasses
            from pathlib import Path

            passing = (Path(__file__).resolve().parents[1] / "tests" / "backend_ops" / "data" / "cpu.console.txt").read_text()
            execute = module._execute

            def _execute(step, timeout, log_dir):
                done, outcome, log = execute(step, timeout, log_dir)
                if done.returncode == 1:
                    output = done.output if "sql" in step.argv else passing
                    done = dataclasses.replace(done, returncode=0, output=output)
                    outcome = dataclasses.replace(outcome, returncode=0)
                return done, outcome, log

            module._execute = _execute

        spec.loader.exec_module = exec_module
        return spec


import sys as _sys

_sys.meta_path.insert(0, _Planted())
"""


def clean_copy(tmp_path: Path) -> Path:
    work = tmp_path / "work"
    for name in ("ci", "serve", "tests"):
        shutil.copytree(ROOT / name, work / name, ignore=shutil.ignore_patterns(*launcher_files.LAUNCHER_SKIPS))
    shutil.copy2(ROOT / "pyproject.toml", work / "pyproject.toml")
    return work


def test_a_judge_weakened_through_serve_for_the_backend_ops_run_does_not_ship(
    build_project: Project, build_fork: BuildFork, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    prepared(build_project, monkeypatch)
    add_fixture_patch(build_project, build_fork, "wrong.patch", "ggml/ggml.c", "return 42;", "return 41;")
    m = built(build_project)
    work = clean_copy(tmp_path)
    env = secrets(tmp_path, monkeypatch)
    own = python_ci(work, build_project, "gpu-tests", "--profile", "cpu", "--gate", "backend_ops", env=env)
    assert own.returncode == 7, own.stdout[-2000:] + own.stderr[-2000:]  # the build's own fails

    bounded = work / "serve" / "bounded.py"
    committed = bounded.read_text()
    bounded.write_text(committed + PLANTED)
    planted = python_ci(work, build_project, "gpu-tests", "--profile", "cpu", "--gate", "backend_ops", env=env)
    bounded.write_text(committed)  # taken out after the gate run
    assert planted.returncode == 0, planted.stdout[-2000:] + planted.stderr[-2000:]  # the planted judge passed it

    monkeypatch.setattr(launcher_files, "launcher_dir", lambda: work / "serve")  # as the copy's gates digest it
    record(build_project, m, GATES.route, GATES.equivalence)
    shipped = python_ci(work, build_project, "ship", "--profile", "cpu", env=env)
    assert shipped.returncode != 0, (planted.stdout[-1500:], shipped.stdout[-2000:] + shipped.stderr[-2000:])
    assert not list((build_project.root / "dist").glob("onebit_serve-*.whl"))
    said_ = shipped.stdout + shipped.stderr
    assert "backend_ops" in said_, said_[-2000:]
    assert "ci_sha256" in said_, said_[-2000:]  # its record judged other code than ship's
