"""The route gate runs every route test as the checkout says: pytest's environment options do not reach it, and a
skipped test fails it (a hostile pass recorded 'passed: 0/180' with every test skipped, and 5/5 with -k). It reads
the project's own pytest configuration and no other, and imports the launcher's source, not bytecode left beside it."""

from __future__ import annotations

import importlib.util
import os
import py_compile
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from ci.errors import ConfigError
from ci.gates.results import Status
from ci.gates.route import run as route
from tests.support.messages import said


def source_with(tmp_path: Path, tests: str) -> Path:
    """A checkout holding only tests/serve/test_it.py (and an empty tests/route): what the gate runs, without the real
    suite's seconds."""
    (tmp_path / "src" / "tests" / "route").mkdir(parents=True)
    (tmp_path / "src" / "tests" / "serve").mkdir(parents=True)
    (tmp_path / "src" / "tests" / "serve" / "test_it.py").write_text(tests)
    (tmp_path / "src" / "pyproject.toml").write_text(PROJECT_CONFIG)
    (tmp_path / "out").mkdir()
    return tmp_path / "src"


PROJECT_CONFIG = '[tool.pytest.ini_options]\naddopts = ["-ra", "--strict-markers"]\n'


def plant_stale_bytecode(module: Path, judged: str, shipped: str) -> bytes:
    """``module`` holding ``shipped``, with the bytecode of ``judged`` in its __pycache__ that Python takes for it:
    the two sources are the same size, and the source's mtime is put back (a .pyc is checked by those two alone)."""
    assert len(judged.encode()) == len(shipped.encode())
    module.write_text(judged)
    py_compile.compile(str(module), cfile=importlib.util.cache_from_source(str(module)), invalidation_mode=py_compile.PycInvalidationMode.TIMESTAMP)
    stat = module.stat()
    module.write_text(shipped)
    os.utime(module, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    plain = subprocess.run([sys.executable, "-c", f"import {module.stem}; print({module.stem}.OK)"], cwd=module.parent, capture_output=True, text=True)
    assert plain.stdout == "True\n", plain  # a plain import takes the planted bytecode: the attack is real
    return Path(importlib.util.cache_from_source(str(module))).read_bytes()


GOOD, BAD = "OK = True\n", "OK = None\n"


TWO = "def test_one() -> None:\n    assert 1\n\n\ndef test_two() -> None:\n    assert 2\n"


def test_pytest_environment_options_do_not_reach_the_gate(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    source = source_with(tmp_path, TWO)
    (tmp_path / "skipall.py").write_text(
        "import pytest\n\ndef pytest_collection_modifyitems(items):\n    for i in items:\n        i.add_marker(pytest.mark.skip(reason='x'))\n"
    )
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    monkeypatch.setenv("PYTEST_PLUGINS", "skipall")
    monkeypatch.setenv("PYTEST_ADDOPTS", "-k test_one")
    result = route.route_gate(tmp_path / "out", source)
    assert (result.status, result.summary) == (Status.PASSED, "2/2 route tests passed")


def test_a_skipped_route_test_fails_the_gate(tmp_path: Path) -> None:
    source = source_with(tmp_path, TWO + "\n\n@__import__('pytest').mark.skip(reason='not here')\ndef test_three() -> None:\n    pass\n")
    result = route.route_gate(tmp_path / "out", source)
    assert result.status is Status.FAILED
    assert said(route.SKIPPED, result.problems[-1], count=1)
    assert "test_three: not here" in result.problems[-1]


def test_bytecode_left_in_the_tree_is_not_what_the_route_tests_judge(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A good module's .pyc planted in __pycache__ beside a bad source of the same size and mtime: the route tests
    imported the good bytecode and passed, while the digest and the wheel held the bad source."""
    source = source_with(tmp_path, "import verdict\n\n\ndef test_the_launcher_as_shipped() -> None:\n    assert verdict.OK\n")
    planted = plant_stale_bytecode(source / "verdict.py", GOOD, BAD)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))
    (tmp_path / "tmp").mkdir()
    result = route.route_gate(tmp_path / "out", source)
    assert result.status is Status.FAILED
    assert result.summary == "0/1 route tests passed"
    assert [p.read_bytes() for p in (source / "__pycache__").iterdir()] == [planted]  # neither read nor written
    assert not (source / "tests" / "serve" / "__pycache__").exists()
    assert list((tmp_path / "tmp").iterdir()) == []  # its own bytecode folder is removed afterwards


@pytest.mark.parametrize(
    ("path", "section"), [("pytest.ini", "[pytest]"), (".pytest.ini", "[pytest]"), ("tests/tox.ini", "[pytest]"), ("tests/serve/setup.cfg", "[tool:pytest]")]
)
def test_a_pytest_config_beside_the_project_s_own_does_not_reach_the_gate(tmp_path: Path, path: str, section: str) -> None:
    """pytest reads the first pytest configuration it finds from tests/serve upwards (pytest.ini before pyproject.toml
    in a folder): one added for the gate run with -k, and removed afterwards, recorded 1/1 passed on a suite of two."""
    source = source_with(tmp_path, TWO)
    (source / path).write_text(f"{section}\naddopts = -k test_one\n")
    result = route.route_gate(tmp_path / "out", source)
    assert (result.status, result.summary) == (Status.PASSED, "2/2 route tests passed")


def test_a_checkout_without_its_pytest_configuration_is_one_line(tmp_path: Path) -> None:
    source = source_with(tmp_path, TWO)
    (source / "pyproject.toml").unlink()
    with pytest.raises(ConfigError) as refused:
        route.route_gate(tmp_path / "out", source)
    assert str(refused.value) == route.NO_PROJECT_CONFIG.format(config=source / "pyproject.toml")


def test_an_installed_pytest_plugin_does_not_reach_the_gate(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A package on the path whose entry point (pytest11) deselects tests: pytest loads every such plugin it finds,
    and the record said 1/1 passed on a suite of two."""
    source = source_with(tmp_path, TWO)
    site = tmp_path / "site"
    (site / "deselect-0.dist-info").mkdir(parents=True)
    (site / "deselect-0.dist-info" / "METADATA").write_text("Metadata-Version: 2.1\nName: deselect\nVersion: 0\n")
    (site / "deselect-0.dist-info" / "entry_points.txt").write_text("[pytest11]\ndeselect = deselect_plugin\n")
    (site / "deselect_plugin.py").write_text(
        "def pytest_collection_modifyitems(config, items):\n    kept = [i for i in items if i.name == 'test_one']\n"
        "    config.hook.pytest_deselected(items=[i for i in items if i not in kept])\n    items[:] = kept\n"
    )
    monkeypatch.setenv("PYTHONPATH", str(site))
    result = route.route_gate(tmp_path / "out", source)
    assert (result.status, result.summary) == (Status.PASSED, "2/2 route tests passed")


SHADOW = """import os, sys
sys.path[:] = [p for p in sys.path if p not in ("", os.getcwd())]
sys.modules.pop("pytest", None)
import pytest


class Deselect:
    def pytest_collection_modifyitems(self, config, items):
        kept = [i for i in items if i.name == "test_one"]
        config.hook.pytest_deselected(items=[i for i in items if i not in kept])
        items[:] = kept


sys.exit(pytest.main(sys.argv[1:], plugins=[Deselect()]))
"""


def test_a_module_in_the_checkout_does_not_shadow_pytest(tmp_path: Path) -> None:
    """``python -m pytest`` in the checkout put the checkout first on sys.path: a pytest.py there ran instead, passed
    pytest a plugin of its own that deselected a test, and the record said 1/1 passed on a suite of two."""
    source = source_with(tmp_path, TWO)
    (source / "pytest.py").write_text(SHADOW)
    result = route.route_gate(tmp_path / "out", source)
    assert (result.status, result.summary) == (Status.PASSED, "2/2 route tests passed")
