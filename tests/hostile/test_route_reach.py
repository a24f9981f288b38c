"""The route gate runs every launcher test that guards a refusal (issue 43, item 6). With ``serve.recipes.env_problem``
returning None, the route gate still passed 180/180: the recipe refusal tests live in tests/hostile, which the gate did
not run. Every test module of the suite that exercises the launcher alone (it imports ``serve`` and no ``ci``) is now
among what the gate runs and what its record is bound to.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

from ci.gates.route import run as route

ROOT = Path(__file__).resolve().parents[2]


def launcher_alone(path: Path) -> bool:
    """Whether the test module at ``path`` imports the launcher (serve) and nothing of the orchestration (ci)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module.split(".")[0])
        elif isinstance(node, ast.Import):
            found |= {a.name.split(".")[0] for a in node.names}
    return "serve" in found and "ci" not in found


def gate_runs(path: Path) -> bool:
    rel = path.relative_to(ROOT).as_posix()
    return any(rel == t or rel.startswith(t.rstrip("/") + "/") for t in route.TESTS_RUN)


def test_every_test_module_of_the_launcher_alone_is_run_by_the_route_gate() -> None:
    modules = sorted(p for p in (ROOT / "tests").rglob("test_*.py") if launcher_alone(p))
    assert [p.relative_to(ROOT).as_posix() for p in modules if not gate_runs(p)] == []
    assert any("hostile" in p.parts for p in modules)  # the recipe refusal tests among them


def test_the_gate_collects_the_recipe_refusal_tests_and_binds_its_record_to_them(tmp_path: Path) -> None:
    argv = route.pytest_argv(tmp_path / "junit.xml")
    done = subprocess.run([*argv, "--collect-only"], cwd=ROOT, capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert any(line.startswith("tests/hostile/test_recipe_launch_keys.py::") for line in done.stdout.splitlines()), done.stdout[-2000:]
    assert "tests/hostile/test_recipe_launch_keys.py" in route.ROUTE_TESTS
    assert sys.executable == argv[0]
