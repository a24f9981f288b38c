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

from ci import environment as program_environment
from ci.errors import ConfigError, Refused
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


@pytest.mark.parametrize(
    "planted",
    ["tests/hostile/conftest.py", "tests/hostile/__init__.py", "conftest.py", "__init__.py", "tests/hostile/conftest.cpython-311-x86_64-linux-gnu.so"],
)
def test_what_pytest_imports_on_the_way_to_a_file_the_gate_runs_is_in_the_route_digest(tmp_path: Path, planted: str) -> None:
    """pytest imports the conftest.py of every folder from the root down to a file it runs, and the __init__.py of each
    package on the way: a tests/hostile/conftest.py added for the gate run dropped the failing recipe tests, and the
    digest read only the three files of tests/hostile (hostile pass 5). A compiled conftest is imported ahead of the
    .py beside it. Another test module of the folder, which the gate does not run, is not in it."""
    source = source_with(tmp_path, TWO)
    (source / "tests" / "hostile").mkdir()
    (source / route.LAUNCHER_ATTACKS[0]).write_text(TWO)
    before = route.route_tests_sha256(source)
    (source / "tests" / "hostile" / "test_not_run_by_the_gate.py").write_text(TWO)
    assert route.route_tests_sha256(source) == before
    (source / planted).write_text("def pytest_collection_modifyitems(config, items):\n    items[:] = []\n")
    assert route.route_tests_sha256(source) != before
    assert source / planted in route.route_test_files(source)


def test_a_conftest_beside_the_launcher_attacks_written_during_the_run_is_an_error(tmp_path: Path) -> None:
    """The digest the gate compares as its tests end reads tests/hostile's conftest too."""
    source = source_with(tmp_path, "from pathlib import Path\n\n\ndef test_it() -> None:\n    (Path.cwd() / 'tests' / 'hostile' / 'conftest.py').write_text('# planted\\n')\n")
    (source / "tests" / "hostile").mkdir()
    result = route.route_gate(tmp_path / "out", source)
    assert result.status is Status.ERROR
    assert route.CHANGED_WHILE_RUNNING in result.problems


def test_a_pytest_on_the_python_path_is_refused_before_the_gate_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """PYTHONPATH comes before site-packages in the gate's Python: a pytest.py there wrote a passing JUnit of its own
    (hostile pass 5). Nothing starts: no JUnit is written."""
    source = source_with(tmp_path, TWO)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "pytest.py").write_text("def main(args):\n    return 0\n")
    monkeypatch.setenv("PYTHONPATH", str(elsewhere))
    with pytest.raises(Refused) as refused:
        route.route_gate(tmp_path / "out", source)
    assert said(program_environment.REPLACES_MODULE, refused.value.message, entry=elsewhere, module="pytest", held=elsewhere / "pytest.py")
    assert list((tmp_path / "out").iterdir()) == []
